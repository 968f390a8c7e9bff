"""Groups: a job's group, per-group limits, fair dispatch between
groups, fifo groups and per-group rates: the pure, derived structures. Pure:
values in, values out; the time is passed in.

- :mod:`~broker.model.groups.names`: the one check of a group's name, and
  names interned as small ints (gid 0: no group);
- :mod:`~broker.model.groups.buckets`: per-group token buckets, in memory
  bounded by the groups short of a full bucket;
- :mod:`~broker.model.groups.settings`: the seven ``group_*`` queue settings,
  checked in one place, frozen;
- :mod:`~broker.model.groups.directories`: the runs of grouped segment
  objects in memory (the group of a position), and the group-major order a
  push by reference writes a chunk in (not yet used: claims do not yet take
  grouped jobs from segments);
- :mod:`~broker.model.groups.dispatch`: which group a claim serves next
  (priority, then stride scheduling by weight; groups at their limit, not due
  or out of tokens parked, never scanned).

Nothing here knows where jobs live (the head, segments, spills): the claim
tells :class:`~broker.model.groups.dispatch.Dispatch` each group's next job.
What lives here imports the broker's leaves and :mod:`broker.model.ratelimit`
(directories: the segment format too), never the state or the rules (the
import contracts ``model-layers`` and ``model-groups`` in ``pyproject.toml``).

Nothing is exported here: import the module that defines a name.
"""
