"""Cycles are collected on the GUI thread, never on the pool thread that happens to allocate."""

from __future__ import annotations

import gc
import threading

from app.ui.gui_gc import GuiThreadCollector, collect_on_gui_thread


class Cycle:
    """Unreachable only as a cycle, so only the cyclic collector frees it; says on which thread."""

    def __init__(self, freed_on: list[str]) -> None:
        self.me = self
        self.freed_on = freed_on

    def __del__(self) -> None:
        self.freed_on.append(threading.current_thread().name)


def test_a_burst_on_another_thread_leaves_cycles_to_the_gui_thread(qtbot, qapp) -> None:
    collector = collect_on_gui_thread(qapp)
    assert isinstance(collector, GuiThreadCollector) and collect_on_gui_thread(qapp) is collector
    assert not gc.isenabled()
    freed_on: list[str] = []
    Cycle(freed_on)

    def burst() -> None:  # thousands of young cycles: far past the youngest threshold
        for _ in range(5 * gc.get_threshold()[0]):
            Cycle([])

    worker = threading.Thread(target=burst, name="pool")
    worker.start()
    worker.join()
    assert freed_on == []  # Python would have collected it on "pool" by now
    qtbot.waitUntil(lambda: freed_on != [], timeout=5_000)
    assert freed_on == ["MainThread"]
