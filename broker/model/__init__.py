"""The queue's model: its state, its rules, and its bytes. Pure.

No store, no asyncio, no clock: every rule takes the time as an argument
(``now_ms``), and the bytes are a function of the state (never the reverse).
Imports only the broker's leaves (errors, limits, paths, timefmt, wire) and itself.

The layers inside, lowest first::

    job, columns, calls            a job and its lease; column-wise results; request keys
    receipts, tokens               answers of recent calls; token tags
    ratelimit                      the dispatch rate limit's token bucket (no model import)
    job_lines                      a job's line in the object (byte templates)
    jobtable, state                the queue: seq -> job, settings, counters, windows
    indexes, segments              heaps; segment objects and the head's refs
    codec, decode                  the object's bytes, written and read
    ops, checks                    the operations and their results; input checks
    lifecycle                      every status change, in one table
    segment_claims                 jobs moving from segments into the head
    idempotency, views, archive    key windows and receipts; stats and pages; archive lines
    queue_rules, cancels           the queue's own rules; cancelling jobs
    transitions                    the rules: ``apply(state, op, now_ms)``

The names below are the model's public face.
"""

from broker.model.format.codec import encode, stamp
from broker.model.format.decode import decode_state
from broker.model.job import Job
from broker.model.state import QueueState, Settings
from broker.model.transitions import apply

__all__ = ["Job", "QueueState", "Settings", "apply", "decode_state", "encode", "stamp"]
