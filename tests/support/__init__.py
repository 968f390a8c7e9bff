"""Test support: what the tests run against and share.

Servers on 127.0.0.1 (``motoserver``, ``gcsserver``, ``azuriteserver``,
``connectserver``, ``faultproxy``; each also runs on its own with
``python -m tests.support.NAME``), the storage fault wrapper and injectable
clock (``faults``), in-process brokers (``inprocess``), one request through an
ASGI app (``asgi``), broker child processes
and their ready line (``broker_process``), a broker in a dict for the client's
mock transport (``fake_broker``), queue states for the pure tests (``states``),
the Azurite fixtures (``azurite``), the HTTP fuzz suite's strategies and
harness (``fuzz_values``, ``fuzz_requests``, ``fuzz_harness``), stores a chaos run
leaves, for its checker's tests (``chaos_stores``), and the benchmarks page's
figures against its results files (``doc_figures``).

Benchmarks and tools may import from here; nothing here imports from them.
"""
