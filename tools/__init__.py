"""Tools run by hand or by make, not benchmarks: the chaos runner (``python -m
tools.chaos``) and the PySpark compatibility run (``tools/compat.py``, ``make
compat``)."""
