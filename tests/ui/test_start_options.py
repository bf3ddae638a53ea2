"""How the window starts: its command-line options load the model and open the document as
given, one default context size is used everywhere, and a Run without a model offers to load one.

The windows are built the way app/ui/main.py's main() builds them (parse_args, start_options,
then MainWindow), on the real default model, with small contexts and short replies so each test
takes seconds.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from app.cli.main import build_parser
from app.core.default_model import default_model_path
from app.core.engine.types import DEFAULT_N_CTX, LoadSettings, default_context
from app.core.paths import sample_document
from app.ui.main import missing_model_message, parse_args, start_options
from app.ui.main_window import MainWindow
from app.ui.model_panel import ModelPanel
from app.ui.session_model import SessionModel
from tests.ui.windows import Windows

# short: a run evaluates all of it, and the tests are about starting, not about long documents
TEXT = "The river rose in the spring and the town watched it. " * 4 + "\n\n" + (
    "The town built a wall of stone along the bank. " * 4
)


@pytest.fixture
def document(tmp_path: Path) -> Path:
    path = tmp_path / "river.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def loaded_n_ctx(w: MainWindow) -> int:
    """The context the engine loaded the model with (its own record, not the panel's)."""
    settings = w.engine.driver.session.settings
    assert settings is not None and w.session.loaded is not None
    assert w.session.loaded.n_ctx == settings.n_ctx
    return settings.n_ctx


def test_model_n_ctx_and_document_from_the_command_line(
    qtbot, make_window: Windows, model_path: Path, document: Path
) -> None:
    args = parse_args(["--model", str(model_path), "--n-ctx", "2048", str(document)])
    model, n_ctx = start_options(args)
    assert (model, n_ctx, args.explicit) == (model_path, 2048, True)
    relative = parse_args(["--model", os.path.relpath(model_path), "doc.txt"])
    assert relative.model == model_path and relative.document == Path.cwd() / "doc.txt"
    assert missing_model_message(args) == ""
    w = make_window(model, args.document, n_ctx)
    qtbot.waitUntil(lambda: w.session.loaded is not None and w.document_path == document,
                    timeout=60_000)  # fmt: skip
    assert loaded_n_ctx(w) == 2048
    assert w.model_path == model_path and w.model_panel.n_ctx.value() == 2048
    assert w.model_panel.chooser.listed().count(model_path) == 1  # listed once, and selected
    assert w.model_panel.selected_model() == model_path
    qtbot.waitUntil(lambda: w.session.document_tokens is not None, timeout=30_000)


def test_n_ctx_alone_applies_to_the_default_model(document: Path) -> None:
    args = parse_args(["--n-ctx", "1024", str(document)])
    assert args.document == document and args.explicit
    assert start_options(args) == (default_model_path(), 1024)
    nothing = parse_args([])  # no options: the sample text on the default model
    assert nothing.document == sample_document() and not nothing.explicit
    assert start_options(nothing) == (default_model_path(), DEFAULT_N_CTX)


def test_a_missing_model_is_one_sentence_and_loads_nothing(tmp_path: Path) -> None:
    gone = tmp_path / "gone.gguf"
    args = parse_args(["--model", str(gone)])
    assert start_options(args) == (None, DEFAULT_N_CTX)
    assert missing_model_message(args) == (
        f"Model not found: {gone} — run `make` to fetch the default model"
    )


def test_one_default_context_everywhere(qtbot, capsys: pytest.CaptureFixture[str]) -> None:
    assert LoadSettings().n_ctx == DEFAULT_N_CTX
    assert default_context(8192) == DEFAULT_N_CTX and default_context(2048) == 2048
    assert default_context(None) == DEFAULT_N_CTX
    panel = ModelPanel(Path("/nonexistent-models"))
    qtbot.addWidget(panel)
    assert panel.n_ctx.value() == DEFAULT_N_CTX
    for made in (MainWindow.__init__, SessionModel.__init__):
        assert inspect.signature(made).parameters["n_ctx"].default == DEFAULT_N_CTX
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    window_help = " ".join(capsys.readouterr().out.split())
    assert f"(default {DEFAULT_N_CTX}, or the model's training context" in window_help
    assert "loaded at start when it is there" in window_help
    for command in ("run", "compare", "batch", "generate", "calibrate"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        cli_help = " ".join(capsys.readouterr().out.split())
        assert f"context size (default {DEFAULT_N_CTX}" in cli_help, command


def test_run_without_a_model_offers_to_load_it_then_runs(
    qtbot, make_window: Windows, model_path: Path, document: Path
) -> None:
    w = make_window(None, document, 512)
    qtbot.waitUntil(lambda: w.document_path == document and w.session.plan is not None,
                    timeout=30_000)  # fmt: skip
    w.model_panel.select_model(model_path)
    w.max_tokens.setValue(4)
    w.run_job()
    box = w.model_offer.box
    assert box is not None and box.isVisible()
    assert box.text() == f"No model is loaded. Load {model_path.name} and run?"
    load = next(b for b in box.buttons() if b.text() == "&Load and Run")
    with qtbot.waitSignal(w.job_finished, timeout=60_000):
        load.click()
    assert loaded_n_ctx(w) == 512 and w.model_offer.box is None


def test_without_the_default_model_the_offer_is_to_get_it(
    qtbot, make_window: Windows, document: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("CONTEXTLENS_MODELS", str(tmp_path / "no-models"))
    (tmp_path / "no-models").mkdir()
    w = make_window(None, document, 512)
    qtbot.waitUntil(lambda: w.document_path == document, timeout=30_000)
    w.run_job()
    box = w.model_offer.box
    assert box is not None
    assert box.text() == "No model is loaded, and the default model is not on this computer yet."
    get = next(b for b in box.buttons() if b.text() == "&Get the Default Model…")
    assert box.button(QMessageBox.StandardButton.Cancel) is not None  # a way out too
    get.click()
    dialog = w.model_panel.chooser.fetch_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.cancel_button.click()  # not started: closes
    assert not w.session.running and w.session.loaded is None


def test_run_while_the_model_loads_starts_once_it_is_ready(
    qtbot, make_window: Windows, model_path: Path, document: Path
) -> None:
    w = make_window(None, document, 512)
    qtbot.waitUntil(lambda: w.document_path == document, timeout=30_000)
    w.max_tokens.setValue(4)
    w.model_panel.select_model(model_path)
    w.load_model(model_path, LoadSettings(n_ctx=512))
    assert "load" in w.waiting_for
    with qtbot.waitSignal(w.job_finished, timeout=60_000):
        w.run_job()  # no question asked: the model on its way is the one to run on
        assert w.model_offer.box is None
        assert w.statusBar().currentMessage() == (
            "The model is still loading; the run starts once it is ready."
        )
    assert loaded_n_ctx(w) == 512
