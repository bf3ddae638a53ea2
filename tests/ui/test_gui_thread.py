"""on_gui_thread: a signal emitted on a worker thread, at once, many times over, is waited on
without a lost wake-up; its handler runs on the GUI thread with the signal's arguments."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from PySide6.QtCore import QObject, QThread, Signal, Slot
from PySide6.QtWidgets import QWidget

from tests.ui.gui_thread import on_gui_thread


class _Worker(QObject):
    answered = Signal(str)

    @Slot(str)
    def ask(self, text: str) -> None:
        self.answered.emit(text)  # no work first: the answer races the test's wait


class _Asker(QObject):
    ask = Signal(str)


@pytest.fixture
def worker() -> Iterator[tuple[_Asker, _Worker]]:
    thread = QThread()
    worker, asker = _Worker(), _Asker()
    worker.moveToThread(thread)
    asker.ask.connect(worker.ask)
    thread.start()
    yield asker, worker
    thread.quit()
    thread.wait(10_000)


def test_a_worker_threads_signal_arrives_on_the_gui_thread_every_time(
    qtbot, worker: tuple[_Asker, _Worker]
) -> None:
    asker, w = worker
    owner = QWidget()
    qtbot.addWidget(owner)
    relayed = on_gui_thread(w.answered, owner)
    threads: list[str] = []
    relayed.connect(lambda _args: threads.append(threading.current_thread().name))
    for i in range(200):
        with qtbot.waitSignal(relayed, timeout=10_000) as blocker:
            asker.ask.emit(f"answer {i}")
        assert blocker.args == [(f"answer {i}",)]
    assert threads == [threading.main_thread().name] * 200
