"""Automatic collection is paused inside the block and comes back as it was, even on error."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from app.core.gc_pause import gc_paused

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_collection_is_paused_inside_and_back_after() -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_still_restores_collection() -> None:
    gc.enable()
    with pytest.raises(RuntimeError, match="boom"), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_collection_that_was_off_stays_off() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_pauses_on_two_threads_resume_when_the_last_ends() -> None:
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=other)
    with gc_paused():
        worker.start()
        inside.wait(10)
    assert not gc.isenabled(), "the other thread's pause is still open"
    release.set()
    worker.join(10)
    assert gc.isenabled()
