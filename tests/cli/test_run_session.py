"""contextlens-cli run --session / --parent: a run joins a document's line of work as a child of
the version it was made from, `snapshots list --session` draws that tree, and a session or
version that does not fit is one sentence, exit 2, with the history untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.documents import load_document
from app.core.jobs.tasks import JobResult, OutputSpan
from app.core.paths import sample_document
from app.services import versions
from app.store.repository import Entry
from tests.cli.runner import assert_one_line_error, run

N_CTX = "512"


def _seed(db: Path, doc_path: Path) -> tuple[int, int, int]:
    """A session on the document with v1 and its child v2 (made here, no model): (session,
    v1, v2)."""
    doc = load_document(doc_path)
    content = {"task": "summarize", "strategy": "head", "prompt": "", "model_path": "/m.gguf",
               "model_sha256": "m" * 64, "settings": {"n_ctx": 512, "max_tokens": 4}}  # fmt: skip
    result = JobResult("summarize", "head", "stop", 512,
                       outputs=[OutputSpan("summary", "Seeded.", ((0, 10),), 1, "stop")])
    with versions.history(db) as h:
        [v1] = h.repo.record(doc, doc.name, [Entry(content, result)])
        session = h.repo.get_version(v1).session
        [v2] = h.repo.record(doc, doc.name, [Entry({**content, "strategy": "tail"}, result)],
                             session=session, parent=v1)  # fmt: skip
    return session, v1, v2


@pytest.fixture
def part_doc(tmp_path: Path) -> Path:
    """The first 200 characters of the sample document, as part.txt."""
    path = tmp_path / "part.txt"
    path.write_text(sample_document().read_text(encoding="utf-8")[:200], encoding="utf-8")
    return path


def _run(doc: Path, db: Path, *extra: str) -> dict[str, object]:
    proc = run("run", str(doc), "--strategy", "head", "--n-ctx", N_CTX, "--max-tokens", "2",
               "--db", str(db), "--json", *extra, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_runs_join_the_session_as_children_and_list_draws_the_tree(
    tmp_path: Path, part_doc: Path, model_path: Path
) -> None:
    db = tmp_path / "h.db"
    session, v1, v2 = _seed(db, part_doc)
    branched = _run(part_doc, db, "--parent", str(v1))  # v1 gets a second child: a branch
    [v3] = branched["recorded"]["versions"]
    assert branched["recorded"] == {"session": session, "versions": [v3], "parent": v1}
    latest = _run(part_doc, db, "--session", str(session))  # under the session's newest: v3
    [v4] = latest["recorded"]["versions"]
    assert latest["recorded"] == {"session": session, "versions": [v4], "parent": v3}

    listed = json.loads(run("snapshots", "list", "--session", str(session), "--db", str(db),
                            "--json").stdout)  # fmt: skip
    parents = {v["id"]: v["parent"] for v in listed}
    assert parents == {v1: None, v2: v1, v3: v1, v4: v3}
    proc = run("snapshots", "list", "--session", str(session), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"session {session}: part.txt (4 versions")
    tree = [line[: line.index("  ", line.index("#"))] for line in lines[1:]]  # drawing, id
    assert tree == [f"└─ #{v1} v1", f"   ├─ #{v2} v2", f"   └─ #{v3} v3", f"      └─ #{v4} v4"]
    assert lines[-1].endswith("◀ newest") and sum("newest" in line for line in lines) == 1
    assert "summarize · head · n_ctx 512 · max 2" in lines[-1]
    # (without --session or --parent a run starts a new session, as before: tests/cli/
    # test_snapshots.py and tests/services/test_version_tree.py)


def test_a_session_or_parent_that_does_not_fit_is_one_sentence_and_changes_nothing(
    tmp_path: Path, part_doc: Path
) -> None:
    db = tmp_path / "h.db"
    session, v1, _v2 = _seed(db, part_doc)
    other_doc = tmp_path / "other.txt"
    other_doc.write_text("Another document entirely.", encoding="utf-8")
    other, other_v1, _ = _seed(db, other_doc)
    before = db.read_bytes()
    cases = {
        ("--session", "99"): "there is no session 99",
        ("--parent", "99"): "there is no version 99",
        ("--session", str(other)): f"session {other} is on another document (other.txt)",
        ("--parent", str(other_v1)): f"session {other} is on another document (other.txt)",
        ("--session", str(session), "--parent", str(other_v1)):
            f"version {other_v1} is in session {other}, not in session {session}",
    }  # fmt: skip
    for flags, message in cases.items():
        proc = run("run", str(part_doc), "--strategy", "head", "--db", str(db), *flags)
        assert proc.returncode == 2, (flags, proc.stderr)
        assert_one_line_error(proc)
        assert message in proc.stderr, (flags, proc.stderr)
    proc = run("snapshots", "list", "--session", "99", "--db", str(db))
    assert proc.returncode == 2 and "there is no session 99" in proc.stderr
    assert_one_line_error(proc)
    assert db.read_bytes() == before
    assert v1 != other_v1
