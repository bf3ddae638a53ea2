"""The history API on a real SQLite file: tree, branch, diff, rollback, runs, KV states."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.core.documents import document_from_text
from app.core.engine.types import KVState
from app.core.jobs.tasks import JobResult, OutputSpan
from app.store import rows
from app.store.db import open_database
from app.store.repository import Entry, Repository, RepositoryError

pytestmark = pytest.mark.unit


def test_history_is_a_tree_and_editing_an_old_version_branches(repo: Repository) -> None:
    sid = repo.create_session("report")
    v1 = repo.save_version(sid, task="summarize", strategy="head", prompt="Summarize.")
    v2 = repo.save_version(sid, task="summarize", strategy="tail", prompt="Summarize.")
    v3 = repo.branch(v1.id, prompt="Summarize in French.")
    assert (v1.parent, v2.parent, v3.parent) == (None, v1.id, v1.id)
    assert [v.number for v in repo.history(sid)] == [1, 2, 3]
    tree = {v.id: v.children for v in repo.history(sid)}
    assert tree[v1.id] == (v2.id, v3.id) and tree[v2.id] == ()


def test_diff_shows_prompt_and_settings(repo: Repository) -> None:
    sid = repo.create_session("s")
    a = repo.save_version(sid, task="ask", strategy="head", prompt="What?",
                          settings={"n_ctx": 2048})  # fmt: skip
    b = repo.branch(a.id, prompt="What exactly?", settings={"n_ctx": 4096})
    diff = repo.diff(a.id, b.id)
    assert "-What?" in diff and "+What exactly?" in diff
    assert '-  "n_ctx": 2048' in diff and '+  "n_ctx": 4096' in diff
    assert repo.diff(a.id, a.id) == ""


def test_rollback_makes_a_new_equal_version(repo: Repository) -> None:
    sid = repo.create_session("s")
    v1 = repo.save_version(sid, task="summarize", strategy="head", prompt="one")
    repo.save_version(sid, task="summarize", strategy="tail", prompt="two")
    back = repo.rollback(v1.id)
    assert back.number == 3 and back.parent == v1.id
    assert (back.prompt, back.strategy) == ("one", "head")
    assert len(repo.history(sid)) == 3  # nothing after v1 was lost


def test_soft_delete_and_undo(repo: Repository) -> None:
    sid = repo.create_session("s")
    v1 = repo.save_version(sid, task="summarize", strategy="head")
    repo.delete_version(v1.id)
    assert repo.history(sid) == []
    with pytest.raises(RepositoryError, match=f"no version {v1.id}"):
        repo.get_version(v1.id)
    assert repo.undo_delete() == ("version", v1.id) and [v.id for v in repo.history(sid)] == [v1.id]
    assert repo.undo_delete() is None


def test_a_deleted_middle_version_leaves_its_children_on_its_parent(repo: Repository) -> None:
    sid = repo.create_session("s")
    v1, v2, v3 = (
        repo.save_version(sid, task="ask", strategy=s) for s in ("head", "tail", "middle")
    )
    repo.delete_version(v2.id)
    tree = {v.id: (v.parent, v.children) for v in repo.history(sid)}
    assert tree == {v1.id: (None, (v3.id,)), v3.id: (v1.id, ())}
    assert repo.get_version(v3.id).parent == v1.id


def test_a_deleted_session_can_be_undone_until_close_and_is_then_gone(tmp_path: Path) -> None:
    db = open_database(tmp_path / "h.db")
    repo = Repository(db)
    doc = document_from_text("A text only this session uses.", name="only.txt")
    kept_doc = document_from_text("Another text.", name="kept.txt")
    result = JobResult("ask", "head", "stop", 512, final_prompt=(1, 2))
    state = KVState((1, 2, 3), b"kv", 512, "f16", "")
    [gone_v] = repo.record(doc, "gone", [Entry({"task": "ask", "strategy": "head"}, result,
                                               state, 2)])  # fmt: skip
    [kept_v] = repo.record(kept_doc, "kept", [Entry({"task": "ask", "strategy": "tail"}, result)])
    gone_s = repo.get_version(gone_v).session
    repo.delete_session(gone_s)
    assert [v.id for v in repo.history()] == [kept_v]
    with pytest.raises(RepositoryError, match=f"no version {gone_v}"):
        repo.get_version(gone_v)
    assert repo.undo_delete() == ("session", gone_s)
    assert [v.id for v in repo.history()] == [gone_v, kept_v]
    assert [s["name"] for s in repo.sessions()] == ["gone", "kept"]
    repo.delete_session(gone_s)
    repo.close()  # deletions become final: rows, runs, KV state and the unused text are gone
    counts = {}
    with sqlite3.connect(db.path) as con:
        for table in ("sessions", "prompt_versions", "runs", "kv_states", "documents",
                      "document_texts"):  # fmt: skip
            counts[table] = con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    con.close()
    db.close()
    assert counts == {"sessions": 1, "prompt_versions": 1, "runs": 1, "kv_states": 0,
                      "documents": 1, "document_texts": 1}  # fmt: skip
    again = Repository(open_database(db.path))
    assert again.undo_delete() is None and [v.id for v in again.history()] == [kept_v]
    again.close()


def test_record_is_one_transaction(repo: Repository) -> None:
    """A command's versions, runs and states go in together or not at all: the second entry
    fails inside the transaction, after the first version and run were written."""
    doc = document_from_text("Some text.", name="t.txt")
    good = Entry({"task": "ask", "strategy": "head"}, JobResult("ask", "head", "stop", 512))
    bad = Entry({"task": "ask", "strategy": "tail", "colour": "red"},
                JobResult("ask", "tail", "stop", 512))  # fmt: skip
    with pytest.raises(TypeError, match="colour"):
        repo.record(doc, "t", [good, bad])
    assert repo.history() == [] and repo.sessions() == []
    ids = repo.record(doc, "t", [good, good])
    assert [v.number for v in repo.history()] == [1, 2] and len(ids) == 2


def test_documents_are_stored_once_per_hash(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text the store has is not encoded and compressed again (for a long document that is
    tens of milliseconds holding the GIL, at every job recorded on it)."""
    packed: list[str] = []
    pack_text = rows.pack_text
    monkeypatch.setattr(rows, "pack_text", lambda d: packed.append(d.sha256) or pack_text(d))
    doc = document_from_text("The same text. 同じ文章。" * 100, name="a.txt")
    first, second = repo.add_document(doc), repo.add_document(doc)
    result = JobResult("ask", "head", "stop", 512, final_prompt=(1, 2))
    repo.record(doc, "again", [Entry({"task": "ask", "strategy": "head"}, result)])
    assert first != second and repo.document_text(second) == doc.text
    assert packed == [doc.sha256]  # once, for the first add
    other = document_from_text("Another text.", name="b.txt")
    repo.record(other, "new", [Entry({"task": "ask", "strategy": "head"}, result)])
    assert packed == [doc.sha256, other.sha256]


