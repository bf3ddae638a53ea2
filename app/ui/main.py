"""`contextlens`: start the desktop app (by default on the default model and the sample text)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options; ``model`` is the default model when none is given (it may be missing),
    ``explicit`` says whether the command line chose what to open."""
    from app.core.default_model import default_model_path
    from app.core.engine.types import DEFAULT_N_CTX
    from app.core.paths import sample_document

    parser = argparse.ArgumentParser(prog="contextlens", description=__doc__)
    parser.add_argument("document", nargs="?", type=Path,
                        help="document to open (default: the sample text, when no --model is "
                             "given either)")  # fmt: skip
    parser.add_argument("--model", type=Path,
                        help="GGUF model to load at start (default: the default model in the "
                             "models folder, loaded at start when it is there)")  # fmt: skip
    parser.add_argument("--n-ctx", type=int,
                        help=f"context size the model loads with (default {DEFAULT_N_CTX}, or "
                             f"the model's training context when smaller)")  # fmt: skip
    parser.add_argument("--demo", action="store_true",
                        help="ask the sample document a question and a follow-up with the "
                             "default model, the plan shown first")  # fmt: skip
    parser.add_argument("--screenshot", type=Path,
                        help="save a PNG of the window when ready (with --demo: when the job is "
                             "done), then quit")  # fmt: skip
    parser.add_argument("--theme", choices=("system", "light", "dark"),
                        help="look of the window (default: as last chosen in View ▸ Theme, "
                             "else the platform's)")  # fmt: skip
    parser.add_argument("--lang", choices=("system", "en", "zh_CN"),
                        help="language (default: as chosen in View ▸ Language)")  # fmt: skip
    parser.add_argument("--new-instance", action="store_true",
                        help="open a window of its own even when ContextLens is running "
                             "(by default the running window opens the files)")  # fmt: skip
    args = parser.parse_args(argv)
    # absolute, as the model panel lists its folder (a relative --model was listed twice)
    args.document, args.model = (None if p is None else Path(os.path.abspath(p))
                                 for p in (args.document, args.model))  # fmt: skip
    args.given = [p for p in (args.document, args.model) if p is not None]  # for a handover
    # the command line chose what to open: the last session is not offered over it
    args.explicit = bool(args.given) or args.n_ctx is not None
    args.model_given = args.model is not None
    if args.demo or (args.document is None and args.model is None):
        args.document = args.document or sample_document()
    args.model = args.model or default_model_path()
    return args


def start_options(args: argparse.Namespace,
                  last: Callable[[Path | None], int | None] = lambda _model: None,
                  ) -> tuple[Path | None, int]:  # fmt: skip
    """(the model to load at start, or None when its file is missing; the context to load it
    with): --n-ctx, else ``last(model)`` (the context the last session loaded that model at),
    else the default context bounded by the model's training context."""
    from app.core.engine.gguf import GGUFError, inspect_model
    from app.core.engine.types import DEFAULT_N_CTX, default_context

    model = args.model if args.model is not None and args.model.is_file() else None
    chosen = args.n_ctx if args.n_ctx is not None else last(model)
    if chosen is not None or model is None:
        return model, chosen or DEFAULT_N_CTX
    try:  # the metadata only (~0.1 s); a bad file is the load's to explain
        return model, default_context(inspect_model(model).n_ctx_train)
    except (GGUFError, OSError):
        return model, DEFAULT_N_CTX


def missing_model_message(args: argparse.Namespace) -> str:
    """One sentence for the status bar when the model to load at start is not there ("": it
    is)."""
    from PySide6.QtWidgets import QApplication

    if args.model is None or args.model.is_file():
        return ""
    if args.model_given:
        return QApplication.translate(
            "main", "Model not found: {0} — run `make` to fetch the default model"
        ).format(args.model)
    return QApplication.translate(
        "main", "No model yet: Get the Default Model… in the model panel fetches it (about 98 MB)."
    )


def _log_to_file() -> None:
    """Warnings and unexpected errors go to contextlens.log in the user log folder."""
    import logging

    import platformdirs

    folder = Path(platformdirs.user_log_dir("ContextLens"))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(folder / "contextlens.log")
    except OSError:
        handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


def _app_icon() -> QIcon:
    """The app's icon at every size drawn for it (resources/icons, from contextlens.svg)."""
    from PySide6.QtGui import QIcon

    from app.core.paths import resources_dir

    icon = QIcon()
    for png in sorted((resources_dir() / "icons").glob("contextlens-*.png")):
        icon.addFile(str(png))
    return icon


def _install_translation(app: QApplication, choice: str | None = None) -> str:
    """Every visible string goes through tr(): ``choice`` (--lang), else View ▸ Language as last
    chosen, else the system's locale picks a translation from resources/translations. Returns
    what to say when no installed font can draw it ("": nothing)."""
    from PySide6.QtCore import QSettings

    from app.ui.i18n import install_translator, missing_font_note, stored_language

    return missing_font_note(install_translator(app, choice or stored_language(QSettings())))


