"""Finished runs into the history, and versions back out of it.

What a version records (:func:`version_content`) is decided here once: two runs with equal
content did the same job, which is how ``batch`` skips a document it finds done, whether the run
was made by the command line or in the window. Each write returns what changed
(:class:`Recorded`), so the window refreshes only the session it touched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from app.core.documents import Document
from app.core.engine.types import LoadSettings
from app.core.history_records import VersionInfo
from app.core.jobs.resume import RESUMED_STEP
from app.core.jobs.ring import SegmentKind
from app.core.jobs.tasks import JobResult
from app.core.planning.plan import Plan, PlanWindow, Span
from app.core.sampling import from_version, stored
from app.services.errors import BadRequest, HistoryUnavailable
from app.services.jobs import EngineFacts, JobOutcome, JobSpec, ResumeSpec
from app.store.archive_format import ArchiveError
from app.store.db import StoreError, default_db_path, open_database
from app.store.repository import Entry, Repository, RepositoryError

# a KV state's prompt as the job laid it: (kind, first position, tokens, document span) each
SegmentLayout = tuple[tuple[str, int, int, tuple[int, int] | None], ...]

# the services' history API; the store's types it imports stay here (tests/test_architecture.py)
__all__ = [
    "History",
    "OpenedVersion",
    "Recorded",
    "SegmentLayout",
    "Target",
    "Turn",
    "Turned",
    "check_target",
    "check_writable",
    "done_before",
    "history",
    "latest_line",
    "open_history",
    "open_version",
    "plan_from_dict",
    "record_continuing",
    "record_outcome",
    "record_result",
    "record_resumed",
    "resume_settings",
    "resume_spec",
    "said",
    "saved_layout",
    "saved_ring",
    "split_questions",
    "store_errors_said",
    "stored_runs",
    "thread",
    "version_content",
]


@dataclass(frozen=True)
class Recorded:
    """What a write changed: the session it went to and its new versions (or the version a
    resumed run was saved under), and the version they are children of (None: roots)."""

    session: int
    versions: tuple[int, ...]
    parent: int | None = None
    # the last version of each strategy's line (a job of several questions records a version
    # per question, each the child of the one before); (): ``versions`` themselves
    ends: tuple[int, ...] = ()


@dataclass(frozen=True)
class Target:
    """Where a run's versions go: a new session (``session`` None), or a session's line of work
    under ``parent`` (None: under its newest version)."""

    session: int | None = None
    parent: int | None = None


@dataclass(frozen=True)
class OpenedVersion:
    """An old version as the window shows it again: its last run's outputs (step, text,
    source spans), finish reason, plan (None: its spans were not recorded, only
    ``plan_figures``) and whether it was made on the text of ``document_sha256`` (so its plan
    may be painted on that document only)."""

    version: VersionInfo
    outputs: tuple[dict[str, Any], ...]
    finish_reason: str
    plan: Plan | None
    document_sha256: str | None
    plan_figures: dict[str, Any] = field(default_factory=dict)  # as recorded with the run

    def is_its_plan(self, plan: Plan) -> bool:
        """Whether a plan made again is the one the run made (same strategy, budget, document
        tokens and kept tokens as recorded): only then is it shown as this version's."""
        figures = self.plan_figures
        return bool(figures) and (plan.strategy, plan.budget, plan.total_tokens,
                                  plan.kept_tokens) == (
            figures.get("strategy"), figures.get("budget"), figures.get("total_tokens"),
            figures.get("kept_tokens"))  # fmt: skip


P = ParamSpec("P")
T = TypeVar("T")


@contextmanager
def store_errors_said() -> Iterator[None]:
    """The store's errors as the services' own, one sentence each (the faces name no store
    type): what cannot be done as asked is a BadRequest, a database that cannot be read or
    written is HistoryUnavailable (a cancelled export or import stays the core's Cancelled)."""
    try:
        yield
    except (RepositoryError, ArchiveError) as exc:
        raise BadRequest(str(exc)) from None
    except StoreError as exc:
        raise HistoryUnavailable(str(exc)) from None


