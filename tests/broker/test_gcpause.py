"""gc_paused: pauses nest and overlap across threads; the collector ends as it began."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from broker.gcpause import gc_paused


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
