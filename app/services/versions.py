"""Finished runs into the history, and versions back out of it.

What a version records (:func:`version_content`) is decided here once: two runs with equal
content did the same job, which is how ``batch`` skips a document it finds done, whether the run
was made by the command line or in the window. Each write returns what changed
(:class:`Recorded`), so the window refreshes only the session it touched.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.documents import Document
from app.core.engine.types import LoadSettings
from app.core.jobs.tasks import JobResult
from app.core.sampling import from_version, stored
from app.services.errors import BadRequest
from app.services.jobs import EngineFacts, JobOutcome, JobSpec, ResumeSpec
from app.store.db import Database, StoreError, default_db_path, open_database
from app.store.repository import Entry, Repository, VersionInfo


@dataclass(frozen=True)
class Recorded:
    """What a write changed: the session it went to and its new versions (or the version a
    resumed run was saved under)."""

    session: int
    versions: tuple[int, ...]


@dataclass
class History:
    """An open history database; ``notice`` says what the person should know about it (a
    damaged file set aside, a read-only file)."""

    db: Database
    repo: Repository

    @property
    def notice(self) -> str:
        return self.db.notice or ""

    def close(self) -> None:
        self.repo.close()
        self.db.close()


def open_history(path: Path | None = None) -> History:
    """The history at ``path`` (default: the user's); BadRequest when it cannot be opened."""
    try:
        db = open_database(path if path is not None else default_db_path())
    except StoreError as exc:
        raise BadRequest(str(exc)) from None
    return History(db, Repository(db))


@contextmanager
def history(path: Path | None = None) -> Iterator[History]:
    opened = open_history(path)
    try:
        yield opened
    finally:
        opened.close()


def check_writable(path: Path | None = None) -> None:
    """BadRequest now, before a long run, when its results could not be recorded."""
    with history(path) as h:
        if h.db.read_only:
            raise BadRequest(f"{h.db.path.name} is read-only; the run could not be recorded")


def version_content(spec: JobSpec, strategy: str, n_ctx: int,
                    engine: EngineFacts) -> dict[str, Any]:  # fmt: skip
    """What a version of ``spec`` under ``strategy`` records. Every field that changes the reply
    is here (the sampling with every field, the local KV cache's type), so a run made otherwise
    is not the same run."""
    settings: dict[str, Any] = {"n_ctx": n_ctx, "max_tokens": spec.max_tokens,
                                "engine": engine.engine, "sampling": stored(spec.sampling)}
    if engine.kv_cache_type is not None:
        settings["kv_cache_type"] = engine.kv_cache_type
    return {"task": spec.task, "strategy": strategy, "prompt": spec.prompt,
            "model_path": engine.model_label, "model_sha256": engine.model_sha256,
            "settings": settings}  # fmt: skip


def record_outcome(repo: Repository, doc: Document, outcome: JobOutcome) -> Recorded:
    """A finished job as one session with a version per strategy, each with its run and (when
    kept) its KV state, in one transaction."""
    engine = outcome.engine
    if engine is None:  # the job never started: nothing ran to record
        return Recorded(0, ())
    entries = [
        Entry(version_content(outcome.spec, r.strategy, r.n_ctx, engine), r,
              outcome.states.get(i), len(r.final_prompt))
        for i, r in enumerate(outcome.results)
    ]  # fmt: skip
    if not entries:
        return Recorded(0, ())
    ids = repo.record(doc, doc.name, entries)
    return Recorded(repo.get_version(ids[0]).session, tuple(ids))


def record_result(repo: Repository, doc: Document, spec: JobSpec, result: JobResult,
                  engine: EngineFacts) -> Recorded:  # fmt: skip
    """One document's result of a batch, as a session of its own (no KV state)."""
    content = version_content(spec, result.strategy, result.n_ctx, engine)
    [version] = repo.record(doc, doc.name, [Entry(content, result)])
    return Recorded(repo.get_version(version).session, (version,))


def done_before(repo: Repository, doc: Document, spec: JobSpec, n_ctx: int,
                engine: EngineFacts) -> int | None:  # fmt: skip
    """The version that already ran ``spec``'s (first) strategy on this document with these
    settings and finished, or None."""
    content = version_content(spec, spec.strategies[0], n_ctx, engine)
    return repo.finished_version(doc.sha256, content)


def stored_runs(repo: Repository, versions: Sequence[int]) -> list[dict[str, Any]]:
    """The last run recorded under each version, read back (what the audit checks)."""
    return [repo.runs(v)[-1] for v in versions]


def resume_spec(repo: Repository, version: VersionInfo, *, model_sha256: str,
                n_ctx: int | None = None, cache_type: str | None = None, model_path: str = "",
                max_tokens: int | None = None) -> ResumeSpec | None:  # fmt: skip
    """How to resume ``version`` from its saved KV state for this model (and context and cache
    type, when given), or None when none is saved. A version that ran on a server never has one
    (BadRequest says so)."""
    server = version.settings.get("engine", "local")
    if server != "local":
        raise BadRequest(
            f"version {version.id} ran on the server {server}, which keeps no KV state to resume "
            "from; roll back without resuming, then run it again on the server"
        )
    saved = repo.kv_state(version.id, model_sha256=model_sha256, n_ctx=n_ctx,
                          cache_type=cache_type, model_path=model_path)  # fmt: skip
    if saved is None:
        return None
    return ResumeSpec(saved.state, saved.prompt_tokens, version.task, version.strategy,
                      max_tokens or int(version.settings.get("max_tokens", 256)),
                      repo.output_sources(saved.version), from_version(version.settings),
                      saved.version)  # fmt: skip


def resume_settings(spec: ResumeSpec) -> LoadSettings:
    """The engine settings a saved state needs (its context size and cache type)."""
    cache = spec.state.kv_cache_type
    return LoadSettings(n_ctx=spec.state.n_ctx, kv_cache_type=cache,
                        flash_attn=cache not in ("f16", "f32", "bf16"))  # fmt: skip


def record_resumed(repo: Repository, version: VersionInfo, result: JobResult) -> Recorded:
    """A resumed reply, saved as a run of the version it was resumed for."""
    repo.save_run(version.id, result)
    return Recorded(version.session, (version.id,))