def said(call: Callable[P, T]) -> Callable[P, T]:
    """``call`` with the store's errors said as the services' (:func:`store_errors_said`)."""

    @functools.wraps(call)
    def plain(*args: P.args, **kwargs: P.kwargs) -> T:
        with store_errors_said():
            return call(*args, **kwargs)

    return plain


class History:
    """An open history database: what a face holds and hands to the services (``history.*``,
    the workbench), and what it reads the history through. The repository behind it is the
    services' own (``repo``); the faces never touch it (tests/test_architecture.py)."""

    def __init__(self, repo: Repository) -> None:
        self.repo, self.db = repo, repo.database

    @property
    def notice(self) -> str:
        """What the person should know about the file (a damaged one set aside, read-only)."""
        return self.db.notice or ""

    @property
    def read_only(self) -> bool:
        return self.repo.read_only

    def close(self) -> None:
        self.repo.close()
        self.db.close()

    # ----- what the faces read -----

    @said
    def sessions(self) -> list[dict[str, Any]]:
        """Every session, newest last: its id, document, when made, how many versions."""
        return self.repo.sessions()

    @said
    def session_info(self, session_id: int) -> dict[str, Any]:
        """One session (BadRequest when there is none)."""
        return self.repo.session_info(session_id)

    @said
    def versions(self, session_id: int | None = None) -> list[VersionInfo]:
        """The versions of one session (None: all), in creation order, each with its children."""
        return self.repo.history(session_id)

    @said
    def version(self, version_id: int) -> VersionInfo:
        """One version (BadRequest when it is not there)."""
        return self.repo.get_version(version_id)

    @said
    def runs(self, version_id: int) -> list[dict[str, Any]]:
        return self.repo.runs(version_id)

    @said
    def kv_states(self, version_id: int) -> list[dict[str, Any]]:
        return self.repo.kv_states(version_id)

    @said
    def diff(self, a: int, b: int) -> str:
        """A unified diff of two versions: their settings, prompts and replies."""
        return self.repo.diff(a, b)

    # ----- what the command line records -----

    @said
    def check_target(self, doc: Document, target: Target) -> None:
        check_target(self.repo, doc, target)

    @said
    def record_run(self, doc: Document, outcome: JobOutcome, target: Target) -> Recorded:
        """A finished run or comparison, under ``target``; when it was audited, each stored
        run is read back and checked against what ran (the audit's findings say otherwise)."""
        recorded = record_outcome(self.repo, doc, outcome, target)
        audit = outcome.audit
        if audit is not None:
            stored = stored_runs(self.repo, recorded.versions)
            for result, run in zip(outcome.results, stored, strict=True):
                audit.check_stored(result, run)
        return recorded

    @said
    def done_before(self, doc: Document, spec: JobSpec, n_ctx: int,
                    engine: EngineFacts) -> int | None:  # fmt: skip
        return done_before(self.repo, doc, spec, n_ctx, engine)

    @said
    def record_result(self, doc: Document, spec: JobSpec, result: JobResult,
                      engine: EngineFacts) -> Recorded:  # fmt: skip
        return record_result(self.repo, doc, spec, result, engine)

    @said
    def record_resumed(self, version: VersionInfo, result: JobResult) -> Recorded:
        return record_resumed(self.repo, version, result)


def open_history(path: Path | None = None) -> History:
    """The history at ``path`` (default: the user's); BadRequest when it cannot be opened."""
    try:
        db = open_database(path if path is not None else default_db_path())
    except StoreError as exc:
        raise BadRequest(str(exc)) from None
    return History(Repository(db))


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


