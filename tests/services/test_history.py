"""The history's operations (app/services/history.py) do the store's work and say what they
changed: rollback and branch add a version (selected next), delete removes versions or whole
sessions and says how many undos bring them back, undo says what came back, export changes
nothing, import adds a session with its versions; a cancelled archive operation changes nothing.
Real SQLite file, no model (the results and the KV state are made here)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.core.documents import document_from_text
from app.core.engine.types import KVState
from app.core.jobs.events import JobResult, OutputSpan
from app.services import history as ops
from app.services import versions
from app.store.repository import Entry, Repository
from tests.store.kv_states import engine_state

pytestmark = pytest.mark.unit

SHA = "m" * 64
CONTENT = {"task": "summarize", "strategy": "head", "prompt": "Summarize.", "model_path": "/m.gguf",
           "model_sha256": SHA, "settings": {"n_ctx": 512}}  # fmt: skip
DOC = document_from_text("The harbour at dawn. " * 50, name="harbour.txt")


@dataclass
class Tree:
    store: versions.History  # what a face holds
    repo: Repository  # behind it, to check what was written
    session: int
    v1: int  # has a KV state
    v2: int  # child of v1
    other: int  # a second session, on another document
    w1: int  # its one version


def result(strategy: str = "head") -> JobResult:
    out = OutputSpan("summary", "Short.", ((0, 100),), 1, "stop")
    return JobResult("summarize", strategy, "stop", 512, prompt_tokens=400, completion_tokens=20,
                     outputs=[out])  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    with versions.history(tmp_path / "h.db") as h:
        repo = h.repo
        state = KVState((1, 2, 3, 4), engine_state(4), 512, "f16", "/m.gguf")
        [v1] = repo.record(DOC, "harbour", [Entry(CONTENT, result(), state, prompt_tokens=3)])
        session = repo.get_version(v1).session
        [v2] = repo.record(DOC, "harbour", [Entry({**CONTENT, "strategy": "tail"}, result("tail"))],
                           session=session, parent=v1)  # fmt: skip
        other_doc = document_from_text("Another text.", name="other.txt")
        [w1] = repo.record(other_doc, "other", [Entry(CONTENT, result())])
        yield Tree(h, repo, session, v1, v2, repo.get_version(w1).session, w1)


def ids(repo: Repository, session: int | None = None) -> list[int]:
    return [v.id for v in repo.history(session)]


def test_nothing_changed_is_said_so() -> None:
    assert not ops.Changes().changed
    assert ops.Changes(sessions_changed=(1,)).changed and ops.Changes(versions_removed=(2,)).changed
    assert not ops.Changes(select=3).changed  # selecting is not a change to read again


def test_a_rollback_adds_a_version_equal_to_the_old_one_and_selects_it(tree: Tree) -> None:
    done = ops.rollback(tree.store, tree.v1)
    new = done.version
    assert isinstance(done, ops.NewVersion) and done.changed
    assert (new.parent, new.session, new.prompt, new.strategy) == (
        tree.v1, tree.session, "Summarize.", "head")  # fmt: skip
    assert done.versions_added == (new.id,) and done.select == new.id
    assert done.sessions_changed == (tree.session,)
    assert (done.sessions_added, done.sessions_removed, done.versions_removed) == ((), (), ())
    assert ids(tree.repo, tree.session) == [tree.v1, tree.v2, new.id]  # nothing after it is lost


def test_a_branch_adds_a_version_with_the_new_prompt(tree: Tree) -> None:
    done = ops.branch(tree.store, tree.v2, prompt="Summarize in French.")
    assert done.version.prompt == "Summarize in French." and done.version.parent == tree.v2
    assert done.version.strategy == "tail"  # the rest as the version it came from
    assert (done.versions_added, done.select) == ((done.version.id,), done.version.id)
    assert done.sessions_changed == (tree.session,)


def test_rollback_and_branch_of_a_missing_version_change_nothing(tree: Tree) -> None:
    before = ids(tree.repo)
    with pytest.raises(ops.BadRequest, match="there is no version 99"):
        ops.rollback(tree.store, 99)
    with pytest.raises(ops.BadRequest, match="has no field 'colour'"):
        ops.branch(tree.store, tree.v1, colour="red")
    assert ids(tree.repo) == before


def test_delete_says_what_went_and_undo_brings_it_back(tree: Tree) -> None:
    repo = tree.repo
    done = ops.delete(tree.store, versions=[tree.v2, tree.w1], sessions=[tree.other])
    # w1 goes with its session: one undo for the version, one for the session
    assert done.undoable == 2 and done.select is None and done.changed
    assert set(done.versions_removed) == {tree.v2, tree.w1}
    assert done.sessions_removed == (tree.other,) and done.sessions_changed == (tree.session,)
    assert ids(repo) == [tree.v1] and [s["id"] for s in repo.sessions()] == [tree.session]

    back = ops.undo_delete(tree.store)  # the session, deleted last
    assert (back.kind, back.item) == ("session", tree.other)
    assert back.sessions_added == (tree.other,) and back.versions_added == (tree.w1,)
    assert back.select is None
    back = ops.undo_delete(tree.store)
    assert (back.kind, back.item, back.select) == ("version", tree.v2, tree.v2)
    assert back.versions_added == (tree.v2,) and back.sessions_changed == (tree.session,)
    assert ids(repo) == [tree.v1, tree.v2, tree.w1]

    nothing = ops.undo_delete(tree.store)
    assert nothing.kind is None and nothing.item is None and not nothing.changed


def test_delete_one_version_or_one_session(tree: Tree) -> None:
    done = ops.delete_version(tree.store, tree.v2)
    assert (done.versions_removed, done.sessions_changed, done.undoable) == (
        (tree.v2,), (tree.session,), 1)  # fmt: skip
    done = ops.delete_session(tree.store, tree.session)
    assert done.sessions_removed == (tree.session,) and done.versions_removed == (tree.v1,)
    assert done.sessions_changed == () and done.undoable == 1
    assert ids(tree.repo) == [tree.w1]


def test_deleting_a_missing_version_deletes_nothing(tree: Tree) -> None:
    with pytest.raises(ops.BadRequest, match="there is no version 99"):
        ops.delete(tree.store, versions=[tree.v2, 99])
    assert ids(tree.repo) == [tree.v1, tree.v2, tree.w1]
    assert not ops.undo_delete(tree.store).changed


def test_export_changes_nothing_and_import_adds_a_session(tree: Tree, tmp_path: Path) -> None:
    target = tmp_path / "harbour.ctxlens"
    reports: list[tuple[int, int]] = []
    done = ops.export_session(tree.store, tree.session, target, include_kv=True,
                              progress=lambda d, t: reports.append((d, t)))  # fmt: skip
    assert isinstance(done, ops.Exported) and not done.changed and done.select is None
    assert (done.summary.path, done.summary.versions, done.summary.runs,
            done.summary.kv_states) == (target, 2, 2, 1)  # fmt: skip
    assert target.is_file() and reports and reports[-1][0] == reports[-1][1]

    before = set(ids(tree.repo))
    came = ops.import_session(tree.store, target)
    new = came.summary.session_id
    assert new not in (tree.session, tree.other)
    assert came.sessions_added == (new,) and came.select is None and came.changed
    assert set(came.versions_added) == set(ids(tree.repo, new)) and len(came.versions_added) == 2
    assert set(ids(tree.repo)) == before | set(came.versions_added)
    assert (came.summary.versions, came.summary.runs, came.summary.kv_states) == (2, 2, 1)


def test_cancelled_archive_operations_change_nothing(tree: Tree, tmp_path: Path) -> None:
    target = tmp_path / "out.ctxlens"
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ops.Cancelled):
        ops.export_session(tree.store, tree.session, target, cancel=cancel)
    assert not target.exists()
    ops.export_session(tree.store, tree.session, target)
    sessions = tree.repo.sessions()
    with pytest.raises(ops.Cancelled):
        ops.import_session(tree.store, target, cancel=cancel)
    assert tree.repo.sessions() == sessions


def test_a_bad_archive_is_one_sentence_and_adds_nothing(tree: Tree, tmp_path: Path) -> None:
    bad = tmp_path / "bad.ctxlens"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ops.BadRequest, match=r"bad\.ctxlens"):
        ops.import_session(tree.store, bad)
    with pytest.raises(ops.BadRequest, match="there is no session 99"):
        ops.export_session(tree.store, 99, tmp_path / "none.ctxlens")
    assert len(tree.repo.sessions()) == 2

