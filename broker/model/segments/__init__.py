"""Segments: immutable objects of pending jobs that the queue object refers to
instead of holding their jobs, so a commit costs the same at any depth of the
queue. Pure: values in, values out; the time is passed in.

A segment object holds pending jobs with consecutive seqs that share a
priority and a due time, in seq order. The head keeps a
:class:`~broker.model.state.SegmentRef` per segment (where it is, which
version, its seqs, priority and due time, and a cursor, ``taken``); a
segment is never rewritten: taking jobs advances the cursor in the head.

- :mod:`~broker.model.segments.refs`: the head's references: claim order
  across the inline ready heap and the segments, cursors, purge, lookups by
  seq;
- :mod:`~broker.model.segments.claims`: jobs moving from segments into the
  head: the windows a batch plans to load, claims merged with the inline
  heap, pages, purge, and a push by reference (reserve, then attach).

Not here: a segment's bytes and its reference's JSON
(:mod:`broker.model.format.segment_format`), and the store calls that
write, read and delete segment objects (:mod:`broker.service.segment_store`,
:mod:`broker.service.by_reference`). What lives here may import the state,
the bytes, the operations and the job lifecycle, never the rules above it
(``views``, ``cancels``, ``transitions``...): the import contracts ``model-layers`` and
``model-segments`` in ``pyproject.toml``.

Nothing is exported here: import the module that defines a name.
"""
