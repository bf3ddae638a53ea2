"""`contextlens`: start the desktop app (by default on the default model and the sample text)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtWidgets import QApplication

DEMO_STRATEGY = "entropy"  # keeps spans all through the document: the highlighting shows it


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from app.core.default_model import default_model_path
    from app.core.paths import sample_document

    parser = argparse.ArgumentParser(prog="contextlens", description=__doc__)
    parser.add_argument("document", nargs="?", type=Path, help="document to open")
    parser.add_argument("--model", type=Path, help="GGUF model (default: the default model)")
    parser.add_argument("--n-ctx", type=int, default=8192, help="context size (default 8192)")
    parser.add_argument("--demo", action="store_true",
                        help="summarize the sample document with the default model")  # fmt: skip
    parser.add_argument("--screenshot", type=Path,
                        help="save a PNG of the window when ready (with --demo: when the job is "
                             "done), then quit")  # fmt: skip
    parser.add_argument("--theme", choices=("system", "light", "dark"),
                        help="look of the window (default: as last chosen in View ▸ Theme, "
                             "else the platform's)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.demo or (args.document is None and args.model is None):
        args.document = args.document or sample_document()
        args.model = args.model or default_model_path()
    return args


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


def _install_translation(app: QApplication) -> None:
    """Every visible string goes through tr(): a contextlens_<locale>.qm file dropped into
    resources/translations translates the app without touching the code."""
    from PySide6.QtCore import QLocale, QTranslator

    from app.core.paths import resources_dir

    translator = QTranslator(app)
    if translator.load(QLocale.system(), "contextlens", "_", str(resources_dir() / "translations")):
        app.installTranslator(translator)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from app.ui.main_window import MainWindow
    from app.ui.theme import apply_theme

    _log_to_file()
    app = QApplication(sys.argv[:1])
    app.setApplicationName("ContextLens")
    app.setOrganizationName("ContextLens")
    _install_translation(app)
    apply_theme(app, args.theme or str(QSettings().value("theme", "system")))
    model = args.model if args.model and args.model.exists() else None
    scratch = tempfile.TemporaryDirectory() if args.screenshot else None
    if scratch is not None:  # a scripted picture: the default layout and an empty history; the
        # person's own settings and history are left as they are
        folder = Path(scratch.name)
        settings = QSettings(str(folder / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(model, args.document, n_ctx=args.n_ctx, settings=settings,
                            db_path=folder / "history.db")  # fmt: skip
    else:
        window = MainWindow(model, args.document, n_ctx=args.n_ctx)
    window.show()
    sys.excepthook = window.report_unexpected
    if args.model is not None and model is None:
        window.statusBar().showMessage(
            f"Model not found: {args.model} — run `make` to fetch the default model"
        )
    exit_code = 0

    def shoot() -> None:
        if args.screenshot:
            window.grab().save(str(args.screenshot))
            window.close()

    def fail(_message: str) -> None:
        nonlocal exit_code
        exit_code = 1
        shoot()

    if args.demo:  # once the model is loaded and the document counted: summarize it
        started = False

        def start_demo() -> None:
            nonlocal started
            if not started:
                started = True
                window.strategy_box.setCurrentIndex(window.strategy_box.findData(DEMO_STRATEGY))
                window.run_job()

        window.ready.connect(start_demo)
        window.job_finished.connect(lambda _outcome: QTimer.singleShot(300, shoot))
    elif args.screenshot:
        window.ready.connect(lambda: QTimer.singleShot(300, shoot))
    if args.screenshot:
        window.failed.connect(fail)
        QTimer.singleShot(600_000, lambda: fail("timed out"))
    app.exec()
    if scratch is not None:
        scratch.cleanup()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
