"""The conversation on a document: the questions asked along the current line of work and what
the model answered, oldest first, beside the output buffer.

Each follow-up question is a version, child of the one before (see services.versions.thread),
so the thread is read from the history, not kept apart from it: a rollback or an opened version
shows the thread that leads to it. Clicking a turn opens its version.

The HTML carries the palette's colours (the marked turn's band, the links): Qt writes them into
the document when it reads the HTML, so the thread is drawn again when the theme changes.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import QEvent, QUrl, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QTextBrowser, QVBoxLayout, QWidget

from app.services.versions import Turn
from app.ui.i18n import FollowsLanguage, finish_label, strategy_label
from app.ui.widgets import plain_label

SCHEME = "version"  # a turn's link: version:<id>
OBJECT_NAME = "thread-view"  # the real-display tests find the pane so


class ThreadView(FollowsLanguage, QWidget):
    """The turns of the current thread; ``open_requested`` carries a clicked turn's version."""

    open_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._turns: tuple[Turn, ...] = ()
        self._current: int | None = None
        self.setObjectName(OBJECT_NAME)
        self.heading = plain_label()
        self.browser = QTextBrowser()
        self.browser.setObjectName(f"{OBJECT_NAME}-text")
        self.browser.setOpenLinks(False)
        self.browser.anchorClicked.connect(self._on_anchor)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.heading)
        layout.addWidget(self.browser, 1)
        self.retranslate()

    @property
    def turns(self) -> tuple[Turn, ...]:
        return self._turns

    def set_turns(self, turns: Sequence[Turn], current: int | None = None) -> None:
        """Show ``turns`` (the current version's thread), ``current``'s turns marked; the view
        hides itself when there is no question to show."""
        self._turns, self._current = tuple(turns), current
        self.setVisible(bool(self._turns))
        self._render()

    def retranslate(self) -> None:
        self.browser.setToolTip(self.tr("Click a question to open its version"))
        self._render()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange):
            bar = self.browser.verticalScrollBar()
            at = bar.value()
            self._render()  # the colours written into the HTML are the old theme's
            bar.setValue(at)

    def _render(self) -> None:
        pal = self.palette()  # the browser hears of a new palette after its parent
        band = pal.color(QPalette.ColorRole.AlternateBase).name()
        link = pal.color(QPalette.ColorRole.Link).name()
        n = len(self._turns)
        count = self.tr("1 question") if n == 1 else self.tr("{0} questions").format(n)
        self.heading.setText(self.tr("Thread: {0}").format(count))
        parts = []
        for turn in self._turns:
            marked = turn.version == self._current
            head = self.tr("v{0} · {1}").format(turn.number, strategy_label(turn.strategy))
            question = html.escape(turn.question)
            answer = html.escape(turn.answer).replace("\n", "<br>") or "<i>…</i>"
            finish = finish_label(turn.finish_reason) if turn.finish_reason else ""
            style = f"background-color: {band};" if marked else ""
            parts.append(
                f'<div style="{style}"><p><a href="{SCHEME}:{turn.version}" '
                f'style="color: {link};">'
                f"<b>{html.escape(head)}</b></a> — <b>{question}</b></p>"
                f"<p>{answer}</p><p><small>{html.escape(finish)}</small></p></div><hr>"
            )
        self.browser.setHtml("".join(parts))
        bar = self.browser.verticalScrollBar()
        bar.setValue(bar.maximum())  # the newest question, as a chat shows it

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == SCHEME and url.path().isdigit():
            self.open_requested.emit(int(url.path()))
