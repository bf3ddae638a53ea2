"""contextlens-cli snapshots and the history that run and compare record."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from app.core.paths import sample_document
from tests.cli.runner import assert_one_line_error, run


def test_compare_records_versions_that_snapshots_can_list_diff_and_roll_back(
    tmp_path: Path, model_path: Path
) -> None:
    db = str(tmp_path / "h.db")
    doc = tmp_path / "part.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:4000], encoding="utf-8")
    proc = run("compare", str(doc), "--strategies", "head,tail", "--n-ctx", "512",
               "--max-tokens", "8", "--db", db, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(run("snapshots", "list", "--db", db, "--json").stdout)
    assert [(v["number"], v["strategy"]) for v in listed] == [(1, "head"), (2, "tail")]
    for v in listed:
        assert {"id", "session", "parent", "number", "created", "task", "strategy"} <= set(v)
    first, second = listed[0]["id"], listed[1]["id"]
    shown = json.loads(run("snapshots", "show", str(first), "--db", db, "--json").stdout)
    assert shown["runs"][0]["kv_peak_cells"] <= 512 and shown["runs"][0]["outputs"]
    diff = run("snapshots", "diff", str(first), str(second), "--db", db).stdout
    assert "-strategy: head" in diff and "+strategy: tail" in diff
    back = json.loads(run("snapshots", "rollback", str(first), "--db", db, "--json").stdout)
    assert back["parent"] == first and back["number"] == 3 and back["strategy"] == "head"
    # export the session, import it into another history: the same tree under a new session
    archive, other = tmp_path / "s.ctxlens", str(tmp_path / "other.db")
    out = run("snapshots", "export", str(listed[0]["session"]), str(archive), "--db", db, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["versions"] == 3, out.stderr
    got = json.loads(run("snapshots", "import", str(archive), "--db", other, "--json").stdout)
    assert (got["versions"], got["runs"]) == (3, 2)  # the rollback made a version, no run
    imported = json.loads(run("snapshots", "list", "--db", other, "--json").stdout)
    assert [(v["number"], v["strategy"]) for v in imported] == [
        (1, "head"),
        (2, "tail"),
        (3, "head"),
    ]
    assert imported[2]["parent"] == imported[0]["id"]
    cut = tmp_path / "cut.ctxlens"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    before = Path(other).read_bytes()
    proc = run("snapshots", "import", str(cut), "--db", other)
    assert proc.returncode == 2 and "cut.ctxlens" in proc.stderr
    assert_one_line_error(proc)
    assert Path(other).read_bytes() == before


# Replies that came out differently on resume before its last prompt token was evaluated as
# the job evaluates it (alone, app/core/engine/generation.py): "…heritage of the hacker
# culture" against "…of the\nhacker culture"; Gemma 3 "the word ‘and’ in" against "used in".
RESUMED_AS_RUN = [("model_path", 0, ["--task", "summarize"]),
                  ("gemma_path", 60_000, ["--task", "ask", "--question",
                                          "What is this text about?"])]  # fmt: skip


@pytest.mark.parametrize(("model", "start", "task"), RESUMED_AS_RUN, ids=["smollm2", "gemma3"])
def test_rollback_resume_restores_the_kv_state_and_gives_the_same_reply(
    tmp_path: Path, request: pytest.FixtureRequest, model: str, start: int, task: list[str]
) -> None:
    """run --keep-kv saves the state; rollback --resume gives the same reply from it under
    greedy decoding (80 tokens: long enough for a near tie), evaluating one prompt token
    instead of the whole prompt, and records the run under the new version."""
    gguf = str(request.getfixturevalue(model))
    db = str(tmp_path / "h.db")
    doc = tmp_path / "part.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[start : start + 3000],
                   encoding="utf-8")  # fmt: skip
    proc = run("run", str(doc), *task, "--strategy", "head", "--n-ctx", "1024", "--max-tokens",
               "80", "--model", gguf, "--keep-kv", "--db", db, "--json", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout.splitlines()[-1])
    [version] = json.loads(run("snapshots", "list", "--db", db, "--json").stdout)
    shown = json.loads(run("snapshots", "show", str(version["id"]), "--db", db, "--json").stdout)
    [state] = shown["kv_states"]
    assert state["prompt_tokens"] == first["prompt_tokens"] and state["state_bytes"] > 0
    proc = run("snapshots", "rollback", str(version["id"]), "--resume", "--model", gguf, "--db",
               db, "--json", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    resumed = json.loads(proc.stdout.splitlines()[-1])
    assert resumed["evaluated_tokens"] == 1 and first["evaluated_tokens"] == first["prompt_tokens"]
    assert resumed["outputs"][0]["text"] == first["outputs"][0]["text"]  # greedy: the same reply
    assert resumed["outputs"][0]["source_spans"] == first["outputs"][0]["source_spans"]
    new = resumed["version"]
    assert new["parent"] == version["id"] and resumed["resumed_from"] == version["id"]
    again = json.loads(run("snapshots", "show", str(new["id"]), "--db", db, "--json").stdout)
    assert again["runs"][0]["outputs"][0]["text"] == first["outputs"][0]["text"]


def test_rollback_resume_without_a_saved_state_changes_nothing(
    tmp_path: Path, model_path: Path
) -> None:
    db = str(tmp_path / "h.db")
    doc = tmp_path / "part.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:1500], encoding="utf-8")
    proc = run("run", str(doc), "--strategy", "head", "--n-ctx", "512", "--max-tokens", "4",
               "--db", db, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    proc = run("snapshots", "rollback", "1", "--resume", "--db", db)
    assert proc.returncode == 2 and "no saved KV state" in proc.stderr
    assert_one_line_error(proc)
    assert len(json.loads(run("snapshots", "list", "--db", db, "--json").stdout)) == 1


def test_bad_snapshot_requests_exit_2_with_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    bad = (["show", "99"], ["diff", "1"], ["rollback"], ["list"], ["show", "x"],
           ["export", "1"], ["import"], ["import", str(tmp_path / "missing.ctxlens")])  # fmt: skip
    for args in bad:
        proc = run("snapshots", *args, "--db", str(tmp_path) if args == ["list"] else db)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert_one_line_error(proc)


def test_a_database_from_a_newer_app_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    assert run("snapshots", "list", "--db", str(db)).returncode == 0
    with sqlite3.connect(db) as con:
        con.execute("UPDATE alembic_version SET version_num = 'ffff'")
    con.close()
    before = db.read_bytes()
    proc = run("snapshots", "list", "--db", str(db))
    assert proc.returncode == 2 and "newer ContextLens" in proc.stderr
    assert_one_line_error(proc)
    assert db.read_bytes() == before
