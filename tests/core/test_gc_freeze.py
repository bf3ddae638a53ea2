"""The freeze the workbench makes after a document is read and after each plan is matched by
an unfreeze: a garbage cycle frozen with them is freed once the next document opens
(app/core/gc_pause.py)."""

from __future__ import annotations

import gc
import weakref

from app.core.gc_pause import freeze_long_lived, thaw_and_collect


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_a_cycle_frozen_with_a_document_is_collected_when_the_next_one_opens() -> None:
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    gone = weakref.ref(a)
    try:
        freeze_long_lived()
        del a, b
        gc.collect()
        assert gone() is not None  # frozen: full collections pass it over
        thaw_and_collect()
        assert gone() is None and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
