"""A history to export and the pieces of a .ctxlens archive, for the archive tests
(tests/store/test_archive.py, tests/store/test_archive_hostile.py, tests/store/conftest.py): a
session with a branching tree, runs and a KV state; an archive's members rebuilt with a
manifest, one change at a time; the database's fingerprint, to show an import left it as it was."""

from __future__ import annotations

import hashlib
import io
import json
import warnings
import zipfile
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
from sqlalchemy import func, select

from app.core.documents import document_from_text
from app.core.jobs.tasks import JobResult, OutputSpan
from app.store.models import Base, KVStateRow
from app.store.repository import Repository
from tests.store.kv_states import engine_state

TEXT = "Chapter 1. The harbour at dawn.\n\n第一章。港の夜明け。🌅\n" * 40
TOKENS = (1, 2, 3, 70000, -5, 2**31 - 1)
STATE = engine_state(len(TOKENS))  # 24 KiB laid out as llama.cpp writes a state


def add_kv(repo: Repository, version_id: int, tokens: tuple[int, ...], data: bytes) -> int:
    """A KV state row as the first schema stored it (zlib), with its prompt length."""

    def action(s: Any) -> int:
        row = KVStateRow(version_id=version_id, model_sha256="m" * 64, n_ctx=2048,
                         cache_type="f16",
                         tokens=zlib.compress(np.asarray(tokens, dtype="<i4").tobytes(), 1),
                         data=zlib.compress(data, 1), ring={"capacity": 2048, "segments": [1]},
                         prompt_tokens=4, state_bytes=len(data))  # fmt: skip
        s.add(row)
        s.flush()
        return row.id

    return repo.write(action)


def populate(repo: Repository) -> int:
    """A session with a document, a branching tree of four versions, two runs, one KV state."""
    doc = document_from_text(TEXT, name="harbour.txt")
    sid = repo.create_session("Harbour report", repo.add_document(doc))
    v1 = repo.save_version(sid, task="summarize", strategy="head", prompt="Summarize.",
                           model_path="/m/a.gguf", model_sha256="a" * 64,
                           settings={"n_ctx": 2048, "temperature": 0.2})  # fmt: skip
    v2 = repo.save_version(sid, task="summarize", strategy="map_reduce", prompt="Summarize.")
    v3 = repo.branch(v1.id, prompt="Résume en français.", settings={"n_ctx": 4096})
    repo.save_version(sid, task="ask", strategy="rolling", prompt="Who?", parent_id=v3.id)
    out = OutputSpan("summary", "Short. 短い。", ((0, 100), (200, 300)), 3, "stop")
    result = JobResult("summarize", "head", "stop", 2048, prompt_tokens=400,
                       completion_tokens=20, kv_peak_cells=420, ttft_s=[1.5], seconds=2.5,
                       outputs=[out], truncated=True,
                       plan={"strategy": "head", "budget": 1800, "total_tokens": 9,
                             "kept": [{"start": 0, "end": 2, "tokens": 1,
                                       "reason": "the start of the document"}]})  # fmt: skip
    repo.save_run(v1.id, result)
    repo.save_run(v2.id, result)
    add_kv(repo, v3.id, TOKENS, STATE)
    return sid


def fingerprint(repo: Repository) -> tuple[Any, ...]:
    """The database files' bytes and every table's row count."""
    path = repo._db.path
    files = []
    for side in (path, path.with_name(path.name + "-wal")):
        files.append(hashlib.sha256(side.read_bytes()).hexdigest() if side.exists() else None)
    counts = repo.read(
        lambda s: {
            t.name: s.scalar(select(func.count()).select_from(t))
            for t in Base.metadata.sorted_tables
        }
    )
    return (*files, counts)


def zip_bytes(entries: list[tuple[str, bytes]], *, stored: bool = False) -> bytes:
    """A zip of ``entries``, deflated (unless ``stored``) but for the KV data, which is stored
    as the exporter stores it."""
    buf = io.BytesIO()
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are written on purpose
        with zipfile.ZipFile(buf, "w", compression=method) as zf:
            for name, data in entries:
                kv = name.startswith("kv/")
                zf.writestr(name, data, compress_type=zipfile.ZIP_STORED if kv else None)
    return buf.getvalue()


def manifest_for(entries: list[tuple[str, bytes]], **changes: Any) -> bytes:
    members = {n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in entries}
    manifest = {"format": "contextlens-session", "format_version": 1, "app_version": "0.1.0",
                "created": "2026-01-01T00:00:00+00:00", "members": members} | changes  # fmt: skip
    return json.dumps(manifest).encode()


class Good:
    """The members of a real export (with KV), to be damaged one way at a time."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            self.members = [(n, zf.read(n)) for n in zf.namelist() if n != "manifest.json"]

    def body(self) -> dict[str, Any]:
        return json.loads(dict(self.members)["session.json"])

    def with_body(self, change: Callable[[dict[str, Any]], None]) -> bytes:
        body = self.body()
        change(body)
        return self.rebuilt({"session.json": json.dumps(body).encode()})

    def rebuilt(self, replace: dict[str, bytes], **manifest: Any) -> bytes:
        entries = [(n, replace.get(n, d)) for n, d in self.members]
        return zip_bytes([*entries, ("manifest.json", manifest_for(entries, **manifest))])


def set_in(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        target: Any = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change