def record_outcome(repo: Repository, doc: Document, outcome: JobOutcome,
                   target: Target | None = None, *, per_question: bool = False,
                   figures: Mapping[str, Mapping[str, Any]] | None = None) -> Recorded:  # fmt: skip
    """A finished job, in one transaction: a version per strategy, each with its run and (when
    kept) its KV state. Without a ``target`` (or with an empty one) they start a new session;
    with one they join that session as children of the same parent (one per strategy of a
    comparison). ``per_question``: an ask of several questions records a version per question
    (see :func:`split_questions`), each the child of the one before, the KV state with the
    version whose answer the job ended on; ``figures``: each question's plan figures, by
    question. RepositoryError (a ValueError, one sentence) when the target is gone or on
    another document; nothing is written then."""
    engine = outcome.engine
    if engine is None:  # the job never started: nothing ran to record
        return Recorded(0, ())
    entries, ends = [], []
    for i, r in enumerate(outcome.results):
        turns = (split_questions(outcome.spec, r, figures or {}) if per_question
                 else [Turned(outcome.spec, r, True)])  # fmt: skip
        for n, turn in enumerate(turns):
            state = outcome.states.get(i) if turn.holds_state else None
            entries.append(Entry(version_content(turn.spec, r.strategy, r.n_ctx, engine),
                                 turn.result, state, len(turn.result.final_prompt),
                                 follows_previous=n > 0,
                                 ring=saved_ring(turn.result) if state else None))  # fmt: skip
        ends.append(len(entries) - 1)
    if not entries:
        return Recorded(0, ())
    session, parent = _resolve(repo, target or Target())
    ids = repo.record(doc, doc.name, entries, session=session, parent=parent)
    first = repo.get_version(ids[0])
    lines = tuple(ids[e] for e in ends) if len(ends) < len(ids) else ()
    return Recorded(first.session, tuple(ids), first.parent, lines)


@dataclass(frozen=True)
class Turned:
    """One version a job's result makes: the job as that version records it, its result, and
    whether the KV state saved after the job is its (the job's last answer is its)."""

    spec: JobSpec
    result: JobResult
    holds_state: bool


def split_questions(spec: JobSpec, result: JobResult,
                    figures: Mapping[str, Mapping[str, Any]]) -> list[Turned]:  # fmt: skip
    """An ask of several questions as a version per question, as if each had been asked
    apart: its question as the prompt, its answer (and the partial answers of a multi-pass
    strategy) renumbered "answer 1", its plan's figures (from ``figures``, else the result's
    when the result's plan is its), its finish reason. The questions asked up to the last one
    answered are recorded, and the one after it when the job was cut short there (cancelled,
    failed) with the job's finish reason and error; the KV state goes with the last answered
    (its call is the one the state holds). Any other job is one version, as it ran."""
    questions = spec.questions
    whole = [Turned(spec, result, True)]
    if spec.task != "ask" or len(questions) < 2:
        return whole
    answered = [i for i in range(len(questions))
                if any(_answers(o.step, i + 1) for o in result.outputs)]  # fmt: skip
    if not answered:
        return whole
    last = max(answered)
    upto = last + 1
    if upto < len(questions) and result.finish_reason not in ("stop", "length"):
        upto += 1  # the question it stopped at
    made = []
    for i in range(upto):
        question = questions[i]
        outputs = [replace(o, step="answer 1" + o.step[len(f"answer {i + 1}"):])
                   for o in result.outputs if _answers(o.step, i + 1)]  # fmt: skip
        plan = figures.get(question)
        if plan is None:
            plan = result.plan if result.plan.get("question") == question else {}
        final = i == upto - 1
        one = replace(result, outputs=outputs, plan=dict(plan),
                      finish_reason=outputs[-1].finish_reason if outputs
                      else result.finish_reason,
                      error=result.error if final else None,
                      refused=result.refused if final else None,
                      final_prompt=result.final_prompt if i == last else ())  # fmt: skip
        made.append(Turned(replace(spec, questions=(question,)), one, i == last))
    return made


def _answers(step: str, n: int) -> bool:
    """Whether an output's step is question ``n``'s answer, or a part of it."""
    name = f"answer {n}"
    return step == name or step.startswith(name + " ")


