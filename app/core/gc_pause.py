"""Automatic garbage collection paused around a burst of allocations.

Loading a 50 MB document allocates ~400k small objects, which triggers several full collections
of ~100 ms each; each holds the GIL, so every other thread of the process (the GUI thread among
them) stalls. None of those objects is garbage, so the collections find nothing: pausing them
for the burst loses nothing. Pauses may overlap on several threads; collection resumes when the
last one ends, and only if it was on before the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Pauses:
    """How many pauses are open, and whether collection was on before the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.was_enabled = False


_pauses = _Pauses()


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic collection inside the block; the previous state is restored, even on error."""
    p = _pauses
    with p.lock:
        if p.depth == 0:
            p.was_enabled = gc.isenabled()
            gc.disable()
        p.depth += 1
    try:
        yield
    finally:
        with p.lock:
            p.depth -= 1
            if p.depth == 0 and p.was_enabled:
                gc.enable()


def freeze_long_lived() -> None:
    """``gc.freeze()`` after a burst of long-lived allocations (a document's blocks, a plan and
    its index: hundreds of thousands of objects, none of them garbage), so that later full
    collections skip them instead of holding the GIL 20-165 ms each to find nothing. Whatever
    else is alive at that moment is frozen too, garbage cycles among it: :func:`thaw_and_collect`
    is the matching unfreeze."""
    gc.freeze()


def thaw_and_collect() -> None:
    """The matching ``gc.unfreeze()``, and the full collection that frees what died while
    frozen. Called on the thread that may collect (the GUI thread: app/ui/gui_gc.py) as the next
    document opens, so frozen garbage lives at most as long as the document it was frozen with;
    one full collection then, not one per allocation burst."""
    gc.unfreeze()
    gc.collect()
