"""The JVM options of the tests' Spark drivers: the conftest's classic session, the
Connect server's (``tests.support.connectserver``) and the Spark programs the tests
run as users do (``SPARK_SUBMIT_OPTS``: the README's fresh venv, a venv's Python not
activated).

The tests' Spark jobs are short (seconds) and run on a 2-core machine beside three
other xdist workers: there, C2's compiler threads and G1's parallel and concurrent
GC threads cost more CPU than their faster code and shorter pauses give back. C1
alone (``-XX:TieredStopAtLevel=1``) and the serial collector took a small Spark
program (a local session, a group-by, a ``mapInPandas``) from 18.8-20.8 s of CPU to
11.2-11.7 s (four runs each, its processes' CPU in a cgroup, machine load 7-16); either
option alone gave 12-32 s. They change how the JVM
compiles and collects, not what a program computes or prints; a user's session
keeps the JVM's defaults.
"""

from __future__ import annotations

#: ``spark.driver.extraJavaOptions`` (or ``SPARK_SUBMIT_OPTS``) of a test's driver.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
