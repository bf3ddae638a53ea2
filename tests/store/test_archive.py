"""Session export/import (.ctxlens): a faithful round trip, an atomic export, progress and
cancellation that leave everything as it was, and real damaged or hostile archives that are each
refused with one sentence while the database stays untouched."""

from __future__ import annotations

import json
import threading
import zipfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select

from app.core.cancelled import Cancelled
from app.core.jobs.tasks import JobResult
from app.store import archive, archive_export, archive_validation
from app.store.archive import ArchiveError, export_session, import_session
from app.store.blobs import unpack
from app.store.models import DocumentText, KVStateRow, PromptVersion, Session
from app.store.repository import Repository
from tests.store.archives import (
    STATE,
    TEXT,
    TOKENS,
    Good,
    add_kv,
    fingerprint,
    manifest_for,
    populate,
    set_in,
    zip_bytes,
)

pytestmark = pytest.mark.unit


def tree(repo: Repository, sid: int) -> list[tuple[Any, ...]]:
    """The session's versions with parents given as numbers: comparable across databases."""
    history = repo.history(sid)
    number = {v.id: v.number for v in history}
    return [
        (v.number, number.get(v.parent) if v.parent else None, v.task, v.strategy, v.prompt,
         v.model_path, v.model_sha256, v.settings, v.created)
        for v in history
    ]  # fmt: skip


def runs_of(repo: Repository, sid: int) -> list[dict[str, Any]]:
    runs = []
    for v in repo.history(sid):
        for r in repo.runs(v.id):
            runs.append({k: val for k, val in r.items() if k != "id"} | {"number": v.number})
    return runs


def kv_rows(repo: Repository, sid: int) -> list[tuple[Any, ...]]:
    def action(s: Any) -> list[tuple[Any, ...]]:
        rows = s.execute(
            select(KVStateRow, PromptVersion.number)
            .join(PromptVersion, KVStateRow.version_id == PromptVersion.id)
            .where(PromptVersion.session_id == sid)
            .order_by(KVStateRow.id)
        ).all()
        return [
            (n, unpack(k.tokens), unpack(k.data), k.prompt_tokens,
             k.state_bytes, k.ring, k.n_ctx, k.cache_type, k.model_sha256, k.created)
            for k, n in rows
        ]  # fmt: skip

    return repo.read(action)


def session_document(repo: Repository, sid: int) -> str:
    def action(s: Any) -> int:
        return s.get(Session, sid).document_id

    return repo.document_text(repo.read(action))


# ----- round trip -----


def test_round_trip_with_kv_into_a_fresh_database(
    tmp_path: Path, repo: Repository, open_repo: Callable[[str], Repository]
) -> None:
    sid = populate(repo)
    target = tmp_path / "harbour.ctxlens"
    summary = export_session(repo, sid, target, include_kv=True)
    assert (summary.versions, summary.runs, summary.kv_states) == (4, 2, 1)
    assert summary.path == target and summary.bytes == target.stat().st_size
    with zipfile.ZipFile(target) as zf:
        names = set(zf.namelist())
        manifest = json.loads(zf.read("manifest.json"))
        assert zf.read("document.txt").decode("utf-8") == TEXT
    kv_id = json.loads(zipfile.ZipFile(target).read("session.json"))["kv_states"][0]["id"]
    assert names == {"manifest.json", "session.json", "document.txt", f"kv/{kv_id}.tokens",
                     f"kv/{kv_id}.state"}  # fmt: skip
    assert manifest["format"] == "contextlens-session" and manifest["format_version"] == 1
    assert set(manifest["members"]) == names - {"manifest.json"}

    other = open_repo("y.db")
    other.create_session("already here")
    got = import_session(other, target)
    assert (got.versions, got.runs, got.kv_states) == (4, 2, 1)
    assert tree(other, got.session_id) == tree(repo, sid)
    assert runs_of(other, got.session_id) == runs_of(repo, sid)
    assert kv_rows(other, got.session_id) == kv_rows(repo, sid)
    assert session_document(other, got.session_id) == TEXT
    [(_, tokens, data, prompt_tokens, *_)] = kv_rows(other, got.session_id)
    assert np.frombuffer(tokens, "<i4").tolist() == list(TOKENS)
    assert (data, prompt_tokens) == (STATE, 4)

    again = import_session(other, target)
    assert again.session_id != got.session_id
    assert tree(other, again.session_id) == tree(repo, sid)
    texts = other.read(lambda s: s.scalar(select(func.count()).select_from(DocumentText)))
    assert texts == 1
    assert len({v.session for v in other.history()}) == 2  # the empty session has no versions


