"""The bytes: how the queue's objects are spelled on storage. Pure.

- :mod:`~broker.model.format.codec`: the head (``queue.json``) written: its
  header, segment references, job lines (joined in cached blocks of 1,024
  seqs, so a commit re-encodes what changed) and key windows;
- :mod:`~broker.model.format.decode`: the head read back, every invariant
  checked;
- :mod:`~broker.model.format.segment_format`: a segment object's bytes, and
  the JSON of the head's reference to one;
- :mod:`~broker.model.format.spill_format`: a spill object's bytes (failed
  or dead jobs taken out of the head), and the one check of a read one;
- :mod:`~broker.model.format.spill_refs`: the head's references to spill
  objects (``"spills"``): their JSON, claim order, a dead object's redrive
  by reference, jobs taken out one by one;
- :mod:`~broker.model.format.archive`: archive objects' names and lines, and
  finding a job among them.

What lives here turns a state into bytes and bytes into a state. It imports
the state (``job``, ``job_lines``, ``jobtable``, ``state``, ``indexes``,
``receipts``, ``tokens``) and, inside, archive -> decode -> codec ->
spill_refs -> spill_format -> segment_format; never the rules (``ops``,
``lifecycle``, ``transitions``...) nor :mod:`broker.model.segments` (the
import contracts ``model-layers`` and ``model-format`` in ``pyproject.toml``). A job's own line
(:mod:`broker.model.job_lines`) is not here: the state keeps bulk-pushed jobs
as their lines, so it sits below the state.

Nothing is exported here: import the module that defines a name.
"""
