"""The broker's HTTP edge: the ASGI app, its routes, parsers, schemas and server.

The only package that imports starlette, pydantic or uvicorn.
:mod:`~broker.http.app` authenticates and dispatches, :mod:`~broker.http.routes`
is the one table of routes, :mod:`~broker.http.parsers` turns bodies into
operations on the hot path, :mod:`~broker.http.schemas` and
:mod:`~broker.http.openapi` describe them, :mod:`~broker.http.server` runs
uvicorn around the app.
"""
