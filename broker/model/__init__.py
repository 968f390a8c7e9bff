"""The queue's model: its state, its rules, and its bytes. Pure.

No store, no asyncio, no clock: every rule takes the time as an argument
(``now_ms``), and the bytes are a function of the state (never the reverse).
Imports only the broker's leaves (errors, limits, paths, timefmt, wire) and itself.

The layers inside, lowest first (a layer imports only the layers below it;
the import contract ``model-layers`` in ``pyproject.toml`` holds them, and
lists every module)::

    job, columns, calls, ratelimit      a job and its lease; column-wise results;
                                        request keys; the dispatch rate limit
    receipts, tokens, job_lines         answers of recent calls; token tags; a job's
                                        line in the object (byte templates)
    jobtable, claim_records             seq -> job; a claim's record (its one lease)
    state                               the queue: jobs, claims, settings, counters, windows
    indexes                             the ready, delayed and lease heaps
    format/                             the bytes: the head written and read, segment
                                        objects, archive objects
    groups/                             groups' derived structures: names, settings,
                                        per-group buckets, fair dispatch
    ops                                 operations and results
    spill_parts                         claims held at claim records' spill parts
    held                                jobs held at claim records' segment (and spill) parts
    checks, lifecycle                   input checks; every status change, in one table
    segments/                           segment references and claim order; jobs
                                        moving from segments into the head
    idempotency, views                  key windows and receipts; stats and pages
    inserts, queue_rules, cancels,      new jobs; the queue's own rules; cancelling;
    browse                              the dashboard's views
    transitions                         the rules: ``apply(state, op, now_ms)``

The rules sit flat here; the two sub-packages group what has an axis of its
own: :mod:`broker.model.format` (bytes, which may import the state but never
the rules) and :mod:`broker.model.segments` (what the head keeps of segment
objects and how their jobs come into it).

No face: this package exports nothing, and callers import the module that
defines a name (``from broker.model.format.decode import decode_state``).
Its callers are the broker's own service and HTTP layers, the Spark reader
and tools, and between them they use some eighty names of nearly every
module, down to segment windows and claim planning: a face would be as
wide as the package, and importing it would load all of it. A caller that
needs only the bytes (the Spark reader on an executor) loads the format
and the state, not the rules.
"""
