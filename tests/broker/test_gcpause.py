"""gc_paused: pauses nest and overlap across threads; the collector ends as it began."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from broker.gcpause import BURST_OBJECTS, SMALL_BATCH, gc_paused, gc_paused_for


@pytest.fixture()
def restore_gc() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_nested_and_overlapping_pauses_end_enabled(restore_gc: None) -> None:
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


def test_a_collector_switched_off_stays_off(restore_gc: None) -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_a_burst_of_new_objects_skips_the_young_generations(restore_gc: None) -> None:
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


def test_only_large_batches_pause(restore_gc: None) -> None:
    gc.enable()
    with gc_paused_for(SMALL_BATCH):
        assert gc.isenabled()
    with gc_paused_for(SMALL_BATCH + 1):
        assert not gc.isenabled()
    assert gc.isenabled()
