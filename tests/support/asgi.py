"""One HTTP request through an ASGI app in process (no sockets): :func:`call`."""

from __future__ import annotations

from typing import Any


async def call(app: Any, method: str, path: str, body: bytes = b"", *,
               token: str | None = None, content_type: str | None = "application/json",
               query: str = "", headers: dict[str, str] | None = None,
               client: tuple[str, int] = ("127.0.0.1", 1)
               ) -> tuple[int, bytes, dict[bytes, bytes]]:
    """``(status, body, headers)`` of one request from ``client``, with ``headers``
    besides the content type and length (and the token's); the body arrives in one
    piece (``content_type`` None: no such header). Of a header the answer repeats,
    the last one."""
    sent_headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        sent_headers.append((b"content-type", content_type.encode()))
    if token:
        sent_headers.append((b"authorization", f"Bearer {token}".encode()))
    sent_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": query.encode(), "headers": sent_headers,
             "client": client, "server": ("127.0.0.1", 80)}
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent
                                     if m["type"] == "http.response.body"), \
        dict(start.get("headers", []))
