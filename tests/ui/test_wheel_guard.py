"""The mouse wheel changes a spin box, combo box or slider only when it has the focus; over an
unfocused one it scrolls the panel around it (app/ui/widgets.py's WheelGuard, installed on the
application by main() and by the tests' qapp fixture). Turning the wheel to scroll the model
panel once changed the context size from 2,048 to 16 without a word.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, QPointF, QSettings, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDoubleSpinBox,
    QScrollArea,
    QSlider,
    QSpinBox,
    QWidget,
)

from app.ui.main_window import MainWindow
from app.ui.model_panel import ModelPanel
from app.ui.widgets import WHEEL_GUARDED, WheelGuard

Value = int | float | str


def wheel(widget: QWidget, steps: int = -1) -> None:
    """``steps`` notches of the wheel over the middle of ``widget`` (negative: towards the
    person, which lowers a spin box and scrolls a panel down)."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(centre, QPointF(widget.mapToGlobal(widget.rect().center())), QPoint(),
                        QPoint(0, 120 * steps), Qt.MouseButton.NoButton,
                        Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase,
                        False)  # fmt: skip
    QApplication.sendEvent(widget, event)


def value(widget: QWidget) -> Value:
    if isinstance(widget, QAbstractSpinBox):
        return widget.text()
    if isinstance(widget, QComboBox):
        return widget.currentIndex()
    assert isinstance(widget, QSlider)
    return widget.value()


def focus(qtbot, widget: QWidget) -> None:
    widget.window().activateWindow()
    widget.setFocus(Qt.FocusReason.OtherFocusReason)
    qtbot.waitUntil(widget.hasFocus, timeout=5_000)


def test_the_guard_is_installed_once(qapp: QApplication) -> None:
    assert len(qapp.findChildren(WheelGuard)) == 1


def test_the_wheel_over_the_unfocused_model_panel_scrolls_it(qtbot, tmp_path: Path) -> None:
    panel = ModelPanel(tmp_path)
    area = QScrollArea()
    area.setWidget(panel)
    area.setWidgetResizable(True)
    area.resize(360, 240)  # far shorter than the panel: it scrolls
    qtbot.addWidget(area)
    area.show()
    qtbot.waitExposed(area)
    panel.n_ctx.setValue(2048)
    panel.gpu_layers.setRange(0, 30)  # as on a machine with a GPU
    panel.gpu_layers.setEnabled(True)
    panel.gpu_layers.setValue(10)
    panel.browse_button.setFocus()
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == 0
    for widget in (panel.n_ctx, panel.n_ctx.findChild(QWidget), panel.kv_type, panel.threads,
                   panel.gpu_layers):  # fmt: skip
        before = value(widget) if isinstance(widget, WHEEL_GUARDED) else None
        wheel(widget, -3)
        if before is not None:
            assert value(widget) == before, widget
    assert panel.n_ctx.value() == 2048 and panel.kv_type.currentData() == "f16"
    assert panel.gpu_layers.value() == 10
    assert bar.value() > 0  # the panel scrolled instead

    focus(qtbot, panel.n_ctx)
    scrolled = bar.value()
    wheel(panel.n_ctx, 1)
    assert panel.n_ctx.value() == 2048 + panel.n_ctx.singleStep()
    assert bar.value() == scrolled
    focus(qtbot, panel.kv_type)
    wheel(panel.kv_type, -1)
    assert panel.kv_type.currentIndex() == 1
    focus(qtbot, panel.gpu_layers)
    wheel(panel.gpu_layers, 1)
    assert panel.gpu_layers.value() != 10


def test_no_value_in_the_window_changes_under_the_wheel_without_focus(
    qtbot, tmp_path: Path
) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(None, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    guarded = [x for x in w.findChildren(QWidget)
               if isinstance(x, WHEEL_GUARDED) and x.isEnabled()]  # fmt: skip
    kinds = {kind for x in guarded for kind in (QSpinBox, QDoubleSpinBox, QComboBox)
             if isinstance(x, kind)}  # fmt: skip
    assert len(guarded) >= 8 and kinds == {QSpinBox, QDoubleSpinBox, QComboBox}
    focus(qtbot, w.document_view)
    for widget in guarded:
        before = value(widget)
        wheel(widget, 1)
        wheel(widget, -1)
        wheel(widget, -1)
        assert value(widget) == before, widget.objectName() or type(widget).__name__