def record_continuing(repo: Repository, doc: Document, outcome: JobOutcome, target: Target, *,
                      figures: Mapping[str, Mapping[str, Any]] | None = None) -> Recorded:
    """The window's rule: under ``target``; when its version was deleted since (in the History
    panel), under its session's newest version; when the session was too, in a new session. A
    run is never lost to a deletion made while it ran. An ask of several questions makes a
    version per question, each the child of the one before (``figures``: see
    :func:`record_outcome`)."""
    *nearer, last = dict.fromkeys((target, Target(target.session), Target()))
    for attempt in nearer:
        try:
            return record_outcome(repo, doc, outcome, attempt, per_question=True,
                                  figures=figures)  # fmt: skip
        except RepositoryError:
            continue  # deleted since: one step further out
    return record_outcome(repo, doc, outcome, last, per_question=True, figures=figures)


def _resolve(repo: Repository, target: Target) -> tuple[int | None, int | None]:
    """(session, parent) of a target whose parent implies its session (RepositoryError when
    the parent is in another session than the one named)."""
    if target.parent is None:
        return target.session, None
    session = repo.get_version(target.parent).session
    if target.session is not None and target.session != session:
        raise RepositoryError(f"version {target.parent} is in session {session}, "
                              f"not in session {target.session}")  # fmt: skip
    return session, target.parent


def check_target(repo: Repository, doc: Document, target: Target) -> None:
    """BadRequest in one sentence, before a long run, when its versions could not go where
    ``target`` says: the session or version is not there, the version is in another session,
    or the session is on another document."""
    try:
        if target.parent is not None:
            version = repo.get_version(target.parent)
            if target.session is not None and version.session != target.session:
                raise BadRequest(f"version {target.parent} is in session {version.session}, "
                                 f"not in session {target.session}")  # fmt: skip
            session = repo.session_info(version.session)
        elif target.session is not None:
            session = repo.session_info(target.session)
        else:
            return
    except RepositoryError as exc:
        raise BadRequest(str(exc)) from None
    if session["document_sha256"] != doc.sha256:
        name = Path(session["document"] or "").name or "no document"
        raise BadRequest(f"session {session['id']} is on another document ({name}), "
                         f"not on {doc.name}")  # fmt: skip


def latest_line(repo: Repository, doc: Document) -> tuple[int, int | None] | None:
    """The newest session on this document's text and its newest version, or None."""
    return repo.latest_session(doc.sha256)


def open_version(repo: Repository, version_id: int) -> OpenedVersion:
    """What the window needs to show an old version again (RepositoryError when it is gone)."""
    version = repo.get_version(version_id)
    runs = repo.runs(version_id)
    last = runs[-1] if runs else {}
    session = repo.session_info(version.session)
    plan = repo.last_plan(version_id) if runs else {}
    return OpenedVersion(version, tuple(last.get("outputs") or ()),
                         str(last.get("finish_reason", "")),
                         plan_from_dict(plan) if plan.get("kept") is not None else None,
                         session["document_sha256"], plan)  # fmt: skip


@dataclass(frozen=True)
class Turn:
    """One question of a thread and what the model answered, as recorded in ``version``."""

    version: int
    number: int  # the version's number in its session (v3)
    question: str
    answer: str
    finish_reason: str
    strategy: str