def test_runs_and_kv_states_round_trip(repo: Repository) -> None:
    sid = repo.create_session("s")
    v = repo.save_version(sid, task="summarize", strategy="head")
    out = OutputSpan("summary", "Short.", ((0, 100),), 3, "stop")
    result = JobResult("summarize", "head", "stop", 512, prompt_tokens=400,
                       completion_tokens=20, kv_peak_cells=420, ttft_s=[1.5],
                       outputs=[out], threads=2)  # fmt: skip
    # every change of the thread count is kept with the run, down and up, with its figure
    down = {"step": "summary", "from": 2, "to": 1, "cause": "slow",
            "reason": "decoding became much slower than before", "others": 0.0,
            "figure": "a decode took 0.500 s where 0.100 s was expected", "at_s": 1.2,
            "took_s": 0.5, "expected_s": 0.1}  # fmt: skip
    up = {"step": "summary", "from": 1, "to": 2, "cause": "quiet",
          "reason": "the machine is quiet again", "others": 0.05,
          "figure": "other programs used 0.05 cores", "at_s": 5.3}  # fmt: skip
    result.thread_changes = [down, up]
    repo.save_run(v.id, result)
    [run] = repo.runs(v.id)
    assert run["kv_peak_cells"] == 420 and run["outputs"][0]["source_spans"] == [[0, 100]]
    assert run["timings"]["thread_changes"] == [down, up] and run["timings"]["threads"] == 2
    state = KVState((1, 2, 3, 70000), b"\x01\x02" * 1000, 512, "f16", "/m.gguf")
    repo.save_kv_state(v.id, state, "abc", prompt_tokens=3, ring={"capacity": 512})
    got = repo.kv_state(v.id, model_sha256="abc", n_ctx=512, cache_type="f16", model_path="/m.gguf")
    assert got is not None and (got.state, got.prompt_tokens, got.version) == (state, 3, v.id)
    assert repo.kv_states(v.id)[0]["state_bytes"] == 2000
    for other in ({"model_sha256": "other"}, {"n_ctx": 1024}, {"cache_type": "q8_0"}):
        wanted = {"model_sha256": "abc", "n_ctx": 512, "cache_type": "f16"} | other
        assert repo.kv_state(v.id, **wanted) is None  # another model or settings: no resume
    with pytest.raises(RepositoryError, match="which of its tokens"):
        repo.save_kv_state(v.id, state, "abc", prompt_tokens=5)


def test_a_rollback_copy_resumes_from_the_state_of_the_version_it_equals(repo: Repository) -> None:
    sid = repo.create_session("s")
    v1 = repo.save_version(sid, task="ask", strategy="head", prompt="why?")
    state = KVState((5, 6, 7), b"kv", 512, "f16", "")
    repo.save_kv_state(v1.id, state, "abc", prompt_tokens=2)
    back = repo.rollback(repo.rollback(v1.id).id)  # a copy of a copy
    got = repo.kv_state(back.id, model_sha256="abc")
    assert got is not None and got.version == v1.id and got.state.tokens == (5, 6, 7)
    edited = repo.branch(v1.id, prompt="why not?")  # a different prompt: the state is not its
    assert repo.kv_state(edited.id, model_sha256="abc") is None


def test_unknown_ids_are_one_sentence(repo: Repository) -> None:
    with pytest.raises(RepositoryError, match="no session 42"):
        repo.save_version(42, task="ask", strategy="head")
    with pytest.raises(RepositoryError, match="no field 'colour'"):
        repo.branch(1, colour="red")
