"""A later ``contextlens`` launch handed to the window that runs already: may it, and how.

single_instance.py carries a second launch's files and options to the running window (and
session_guard.py keeps one window per state folder); this module is the window's policy for what
such a launch may change. :meth:`SecondLaunch.refusal` says, in one sentence the launch prints
before it exits 1, why the window cannot take the options; :meth:`SecondLaunch.take` takes
them: the files open as a drop opens them, the language and theme change as the View menu
changes them, and a context size loads the model again at that size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction

from app.core.engine.types import LoadSettings
from app.ui.main_actions import MainActions
from app.ui.model_panel import MAX_CTX, MIN_CTX, ModelPanel
from app.ui.session_model import SessionModel


class SecondLaunch(QObject):
    """The policy of the window whose ``session``, ``controls`` (the View menu's languages and
    themes) and ``model_panel`` a later launch reaches; ``open_path`` opens a file as a drop
    does, ``load_model`` loads a model as the model panel's Load does."""

    def __init__(self, session: SessionModel, controls: MainActions, model_panel: ModelPanel, *,
                 open_path: Callable[[Path], None],
                 load_model: Callable[[Path, LoadSettings], None],
                 parent: QObject | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self._session, self._controls, self._model_panel = session, controls, model_panel
        self._open_path, self._load_model = open_path, load_model

    def refusal(self, options: Mapping[str, object]) -> str:
        """Why this window cannot take the options a later ``contextlens`` launch gave (see
        take), in one sentence the launch prints before it exits 1 ("": it can)."""
        n_ctx = options.get("n_ctx")
        if isinstance(n_ctx, int):
            if not MIN_CTX <= n_ctx <= MAX_CTX:
                return self.tr("--n-ctx {0:,} is not a context size ContextLens loads "
                               "({1:,} to {2:,}).").format(n_ctx, MIN_CTX, MAX_CTX)  # fmt: skip
            if self._session.running:
                return self.tr(
                    "The running ContextLens window is busy with a run, so it cannot "
                    "load the model again at --n-ctx {0:,}: cancel the run first, or "
                    "start another window with --new-instance."
                ).format(n_ctx)
            if self._session.server is not None:
                return self.tr(
                    "The running ContextLens window works with a server, whose "
                    "context size the server sets: --n-ctx cannot change it."
                )
        for key, choices in self._view_choices():
            value = options.get(key)
            if isinstance(value, str) and value not in choices:
                return self.tr("--{0} {1} is not one of this window's choices: {2}.").format(
                    key, value, ", ".join(choices))  # fmt: skip
        return ""

    def take(self, paths: Sequence[Path], options: Mapping[str, object]) -> None:
        """What a later ``contextlens [--n-ctx N] [--lang L] [--theme T] FILE…`` handed over
        (refusal has let it in): the files open as a drop opens them, the language and theme
        change as the View menu changes them, and a context size loads the model again at that
        size (the model given, else the one loaded; with none loaded it is the size the next
        load uses)."""
        for path in paths:
            self._open_path(path)
        for key, choices in self._view_choices():
            action = choices.get(str(options.get(key)))
            if action is not None and not action.isChecked():
                action.trigger()
        n_ctx = options.get("n_ctx")
        if not isinstance(n_ctx, int):
            return
        session = self._session
        model = next((p for p in paths if p.suffix.lower() == ".gguf"), None)
        model = model or (session.model_path if session.loaded is not None else None)
        if model is None:
            self._model_panel.n_ctx.setValue(n_ctx)
            return
        loaded = session.loaded
        if loaded is not None and loaded.n_ctx == n_ctx and Path(loaded.path) == model:
            return  # loaded so already
        self._load_model(model, replace(self._model_panel.settings(), n_ctx=n_ctx))

    def _view_choices(self) -> tuple[tuple[str, dict[str, QAction]], ...]:
        """The launch options the View menu chooses, each with its menu's entries by name."""
        languages = {str(a.data()): a for a in self._controls.language_menu.actions()}
        return (("lang", languages), ("theme", self._controls.theme_actions))