def thread(repo: Repository, version_id: int) -> list[Turn]:
    """The questions asked along the line of work that ends at ``version_id`` (its ancestors,
    then itself), oldest first, with their answers: the conversation a follow-up continues.
    Versions of another task (a summary between two questions) are passed over; a version that
    asked several questions gives a turn for each. A version asking what its parent asked (a
    rollback's copy, a run again) takes its parent's place: the question was asked once."""
    line: list[VersionInfo] = []
    at: int | None = version_id
    while at is not None:
        version = repo.get_version(at)
        line.append(version)
        at = version.parent
    line.reverse()
    line = [v for v, child in zip(line, [*line[1:], None], strict=True)
            if child is None or (child.task, child.prompt) != (v.task, v.prompt)]  # fmt: skip
    turns = []
    for version in line:
        if version.task != "ask":
            continue
        runs = repo.runs(version.id)
        last = runs[-1] if runs else {}
        answers = {str(o.get("step", "")): str(o.get("text", ""))
                   for o in last.get("outputs") or ()}  # fmt: skip
        finish = str(last.get("finish_reason", "")) if runs else ""
        questions = [q for q in version.prompt.split("\n") if q.strip()]
        for i, question in enumerate(questions):
            answer = answers.get(f"answer {i + 1}", "")
            if not answer and i == len(questions) - 1:  # a rollback's reply to the last one,
                answer = answers.get(RESUMED_STEP, "")  # generated again from its KV state
            turns.append(Turn(version.id, version.number, question, answer, finish,
                              version.strategy))  # fmt: skip
    return turns


def plan_from_dict(data: dict[str, Any]) -> Plan:
    """A recorded plan (``Plan.as_dict``) back as a Plan, without its chunks (not recorded)."""
    return Plan(strategy=str(data.get("strategy", "")), budget=int(data.get("budget", 0)),
                total_tokens=int(data.get("total_tokens", 0)),
                kept=tuple(Span.from_dict(s) for s in data.get("kept", ())),
                dropped=tuple(Span.from_dict(s) for s in data.get("dropped", ())),
                windows=tuple(PlanWindow(**w) for w in data.get("windows", ())),
                refused=data.get("refused"),
                boundary_integrity=float(data.get("boundary_integrity", 1.0)),
                question=str(data.get("question") or ""),
                document_tokens=int(data.get("document_tokens", 0)))  # fmt: skip


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
                      saved.version, saved_layout(saved.ring, saved.prompt_tokens))  # fmt: skip


def saved_ring(result: JobResult) -> dict[str, Any]:
    """What a KV state keeps of the job's ring: its last prompt's segments (resumed, the KV map
    shows the chunks, the question and the prefix the job left, not one pinned block)."""
    return {"layout": [[kind, pos, tokens, list(span) if span else None]
                       for kind, pos, tokens, span in result.final_layout]}  # fmt: skip


def saved_layout(ring: Mapping[str, Any], prompt_tokens: int) -> SegmentLayout:
    """The prompt's segments a state was kept with, when they are whole: of known kinds, each
    following the one before from position 0 to the prompt's end, spans in order; () otherwise
    (kept before segments were, or a damaged or foreign archive's)."""
    kinds = {k.value for k in SegmentKind}
    laid: list[tuple[str, int, int, tuple[int, int] | None]] = []
    at = 0
    for item in ring.get("layout") or ():
        if not isinstance(item, list | tuple) or len(item) != 4:
            return ()
        kind, pos, tokens, span = item
        if kind not in kinds or not _whole(pos, tokens) or pos != at or tokens < 1:
            return ()
        if span is not None and not (isinstance(span, list | tuple) and len(span) == 2
                                     and _whole(*span) and 0 <= span[0] < span[1]):  # fmt: skip
            return ()
        laid.append((kind, pos, tokens, (span[0], span[1]) if span is not None else None))
        at = pos + tokens
    return tuple(laid) if at == prompt_tokens else ()


def _whole(*values: object) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def resume_settings(spec: ResumeSpec) -> LoadSettings:
    """The engine settings a saved state needs (its context size and cache type)."""
    cache = spec.state.kv_cache_type
    return LoadSettings(n_ctx=spec.state.n_ctx, kv_cache_type=cache,
                        flash_attn=cache not in ("f16", "f32", "bf16"))  # fmt: skip


def record_resumed(repo: Repository, version: VersionInfo, result: JobResult) -> Recorded:
    """A resumed reply, saved as a run of the version it was resumed for."""
    repo.save_run(version.id, result)
    return Recorded(version.session, (version.id,), version.parent)