def main(argv: Sequence[str] | None = None) -> int:
    """``contextlens``: the environment is read once, here (app/core/config.py)."""
    from app.core import config

    with config.using():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = parse_args(argv)
    from app.ui.x11_libraries import problem

    if missing := problem():  # Qt would abort with a line about plugins instead
        print(missing, file=sys.stderr)
        return 1
    from PySide6.QtCore import QPoint, QRect, QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from app.core import allocator
    from app.ui import single_instance
    from app.ui.gui_gc import collect_on_gui_thread
    from app.ui.main_window import DEFAULT_SIZE, MainWindow
    from app.ui.session_guard import FIRST_START, SessionGuard, restore_choices
    from app.ui.switch_interval import shorten_switch_interval
    from app.ui.termination import CloseOnSignals
    from app.ui.theme import apply_theme
    from app.ui.widgets import install_wheel_guard

    _log_to_file()
    shorten_switch_interval()  # the GUI thread waits at most 0.5 ms for the GIL
    allocator.return_large_frees()  # each run's KV state, freed, leaves the process
    app = QApplication(sys.argv[:1])
    collect_on_gui_thread(app)  # a Qt object must never be freed on a pool thread
    install_wheel_guard(app)  # the wheel changes a spin box's value only when it has the focus
    app.setApplicationName("ContextLens")
    app.setOrganizationName("ContextLens")
    font_note = _install_translation(app, args.lang)
    apply_theme(app, args.theme or str(QSettings().value("theme", "system")))
    app.setWindowIcon(_app_icon())
    app.setDesktopFileName("contextlens")  # the .desktop entry, whose icon the desktop shows
    handover, server = single_instance.Handover.NO_SERVER, None
    if not (args.demo or args.screenshot or args.new_instance):  # scripted runs stand alone
        options = {key: getattr(args, key) for key in single_instance.OPTIONS
                   if getattr(args, key) is not None}  # the options named as on the command line
        try:
            handover, server = single_instance.claim(args.given, options=options)
        except single_instance.HandoverRefused as refused:
            print(f"contextlens: {refused}", file=sys.stderr)
            return 1
        if handover is single_instance.Handover.TAKEN:
            return 0  # the running window opened the files and took the options
    scratch = tempfile.TemporaryDirectory() if args.screenshot else None
    guard = None
    if scratch is not None:  # a scripted picture: the default layout and an empty history; the
        # person's own settings and history are left as they are
        model, n_ctx = start_options(args)
        folder = Path(scratch.name)
        settings = QSettings(str(folder / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(model, args.document, n_ctx=n_ctx, settings=settings,
                            db_path=folder / "history.db")  # fmt: skip
        window.fit_to(QRect(QPoint(0, 0), DEFAULT_SIZE))  # the picture's size, not the screen's
        restore_choices(window, FIRST_START)
    else:
        guard = SessionGuard(QSettings())  # reads the last session before the window changes it
        guard.start()
        model, n_ctx = start_options(args, guard.context)  # the last context, unless --n-ctx
        window = MainWindow(model, args.document, n_ctx=n_ctx)
        restore_choices(window, guard.choices())  # kept before the guard writes over them
    window.show()
    if guard is not None:  # the demo and the command line choose what they open
        guard.attach(window, offer=not (args.demo or args.explicit))
    if server is not None:
        server.refusal = window.launch_refusal
        server.paths_received.connect(
            lambda paths, options: single_instance.open_in(window, paths, options))
    elif handover is single_instance.Handover.NO_ANSWER:
        window.statusBar().showMessage(
            QApplication.translate(
                "main", "Another ContextLens window does not answer; this one runs on its own."
            )
        )
    sys.excepthook = window.report_unexpected
    closer = CloseOnSignals(window.close, app)  # a logout or a kill closes it as a person would
    window.closed.connect(app.quit)  # the window shut down: nothing else may keep the app alive
    if missing := missing_model_message(args):
        window.statusBar().showMessage(missing)
    if font_note:  # said last: a window of boxes is the first thing to fix
        print(f"contextlens: {font_note}", file=sys.stderr)
        window.statusBar().showMessage(font_note)
    exit_code = 0

    def shoot() -> None:
        if args.screenshot:
            window.grab().save(str(args.screenshot))
            window.close()

    def fail(_message: str) -> None:
        nonlocal exit_code
        exit_code = 1
        shoot()

    if args.demo:  # once the model is loaded and the sample counted (app/ui/demo_run.py)
        from app.ui.demo_run import DemoRun

        demo = DemoRun(window)
        demo.finished.connect(lambda: QTimer.singleShot(300, shoot))
    elif args.screenshot:
        window.ready.connect(lambda: QTimer.singleShot(300, shoot))
    if args.screenshot:
        window.failed.connect(fail)
        QTimer.singleShot(600_000, lambda: fail("timed out"))
    app.exec()
    del closer
    if scratch is not None:
        scratch.cleanup()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
