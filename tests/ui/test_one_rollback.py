"""One rollback for both faces: `contextlens-cli snapshots rollback [--resume]` and the window's
History panel roll back through the same service (app/services/history.py, ``rollback``), so on
one database they make the same tree (a child equal to the version rolled back to, the resumed
one holding a run resumed from the saved KV state) and refuse a resume without a saved state
with the same sentence, before anything is written."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from app.core.paths import sample_document
from app.services import history
from app.ui.main_window import MainWindow
from tests.cli.runner import run

N_CTX = 512
CONTENT = ("task", "prompt", "strategy", "model_sha256", "settings")


def test_the_cli_and_the_window_roll_back_alike(qtbot, tmp_path: Path, model_path: Path) -> None:
    doc = tmp_path / "part.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:1500], encoding="utf-8")
    db = tmp_path / "h.db"

    def cli(*args: str) -> tuple[int, str]:
        proc = run(*args, "--db", str(db))
        return proc.returncode, proc.stderr

    job = ("run", str(doc), "--strategy", "head", "--n-ctx", str(N_CTX), "--model",
           str(model_path))  # fmt: skip
    assert cli(*job, "--max-tokens", "6", "--keep-kv")[0] == 0  # v1: its KV state saved
    assert cli(*job, "--max-tokens", "5", "--session", "1")[0] == 0  # v2: none saved
    v1, v2 = 1, 2

    # the command line: v3 resumed from v1's state, v4 a copy of v2, a resume of v2 refused
    assert cli("snapshots", "rollback", str(v1), "--resume", "--model", str(model_path))[0] == 0
    assert cli("snapshots", "rollback", str(v2))[0] == 0
    code, cli_refusal = cli("snapshots", "rollback", str(v2), "--resume", "--model",
                            str(model_path))  # fmt: skip
    assert code == 2

    # the window, on the same database, with the same model loaded at the same context
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(model_path, doc, n_ctx=N_CTX, db_path=db, settings=settings)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.ready, timeout=120_000):
        w.show()
    panel = w.history
    assert panel is not None
    with qtbot.waitSignal(panel.refreshed, timeout=30_000):
        panel.refresh()
    assert panel.has_kv(v1) and not panel.has_kv(v2)
    panel.select_versions(v1)
    with qtbot.waitSignal(w.job_finished, timeout=300_000) as done:
        panel.rollback_selected()  # v5: resumed from v1's state, as the command line did
    assert done.args[0].results[0].evaluated_tokens == 1  # the prompt came from the state
    panel.select_versions(v2)
    with qtbot.waitSignal(w.session.version_opened, timeout=30_000):
        panel.rollback_selected()  # v6: a copy of v2, its recorded reply shown
    failures: list[str] = []
    w.session.failed.connect(failures.append)
    panel.select_versions(v2)
    panel.request_rollback(resume=True)  # what `--resume` asks
    qtbot.waitUntil(lambda: bool(failures), timeout=30_000)
    w.close()

    # the same refusal, word for word, naming the version and the model; nothing written
    [window_refusal] = failures
    assert window_refusal == history.no_saved_state(v2, model_path.name)
    assert cli_refusal.strip() == f"error: {window_refusal}"

    # the same tree: each face made one copy of v1 (resumed) and one of v2 (not)
    with history.history(db) as opened:
        repo = opened.repo
        tree = {v.id: v for v in repo.history()}
        assert sorted(tree) == [1, 2, 3, 4, 5, 6]  # the two refusals wrote nothing
        assert tree[v2].parent in (None, v1)  # where `run --session` put it
        copies = {of: [c for c in tree[of].children if c != v2] for of in (v1, v2)}
        assert copies == {v1: [3, 5], v2: [4, 6]}
        for copy, of in ((3, v1), (5, v1), (4, v2), (6, v2)):
            assert all(getattr(tree[copy], k) == getattr(tree[of], k) for k in CONTENT)
        cli_run, window_run = (repo.runs(v)[-1]["outputs"][0]["text"] for v in (3, 5))
        assert cli_run == window_run == repo.runs(v1)[-1]["outputs"][0]["text"]
        assert repo.runs(4) == repo.runs(6) == []
