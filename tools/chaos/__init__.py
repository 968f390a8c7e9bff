"""The chaos runner (``python -m tools.chaos``, from the checkout's root): real
broker processes on one store, real clients, a seeded nemesis, then a check of the
store itself. What one run does, step by step, is the docstring of :mod:`.cli` (the
``--help`` text).

Modules, in the order a run uses them: ``cli`` (options, presets, main), ``schedule``
(the seeded nemesis schedule), ``children`` (child processes), ``store`` (the file or
S3 store and the runner's direct reads), ``brokers`` (broker process slots),
``clients`` (producer and consumer threads and their records), ``bulk`` (the
producers whose jobs go by reference: bulk pushes and Spark-like publishes),
``wide`` (the load of wide queues: big claims, failures, deaths, redrives, the owner
killed mid-claim), ``groups`` (job groups: the groups pushed jobs get, the log of
claims and settlements, head samples, and the checks of group limits and fifo
order), ``segments`` (the segment and spill objects seen, and the wait for
the sweep once drained),
``nemesis`` (carrying out the schedule, outage measurement), ``checker`` (the
total-queue check),
``report`` (figures, the bar, the JSON result, the summary), ``run`` (one run end to
end).
"""

from __future__ import annotations

from tools.chaos.cli import PRESETS, build_parser, check_args, main, parse_args
from tools.chaos.schedule import Event, make_schedule

__all__ = ["PRESETS", "Event", "build_parser", "check_args", "main", "make_schedule",
           "parse_args"]
