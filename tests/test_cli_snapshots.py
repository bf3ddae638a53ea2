"""contextlens-cli snapshots and the history that run and compare record."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from app.core.paths import sample_document
from tests.test_cli import assert_one_line_error, run


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


def test_bad_snapshot_requests_exit_2_with_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    for args in (["show", "99"], ["diff", "1"], ["rollback"], ["list"]):
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
