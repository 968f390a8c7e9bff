"""GC tuning: only in a process tuned as a broker's; there pauses nest and overlap
across threads, and the collector ends as it began."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker import gcpause
from broker.gcpause import BURST_OBJECTS, SMALL_BATCH, gc_paused, gc_paused_for

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def restore_gc() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


@pytest.fixture()
def broker_process(restore_gc: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pauses on, as after tune_for_broker_process (whose thresholds are tested in a
    subprocess: they would outlive this test)."""
    monkeypatch.setattr(gcpause, "_tuned", True)


def run_python(code: str) -> str:
    """``code`` in a fresh interpreter with this checkout first on the path; its stdout."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_nested_and_overlapping_pauses_end_enabled(broker_process: None) -> None:
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with gc_paused():
        assert not gc.isenabled()
        t.start()
        assert inside.wait(10)
        with gc_paused():
            assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread still pauses it
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_a_collector_switched_off_stays_off(broker_process: None) -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_a_burst_of_new_objects_skips_the_young_generations(broker_process: None) -> None:
    gc.enable()
    gc.collect()
    with gc_paused():
        burst = [[i] for i in range(BURST_OBJECTS + 50_000)]  # tracked, alive after
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert not any(id(o) in young for o in burst[::1000])
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    with gc_paused():
        few = [[i] for i in range(100)]
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert all(id(o) in young for o in few)  # small pauses leave the generations alone


def test_only_large_batches_pause(broker_process: None) -> None:
    gc.enable()
    with gc_paused_for(SMALL_BATCH):
        assert gc.isenabled()
    with gc_paused_for(SMALL_BATCH + 1):
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_untuned_process_is_never_paused(restore_gc: None) -> None:
    """A library (an embedded broker, a client) leaves the collector alone."""
    assert not gcpause.tuned()  # nothing in the test process tunes it
    gc.enable()
    before = gc.get_threshold()
    with gc_paused(), gc_paused_for(SMALL_BATCH * 100):
        assert gc.isenabled()
    assert gc.isenabled() and gc.get_threshold() == before


def test_tuning_raises_thresholds_and_turns_pauses_on() -> None:
    out = run_python("""
        import gc
        from broker import gcpause
        gc.set_threshold(700, 10, 5_000)  # a higher one is kept
        with gcpause.gc_paused():
            untuned = gc.isenabled()
        gcpause.tune_for_broker_process()
        with gcpause.gc_paused():
            tuned = gc.isenabled()
        print(untuned, tuned, gc.isenabled(), gc.get_threshold(), gcpause.tuned())
    """)
    assert out.split(" ", 3)[:3] == ["True", "False", "True"]
    assert out.split(" ", 3)[3].strip() == "(50000, 20, 5000) True"


def test_the_brokers_entry_point_tunes_its_process() -> None:
    """``python -m broker`` / ``osqueue-broker`` tune GC before anything else runs
    (here it stops at once: the token variable named is unset)."""
    out = run_python("""
        import gc
        from broker.cli import main
        before = gc.get_threshold()
        code = main(["--store", "file:///nonexistent", "--token-env", "OSQ_TEST_UNSET_TOKEN"])
        print(code, before[0], gc.get_threshold()[0])
    """)
    assert out.split() == ["2", "700", "50000"]


def test_a_publish_pauses_the_collector_for_the_parse_not_the_store_calls(
        broker_process: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish on a broker that does not hold the chunk parsed reads it from the
    store with the collector running (a slow store must not keep it off) and
    parses it with the collector paused; the chunk's jobs are pushed."""
    from broker.service import staging
    from broker.storage import FileStore
    from tests.support.inprocess import run, started, stored

    seen: dict[str, bool] = {}

    class Watched(FileStore):
        def get(self, key: str) -> bytes:
            if "/staging/" in key:
                seen["get"] = gc.isenabled()
            return super().get(key)

    parse = staging.parse_staged_chunk

    def watched_parse(*args: object, **kwargs: object) -> object:
        seen["parse"] = gc.isenabled()
        return parse(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(staging, "parse_staged_chunk", watched_parse)
    store = Watched(tmp_path)

    async def main() -> None:
        a = await started(store, "http://a")
        b = await started(store, "http://b")
        await a.stage("q", "w-1/p0-t0-c0", b'\t"one"\n\t"two"\n')
        await b.publish("q", "w-1/", ["w-1/p0-t0-c0"], once="write:w-1/")
        await b.stop(drain_s=5)
        await a.stop(drain_s=5)

    gc.enable()
    run(main())
    assert seen == {"get": True, "parse": False}
    assert sorted(j.payload for j in stored(store).jobs.values()) == [b'"one"', b'"two"']