def test_export_without_kv_has_no_kv_members(tmp_path: Path, repo: Repository) -> None:
    sid = populate(repo)
    summary = export_session(repo, sid, tmp_path / "a.ctxlens")
    assert summary.kv_states == 0
    with zipfile.ZipFile(tmp_path / "a.ctxlens") as zf:
        assert not [n for n in zf.namelist() if n.startswith("kv/")]
        assert json.loads(zf.read("session.json"))["kv_states"] == []


def test_a_session_without_document_has_no_document_member(
    tmp_path: Path, repo: Repository, open_repo: Callable[[str], Repository]
) -> None:
    sid = repo.create_session("bare")
    repo.save_version(sid, task="ask", strategy="head", prompt="Hi")
    export_session(repo, sid, tmp_path / "b.ctxlens")
    with zipfile.ZipFile(tmp_path / "b.ctxlens") as zf:
        assert "document.txt" not in zf.namelist()
    other = open_repo("y.db")
    got = import_session(other, tmp_path / "b.ctxlens")
    assert tree(other, got.session_id) == tree(repo, sid)


def test_deleted_versions_are_left_out_and_their_children_reparented(
    tmp_path: Path, repo: Repository, open_repo: Callable[[str], Repository]
) -> None:
    sid = repo.create_session("s")
    v1 = repo.save_version(sid, task="ask", strategy="head", prompt="one")
    v2 = repo.save_version(sid, task="ask", strategy="head", prompt="two")
    v3 = repo.save_version(sid, task="ask", strategy="head", prompt="three")
    v4 = repo.save_version(sid, task="ask", strategy="head", prompt="four")
    repo.save_run(v2.id, JobResult("ask", "head", "stop", 512))
    add_kv(repo, v2.id, (1, 2, 3, 4), b"x")
    repo.delete_version(v2.id)
    repo.delete_version(v3.id)
    summary = export_session(repo, sid, tmp_path / "d.ctxlens", include_kv=True)
    assert (summary.versions, summary.runs, summary.kv_states) == (2, 0, 0)
    body = json.loads(zipfile.ZipFile(tmp_path / "d.ctxlens").read("session.json"))
    assert [(v["id"], v["parent"]) for v in body["versions"]] == [(v1.id, None), (v4.id, v1.id)]
    other = open_repo("y.db")
    got = import_session(other, tmp_path / "d.ctxlens")
    assert [(n, p, prompt) for n, p, _, _, prompt, *_ in tree(other, got.session_id)] == [
        (1, None, "one"), (4, 1, "four")
    ]  # fmt: skip


