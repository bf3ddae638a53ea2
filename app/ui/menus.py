"""A menu of choices that stays open while the person ticks them.

Qt closes a menu after any action is triggered, which suits commands but not a list of
check boxes: choosing three strategies to compare took three trips to the menu. Here a click, or
Space or Enter, on a checkable action toggles it and leaves the menu open; any other action
behaves as usual.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeyEvent, QMouseEvent
from PySide6.QtWidgets import QMenu

_TOGGLE_KEYS = (Qt.Key.Key_Space, Qt.Key.Key_Return, Qt.Key.Key_Enter)


class ChecklistMenu(QMenu):
    """A QMenu whose checkable actions toggle without closing it."""

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        action = self.actionAt(event.position().toPoint())
        if self._toggle(action):
            event.accept()
            return
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in _TOGGLE_KEYS and self._toggle(self.activeAction()):
            event.accept()
            return
        super().keyPressEvent(event)

    @staticmethod
    def _toggle(action: QAction | None) -> bool:
        if action is None or not action.isCheckable() or not action.isEnabled():
            return False
        action.trigger()  # toggles it and emits triggered/toggled as a click would
        return True
