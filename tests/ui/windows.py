"""The factory behind the ``make_window`` fixture (tests/ui/conftest.py): main windows as main()
makes them, each on the test's settings file and a history of its own, closed when it is done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

from app.core.engine.types import DEFAULT_N_CTX
from app.ui.main_window import MainWindow


class Windows:
    """``Windows(qtbot, folder)(model, document, n_ctx)``: a MainWindow, its other arguments by
    keyword; by default on folder/settings.ini (a QSettings of its own) and the
    history folder/h.db. Each is handed to qtbot; :meth:`close` closes them all."""

    def __init__(self, qtbot: Any, folder: Path) -> None:
        self.qtbot, self.folder = qtbot, folder
        self.made: list[MainWindow] = []

    def __call__(
        self,
        model: Path | None = None,
        document: Path | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        **kwargs: Any,
    ) -> MainWindow:
        kwargs.setdefault("db_path", self.folder / "h.db")
        if "settings" not in kwargs:
            kwargs["settings"] = QSettings(str(self.folder / "settings.ini"),
                                           QSettings.Format.IniFormat)  # fmt: skip
        window = MainWindow(model, document, n_ctx, **kwargs)
        self.qtbot.addWidget(window)
        self.made.append(window)
        return window

    def close(self) -> None:
        for window in self.made:
            window.close()