def test_unknown_or_deleted_session_and_folder_target(tmp_path: Path, repo: Repository) -> None:
    with pytest.raises(ArchiveError, match="there is no session 42"):
        export_session(repo, 42, tmp_path / "a.ctxlens")
    assert not (tmp_path / "a.ctxlens").exists()
    sid = repo.create_session("gone")
    repo.write(lambda s: setattr(s.get(archive.Session, sid), "deleted", datetime.now()))
    with pytest.raises(ArchiveError, match=f"no session {sid}"):
        export_session(repo, sid, tmp_path / "a.ctxlens")
    live = repo.create_session("live")
    with pytest.raises(ArchiveError, match="is a folder") as info:
        export_session(repo, live, tmp_path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("where", ["second member", "fsync", "replace"])
def test_an_interrupted_export_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, repo: Repository, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    sid = populate(repo)
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "s.ctxlens"
    target.write_bytes(b"the earlier export")
    real_put = archive_export._put_member
    calls = []

    def failing_put(*args: Any, **kwargs: Any) -> None:
        calls.append(args[1])
        if len(calls) == 2:
            raise RuntimeError("disk vanished")
        real_put(*args, **kwargs)

    def fail(*_args: Any) -> None:
        raise OSError(5, "Input/output error")

    if where == "second member":
        monkeypatch.setattr(archive_export, "_put_member", failing_put)
    elif where == "fsync":
        monkeypatch.setattr(archive.os, "fsync", fail)
    else:
        monkeypatch.setattr(archive.os, "replace", fail)
    with pytest.raises((RuntimeError, ArchiveError)) as info:
        export_session(repo, sid, target, include_kv=True)
    if where != "second member":
        assert isinstance(info.value, ArchiveError) and "\n" not in str(info.value)
    assert target.read_bytes() == b"the earlier export"
    assert sorted(p.name for p in folder.iterdir()) == ["s.ctxlens"]


# ----- progress and cancel -----

SMALL_CHUNK = 4096  # so the 16 KiB KV state alone takes several chunks


class Recorder:
    """A progress callback that records its calls (and their threads) and may set the cancel
    event at one of them: ``at`` is a call index, or a test of (done, total, thread name)."""

    def __init__(self, at: int | Callable[[int, int, str], bool] | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.threads: list[str] = []
        self.cancel = threading.Event()
        self.cancelled_at: tuple[int, int, str] | None = None
        self._at = at

    def __call__(self, done: int, total: int) -> None:
        name = threading.current_thread().name
        index = len(self.calls)
        self.calls.append((done, total))
        self.threads.append(name)
        hit = self._at == index if isinstance(self._at, int) else (
            self._at is not None and self._at(done, total, name)
        )  # fmt: skip
        if hit and not self.cancel.is_set():
            self.cancelled_at = (done, total, name)
            self.cancel.set()


def assert_steady(calls: list[tuple[int, int]]) -> None:
    """One total throughout, done never going back, starting at 0 and ending at the total."""
    assert calls, "no progress was reported"
    total = calls[0][1]
    assert total > 0 and all(t == total for _, t in calls)
    dones = [d for d, _ in calls]
    assert dones == sorted(dones) and dones[0] == 0 and dones[-1] == total
    assert all(0 <= d <= total for d in dones)


def test_export_progress_is_steady_chunked_and_ends_at_total(
    tmp_path: Path, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = populate(repo)
    monkeypatch.setattr(archive_export, "CHUNK", SMALL_CHUNK)
    rec = Recorder()
    export_session(repo, sid, tmp_path / "p.ctxlens", include_kv=True, progress=rec)
    assert_steady(rec.calls)
    assert len(STATE) // SMALL_CHUNK <= len(rec.calls) <= 40  # per chunk, not per byte
    assert set(rec.threads) == {threading.current_thread().name}


def test_import_progress_is_steady_and_counts_the_insert(
    tmp_path: Path, repo: Repository, open_repo: Callable[[str], Repository],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    target = tmp_path / "p.ctxlens"
    export_session(repo, populate(repo), target, include_kv=True)
    monkeypatch.setattr(archive_validation, "CHUNK", SMALL_CHUNK)
    rec = Recorder()
    got = import_session(open_repo("y.db"), target, progress=rec)
    assert got.kv_states == 1
    assert_steady(rec.calls)
    assert len(rec.calls) <= 40
    total = rec.calls[0][1]
    inserting = [d for (d, _), t in zip(rec.calls, rec.threads, strict=True)
                 if t.startswith("store-writer")]  # fmt: skip
    assert inserting and inserting[-1] == total and min(inserting) > total // 2


def export_calls(repo: Repository, sid: int, folder: Path) -> list[tuple[int, int]]:
    """The progress calls of an export that runs to the end (to pick points to cancel at)."""
    rec = Recorder()
    export_session(repo, sid, folder / "dry.ctxlens", include_kv=True, progress=rec)
    return rec.calls


@pytest.mark.parametrize("earlier", [True, False], ids=["over an earlier file", "new file"])
@pytest.mark.parametrize("point", ["before", "first", "middle", "last"])
def test_a_cancelled_export_writes_nothing(
    tmp_path: Path, repo: Repository, monkeypatch: pytest.MonkeyPatch, point: str, earlier: bool
) -> None:
    sid = populate(repo)
    monkeypatch.setattr(archive_export, "CHUNK", SMALL_CHUNK)
    calls = export_calls(repo, sid, tmp_path)
    at = {"before": None, "first": 0, "middle": len(calls) // 2, "last": len(calls) - 1}[point]
    assert point != "middle" or 0 < calls[at][0] < calls[at][1]
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "s.ctxlens"
    if earlier:
        target.write_bytes(b"the earlier export")
    before = fingerprint(repo)
    rec = Recorder(at)
    if point == "before":
        rec.cancel.set()
    with pytest.raises(Cancelled) as info:
        export_session(repo, sid, target, include_kv=True, progress=rec, cancel=rec.cancel)
    assert str(info.value) == "Export to s.ctxlens cancelled; nothing was written."
    assert not isinstance(info.value, ArchiveError)  # not a failure (app/core/cancelled.py)
    assert len(rec.calls) == (0 if at is None else at + 1)  # it stopped at once
    if earlier:
        assert target.read_bytes() == b"the earlier export"
        assert sorted(p.name for p in folder.iterdir()) == ["s.ctxlens"]
    else:
        assert list(folder.iterdir()) == []
    assert fingerprint(repo) == before


def on_writer(done: int, total: int, thread: str) -> bool:
    """The first report from inside the database transaction."""
    return thread.startswith("store-writer")


@pytest.mark.parametrize("point", ["before", "first", "middle", "insert", "last"])
def test_a_cancelled_import_adds_nothing(
    tmp_path: Path, repo: Repository, open_repo: Callable[[str], Repository],
    monkeypatch: pytest.MonkeyPatch, point: str,
) -> None:  # fmt: skip
    source = tmp_path / "in.ctxlens"
    export_session(repo, populate(repo), source, include_kv=True)
    source_bytes = source.read_bytes()
    monkeypatch.setattr(archive_validation, "CHUNK", SMALL_CHUNK)
    dry = Recorder()
    import_session(open_repo("dry.db"), source, progress=dry)
    middle = next(i for i, (d, t) in enumerate(dry.calls) if d > t // 4)  # among the reads
    assert not dry.threads[middle].startswith("store-writer")
    at: int | Callable[[int, int, str], bool] | None = {
        "before": None, "first": 0, "middle": middle, "insert": on_writer,
        "last": len(dry.calls) - 1,
    }[point]  # fmt: skip
    into = open_repo("y.db")
    into.create_session("already here")
    before = fingerprint(into)
    rec = Recorder(at)
    if point == "before":
        rec.cancel.set()
    with pytest.raises(Cancelled) as info:
        import_session(into, source, progress=rec, cancel=rec.cancel)
    assert str(info.value) == "Import of in.ctxlens cancelled; nothing was added."
    if point in ("insert", "last"):  # the rows were flushed inside the transaction, then undone
        assert rec.cancelled_at is not None and rec.cancelled_at[2].startswith("store-writer")
    assert fingerprint(into) == before
    assert [s["name"] for s in into.sessions()] == ["already here"]
    assert source.read_bytes() == source_bytes
    assert import_session(into, source).versions == 4  # and the same file imports afterwards


# ----- bad archives -----


def tamper_stored_byte(g: Good) -> bytes:
    """One byte flipped inside the document, in the zip file's own bytes (the CRC catches it)."""
    data = bytearray(zip_bytes([*g.members, ("manifest.json", manifest_for(g.members))],
                               stored=True))  # fmt: skip
    at = bytes(data).index(TEXT.encode()[:40]) + 10
    data[at] ^= 0x01
    return bytes(data)


def tampered_member(g: Good) -> bytes:
    """A valid zip whose document differs by one byte from what the manifest promises."""
    text = bytearray(dict(g.members)["document.txt"])
    text[10] ^= 0x01
    entries = [(n, bytes(text) if n == "document.txt" else d) for n, d in g.members]
    return zip_bytes([*entries, ("manifest.json", manifest_for(g.members))])


def lying_header_bomb(g: Good) -> bytes:
    """The document inflates to 8 MB while both its zip headers and the manifest claim 1,000
    bytes: reading must stop at the claim instead of trusting it."""
    zeros = bytes(8 * 1024 * 1024)
    entries = [(n, zeros if n == "document.txt" else d) for n, d in g.members]
    listed = [(n, zeros[:1000] if n == "document.txt" else d) for n, d in g.members]
    data = bytearray(zip_bytes([*entries, ("manifest.json", manifest_for(listed))]))
    name = b"document.txt"
    for signature, name_at, size_at in ((b"PK\x03\x04", 30, 22), (b"PK\x01\x02", 46, 24)):
        at = bytes(data).index(signature)
        while bytes(data[at + name_at : at + name_at + len(name)]) != name:
            at = bytes(data).index(signature, at + 4)
        data[at + size_at : at + size_at + 4] = (1000).to_bytes(4, "little")
    return bytes(data)


def parent_cycle(body: dict[str, Any]) -> None:
    versions = body["versions"]
    versions[0]["parent"] = versions[1]["id"]  # 1 -> 2 -> 1


def duplicate_version_id(body: dict[str, Any]) -> None:
    body["versions"][1]["id"] = body["versions"][0]["id"]


def kv_prompt_too_long(body: dict[str, Any]) -> None:
    body["kv_states"][0]["prompt_tokens"] = len(TOKENS) + 1


def odd_tokens(g: Good) -> bytes:
    name = next(n for n, _ in g.members if n.endswith(".tokens"))
    return g.rebuilt({name: dict(g.members)[name] + b"\x00"})


def drop_member(g: Good, name: str) -> bytes:
    entries = [(n, d) for n, d in g.members if n != name]
    return zip_bytes([*entries, ("manifest.json", manifest_for(g.members))])


def without_kv_members(g: Good) -> bytes:
    entries = [(n, d) for n, d in g.members if not n.startswith("kv/")]
    return zip_bytes([*entries, ("manifest.json", manifest_for(entries))])


def padded_kv_names(g: Good) -> bytes:
    entries = [(n.replace("kv/", "kv/0"), d) for n, d in g.members]
    return zip_bytes([*entries, ("manifest.json", manifest_for(entries))])


def add_member(g: Good, name: str, *, listed: bool) -> bytes:
    entries = [*g.members, (name, b"hello")]
    manifest = manifest_for(entries if listed else g.members)
    return zip_bytes([*entries, ("manifest.json", manifest)])


BAD: dict[str, tuple[Callable[[Good], bytes], str]] = {
    "not a zip": (lambda g: b"This is plain text, not a zip file at all.\n" * 20, "damaged"),
    "empty file": (lambda g: b"", "damaged"),
    "truncated halfway": (lambda g: g.data[: len(g.data) // 2], "damaged"),
    "byte flipped in the zip": (tamper_stored_byte, "damaged"),
    "member differs from manifest": (tampered_member, "does not match its manifest"),
    "manifest missing": (lambda g: zip_bytes(g.members), "no manifest"),
    "manifest not JSON": (
        lambda g: zip_bytes([*g.members, ("manifest.json", b"{nope")]),
        "not JSON",
    ),
    "member not in manifest": (
        lambda g: add_member(g, "notes.txt", listed=False),
        "not listed in its manifest",
    ),
    "unexpected listed member": (
        lambda g: add_member(g, "notes.txt", listed=True),
        "unexpected member",
    ),
    "manifest member missing": (lambda g: drop_member(g, "document.txt"), "lacks the member"),
    "dot-dot name": (lambda g: add_member(g, "../evil", listed=True), "unsafe name"),
    "absolute name": (lambda g: add_member(g, "/abs", listed=True), "unsafe name"),
    "backslash name": (lambda g: add_member(g, "kv\\1.state", listed=True), "unsafe name"),
    "drive letter": (lambda g: add_member(g, "C:evil", listed=True), "unsafe name"),
    "duplicate member": (
        lambda g: zip_bytes(
            [*g.members, ("session.json", b"{}"), ("manifest.json", manifest_for(g.members))]
        ),
        "more than once",
    ),
    "newer format": (
        lambda g: g.rebuilt({}, format_version=2),
        "newer ContextLens (format 2); update the app",
    ),
    "wrong format name": (lambda g: g.rebuilt({}, format="something-else"), "another format"),
    "manifest wrong types": (lambda g: g.rebuilt({}, members=[]), "invalid manifest"),
    "size mismatch": (
        lambda g: zip_bytes(
            [
                *g.members,
                (
                    "manifest.json",
                    manifest_for(
                        [(n, d + b"!" if n == "session.json" else d) for n, d in g.members]
                    ),
                ),
            ]
        ),
        "size does not match",
    ),
    "zip bomb": (
        lambda g: add_member_data(g, "document.txt", bytes(20 * 1024 * 1024)),
        "looks like a zip bomb",
    ),
    "lying header bomb": (lying_header_bomb, "damaged"),
    "duplicate version ids": (
        lambda g: g.with_body(duplicate_version_id),
        "version id",
    ),
    "duplicate version numbers": (
        lambda g: g.with_body(set_in(("versions", 1, "number"), 1)),
        "version number 1 more than once",
    ),
    "unknown parent": (
        lambda g: g.with_body(set_in(("versions", 1, "parent"), 99999)),
        "parent (99999) that is not in it",
    ),
    "parent cycle": (lambda g: g.with_body(parent_cycle), "cycle"),
    "run of unknown version": (
        lambda g: g.with_body(set_in(("runs", 0, "version"), 99999)),
        "run",
    ),
    "kv of unknown version": (
        lambda g: g.with_body(set_in(("kv_states", 0, "version"), 99999)),
        "KV state",
    ),
    "number as string": (
        lambda g: g.with_body(set_in(("versions", 0, "number"), "1")),
        "versions.0.number",
    ),
    "name as number": (lambda g: g.with_body(set_in(("session", "name"), 5)), "session.name"),
    "bool as int": (
        lambda g: g.with_body(set_in(("runs", 0, "prompt_tokens"), True)),
        "prompt_tokens",
    ),
    "unknown field": (
        lambda g: g.with_body(set_in(("versions", 0, "colour"), "red")),
        "colour",
    ),
    "session.json not JSON": (
        lambda g: g.rebuilt({"session.json": b"[1, 2"}),
        "invalid session.json",
    ),
    "kv prompt longer than tokens": (
        lambda g: g.with_body(kv_prompt_too_long),
        "more prompt tokens",
    ),
    "kv tokens not whole int32": (odd_tokens, "not whole int32"),
    "kv data missing": (without_kv_members, "lacks the data of KV state"),
    "kv name zero-padded": (padded_kv_names, "unexpected member"),
}


def add_member_data(g: Good, name: str, data: bytes) -> bytes:
    return g.rebuilt({name: data})


@pytest.mark.parametrize("case", list(BAD))
def test_bad_archives_are_refused_and_the_database_is_untouched(
    case: str, good: Good, tmp_path: Path, victim: Repository
) -> None:
    build, expected = BAD[case]
    bad = tmp_path / "bad.ctxlens"
    bad.write_bytes(build(good))
    before = fingerprint(victim)
    with pytest.raises(ArchiveError) as info:
        import_session(victim, bad)
    message = str(info.value)
    assert expected in message and message.startswith("bad.ctxlens ")
    assert "\n" not in message and len(message) < 300
    assert fingerprint(victim) == before


def test_oversized_member_against_a_small_cap(
    good: Good, tmp_path: Path, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "big.ctxlens"
    bad.write_bytes(good.data)
    monkeypatch.setattr(archive_validation, "MAX_DOCUMENT_BYTES", 100)
    before = fingerprint(repo)
    with pytest.raises(ArchiveError, match=r"too large to import \('document.txt'"):
        import_session(repo, bad)
    monkeypatch.setattr(archive_validation, "MAX_MEMBERS", 3)
    with pytest.raises(ArchiveError, match="too many members"):
        import_session(repo, bad)
    assert fingerprint(repo) == before


def test_not_a_file(tmp_path: Path, repo: Repository) -> None:
    with pytest.raises(ArchiveError, match=r"missing\.ctxlens does not exist"):
        import_session(repo, tmp_path / "missing.ctxlens")
    with pytest.raises(ArchiveError, match="is not a file"):
        import_session(repo, tmp_path)


def test_the_good_archive_imports(good: Good, tmp_path: Path, repo: Repository) -> None:
    """The table's damage is what is refused: the undamaged bytes import."""
    path = tmp_path / "good.ctxlens"
    path.write_bytes(good.rebuilt({}))
    assert import_session(repo, path).versions == 4
