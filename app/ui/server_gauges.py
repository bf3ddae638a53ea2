"""Each server of a pool in the gauges: its address, whether it answers, and the job on it.

The pool's members change on its probe threads (a server lost, one that answers again); the
engine thread sends a copy of them all as a signal, queued to the GUI thread
(app/ui/engine_thread.py: :class:`PoolServer`), and a job's ``ServerLost`` event says that it
moved and where. The rows show only with a pool (two servers or more). A loss and a return are
each said once (``said``: the status bar shows it), however many copies and events report them.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from PySide6.QtCore import QTimer, Signal, Slot
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from app.core.jobs.events import ServerLost
from app.ui.engine_thread import PoolServer
from app.ui.i18n import FollowsLanguage
from app.ui.widgets import ElidedLabel, plain_label

log = logging.getLogger(__name__)
LOST_STYLE = "color: #d9534f; font-weight: bold"  # read on the light and the dark theme
# A server lost mid-job is reported by the pool (a probe's copy) a moment before the job's
# ServerLost says where the job went: the loss is said after this long unless that came first.
SAY_LOSS_MS = 1500


class ServerRows(FollowsLanguage, QWidget):
    """One row per server of the pool: its address, up or lost, and the job on it (or why it
    was lost). The last column is cut to the width the dock gives it (a server's reason can be
    long), whole in its tooltip."""

    said = Signal(str)  # a server lost, or answering again: said once, for the status bar

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.servers: list[PoolServer] = []
        self._running = False
        self._in_use: str | None = None  # the server jobs run on (the engine keeps to it)
        self._moved: dict[str, str] = {}  # a server lost mid-job -> where its job went
        self._lost_said: set[str] = set()  # servers whose loss was said (until they are back)
        self._rows: list[tuple[QLabel, QLabel, ElidedLabel]] = []
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setColumnStretch(2, 1)
        self.hide()

    def retranslate(self) -> None:
        self._draw()

    # ----- what changes them -----

    @Slot(list)
    def set_servers(self, servers: list[PoolServer]) -> None:
        """The pool's members as they are now ([]: no pool); a loss or a return is said once."""
        self.servers = list(servers)
        for server in servers:
            if not server.up and server.url not in self._lost_said:
                if self._running:  # the job's ServerLost may follow: it says more
                    QTimer.singleShot(SAY_LOSS_MS, self, lambda s=server: self._say_lost(s))
                else:
                    self._say_lost(server)
            elif server.up and server.url in self._lost_said:
                self._lost_said.discard(server.url)
                self._moved.pop(server.url, None)
                self._say(self.tr("Server {0} answers again").format(server.url))
        if not servers:
            self._lost_said.clear()
            self._moved.clear()
            self._in_use = None
        else:  # a copy taken while the server in use was lost names none: kept
            self._in_use = next((s.url for s in servers if s.in_use), self._in_use)
        self._build_rows()
        self.setVisible(len(servers) > 1)
        self._draw()

    def set_running(self, running: bool) -> None:
        """A job starts (on the server in use, or the first up when that one was lost, as
        the engine chooses) or ends."""
        self._running = running
        if running:
            self._moved.clear()
            up = [s.url for s in self.servers if s.up]
            if self._in_use not in up:
                self._in_use = up[0] if up else None
        self._draw()

    def on_event(self, ev: object) -> None:
        """A job's ``ServerLost``: its server is lost, the job runs again on another."""
        if not isinstance(ev, ServerLost):
            return
        self._moved[ev.url] = ev.moved_to
        self._in_use = ev.moved_to
        self.servers = [replace(s, up=False, reason=ev.reason) if s.url == ev.url else s
                        for s in self.servers]  # fmt: skip
        if ev.url not in self._lost_said:
            self._lost_said.add(ev.url)
            self._say(self.tr("Server {0} stopped answering: the job runs again from its "
                              "start on {1}").format(ev.url, ev.moved_to), ev.reason)  # fmt: skip
        self._draw()

    # ----- what they show -----

    def texts(self) -> list[tuple[str, str, str]]:
        """Each row's address, state and job, as shown."""
        return [(a.text(), s.text(), j.text()) for a, s, j in self._rows]

    def _say_lost(self, server: PoolServer) -> None:
        """A loss no job's ServerLost has said (yet): said once, if it still holds."""
        now = next((s for s in self.servers if s.url == server.url), None)
        if now is None or now.up or server.url in self._lost_said:
            return
        self._lost_said.add(server.url)
        self._say(self.tr("Server {0} does not answer; it is probed again now and "
                          "then").format(server.url), server.reason)  # fmt: skip

    def _say(self, text: str, reason: str = "") -> None:
        """``text`` in the status bar (short: the row says why), and with ``reason`` in the
        log."""
        log.info("%s%s", text, f" ({reason})" if reason else "")
        self.said.emit(text)

    def _build_rows(self) -> None:
        """As many rows as servers (labels are kept while the count stays)."""
        while len(self._rows) > len(self.servers):
            widget: QWidget
            for widget in self._rows.pop():
                self._grid.removeWidget(widget)
                widget.deleteLater()
        while len(self._rows) < len(self.servers):
            row = len(self._rows)
            labels = (plain_label(), plain_label(), ElidedLabel())
            for column, (widget, part) in enumerate(zip(labels, ("address", "state", "job"),
                                                        strict=True)):  # fmt: skip
                widget.setObjectName(f"serverRow-{row + 1}-{part}")
                self._grid.addWidget(widget, row, column)
            self._rows.append(labels)

    def _draw(self) -> None:
        for server, (address, state, job) in zip(self.servers, self._rows, strict=True):
            address.setText(server.url)
            if server.up:
                state.setText(self.tr("up"))
                state.setStyleSheet("")
                state.setToolTip(self.tr("{0} request(s) at once").format(server.slots))
            else:
                state.setText(self.tr("lost"))
                state.setStyleSheet(LOST_STYLE)
                state.setToolTip(self.tr("Probed again with a growing pause; used again when it "
                                         "answers and still serves the same model"))  # fmt: skip
            job.setText(self._job_text(server))

    def _job_text(self, server: PoolServer) -> str:
        """The job on ``server``, or where its job went and why it was lost."""
        moved_to = self._moved.get(server.url)
        parts = []
        if moved_to is not None:
            moved = (self.tr("its job runs again on {0}") if self._running
                     else self.tr("its job ran again on {0}"))  # fmt: skip
            parts.append(moved.format(moved_to))
        elif self._running and server.url == self._in_use:
            came_from = [lost for lost, to in self._moved.items() if to == server.url]
            parts.append(self.tr("running the job, moved from {0}").format(", ".join(came_from))
                         if came_from else self.tr("running the job"))  # fmt: skip
        elif server.up:
            parts.append(self.tr("idle"))
        if not server.up and server.reason:
            parts.append(server.reason)
        return " · ".join(parts)
