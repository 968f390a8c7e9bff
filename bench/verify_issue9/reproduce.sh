#!/usr/bin/env bash
# Run the defect tests of issue 9 against the OLD code (commit 7962099, checked out in
# $OLD, default ../before next to the repo: `git worktree add ../before 7962099`), with the
# thin shims of shims.diff, and against this checkout ($MAIN). Writes logs to $LOGS
# (default /tmp/osq-verify-issue9). Nothing is written to $MAIN (no bytecode, no cache).
#
# Light on purpose (a benchmark shares the machine): in-process tests, at most two
# broker processes at a time, no Spark tests, tests/broker/test_review_regressions.py
# skipped. Takes about 8 minutes on the old code (the hangs wait out their 60 s
# timeout) and about 2 minutes on main.
#
# Usage: ./reproduce.sh          (old code, then main)
#        ./reproduce.sh main     (only the main half, e.g. after main moved on)
set -uo pipefail
MODE=${1:-all}

VERIFY=$(cd "$(dirname "$0")" && pwd)
MAIN=${MAIN:-$(cd "$VERIFY/../.." && pwd)}
OLD=${OLD:-$(cd "$MAIN/.." && pwd)/before}
PY=${PY:-$MAIN/.venv/bin/python}
LOGS=${LOGS:-/tmp/osq-verify-issue9}
mkdir -p "$LOGS"
export PYTHONDONTWRITEBYTECODE=1

PYTEST_OPTS=(-o timeout=60 -p no:cacheprovider --tb=native --show-capture=no -rA)
# --tb=native: pytest's own traceback rendering crashed (INTERNALERROR, "AST
# constructor recursion depth mismatch") on a hung test; native tracebacks do not.

TESTS=(tests/broker/test_failure_paths.py tests/broker/faults.py tests/broker/inprocess.py
       tests/broker/helpers.py tests/broker/test_failover.py tests/broker/test_storage_faults.py
       tests/broker/test_storage.py tests/osqueue_spark/test_client.py)
STORAGE_SPOT=(
  "tests/broker/test_storage_faults.py::test_lock_held_by_a_paused_process_is_waited_on_for_a_bounded_time"
  "tests/broker/test_storage_faults.py::test_s3_permanent_errors_are_refused_without_retrying[write_if_match-403-AccessDenied-denied access]"
  "tests/broker/test_storage.py::test_self_test_survives_a_write_whose_response_was_lost[Conflict-create-file]"
  "tests/broker/test_storage.py::test_self_test_survives_a_write_whose_response_was_lost[StorageUnavailable-create-memory]"
)

# -- 1. the old code, shimmed ---------------------------------------------------------
if [ "$MODE" != main ]; then
[ "$(git -C $OLD rev-parse --short=7 HEAD)" = "7962099" ] || { echo "$OLD is not at 7962099"; exit 1; }
if git -C $OLD apply --reverse --check $VERIFY/shims.diff 2>/dev/null; then
  echo "shims already applied in $OLD"
else
  git -C $OLD apply $VERIFY/shims.diff || { echo "cannot apply shims.diff"; exit 1; }
fi
for f in "${TESTS[@]}"; do cp "$MAIN/$f" "$OLD/$f"; done        # the tests, unchanged
cp $VERIFY/probes/test_old_probes.py $VERIFY/probes/test_old_failover_probe.py $OLD/tests/broker/

cd $OLD
PYTHONPATH=$OLD $PY -c 'import broker, osqueue_spark; print("old run imports", broker.__file__, osqueue_spark.__file__)'
run_old() { local log=$1; shift; PYTHONPATH=$OLD $PY -m pytest "${PYTEST_OPTS[@]}" "$@" > "$LOGS/$log" 2>&1; }
run_old old_failure_paths.log tests/broker/test_failure_paths.py
run_old old_client.log tests/osqueue_spark/test_client.py
run_old old_failover.log tests/broker/test_failover.py
run_old old_storage_spot.log "${STORAGE_SPOT[@]}"
run_old old_probes.log -s tests/broker/test_old_probes.py tests/broker/test_old_failover_probe.py
fi

# -- 2. main, the same test files --------------------------------------------------------
cd $MAIN
PYTHONPATH=$MAIN $PY -c 'import broker; print("main run imports", broker.__file__)'
echo "main at $(git -C $MAIN log -1 --format='%h %ci') ($(git -C $MAIN status --short | wc -l) uncommitted changes)"
for f in "${TESTS[@]}"; do cmp -s "$MAIN/$f" "$OLD/$f" || echo "NOTE: $f differs from the copy run on the old code"; done
run_main() { local log=$1; shift; PYTHONPATH=$MAIN $PY -m pytest "${PYTEST_OPTS[@]}" "$@" > "$LOGS/$log" 2>&1; }
run_main main_failure_paths.log tests/broker/test_failure_paths.py
run_main main_client.log tests/osqueue_spark/test_client.py
run_main main_failover.log tests/broker/test_failover.py
run_main main_storage_spot.log "${STORAGE_SPOT[@]}"

# -- 3. summary --------------------------------------------------------------------------
for log in "$LOGS"/*.log; do
  echo "== $(basename "$log")"
  grep -E "^(PASSED|FAILED|ERROR) |^=+ .*(passed|failed|error)" "$log"
done
for log in old_failure_paths old_client old_failover old_storage_spot old_probes main_failure_paths main_client main_failover main_storage_spot; do
  echo "== why each test failed: $log"
  python3 $VERIFY/summarize.py "$LOGS/$log.log"
done
