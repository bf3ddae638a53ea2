"""The JSON of a ``.ctxlens`` file, as strict schemas with bounds.

Everything an import stores comes through these models, so every value is typed and bounded
here, before a row is written: integers fit the columns they go to (SQLite's are 64-bit; counts
of tokens are 32-bit in llama.cpp), dates convert to UTC within years 1970 to 9999, floats are
finite, and the fields the app reads back later (a version's settings and sampling, a run's
outputs and timings, a KV state's shape) have the types those readers expect. A value out of
bounds is a validation error like a wrong type, so the import names it in one sentence instead
of failing on an ``OverflowError`` mid-transaction or storing a value that fails on a later
rollback. A run's plan is read back when its version is opened (painted on the document): it
stays a plain JSON object, checked in one pass without a model per span (:func:`_check_plan`:
a plan of a million spans costs no more than its JSON). Fields no reader looks into (a KV
state's ring) stay plain JSON objects, bounded by the import's cap on what parsing a member may
cost.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from typing import Annotated, Any, Literal, get_args, get_type_hints

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator

from app.core.engine.types import KV_CACHE_TYPE_NAMES, SamplingSettings
from app.store.models import as_utc

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MIN_YEAR, MAX_YEAR = 1970, 9999
MAX_N_CTX = 1 << 24  # the largest context a stored KV state may claim
MAX_LABEL = 32  # task, strategy and finish reason: String(32) columns


def _moment(value: datetime) -> datetime:
    """The time in UTC (naive ones are UTC already), refused outside the years kept."""
    try:
        utc = as_utc(value)
    except OverflowError:  # 0001-01-01 at +01:00 is before the first representable UTC time
        raise ValueError(f"a date between {MIN_YEAR} and {MAX_YEAR} was expected") from None
    if not MIN_YEAR <= utc.year <= MAX_YEAR:
        raise ValueError(f"a date between {MIN_YEAR} and {MAX_YEAR} was expected")
    return utc


Moment = Annotated[datetime, AfterValidator(_moment)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
ModelSha = Annotated[str, Field(max_length=64)]  # a GGUF's sha256, "" for a server's model
Id = Annotated[int, Field(ge=0, le=INT64_MAX)]  # an id in the file, only ever a reference
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
Bytes = Annotated[int, Field(ge=0, le=INT64_MAX)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Label = Annotated[str, Field(max_length=MAX_LABEL)]
CacheType = Literal[KV_CACHE_TYPE_NAMES]  # type: ignore[valid-type]


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Open(BaseModel):
    """Known fields typed, unknown ones kept as they are (readers ignore them; a later app may
    add some within the same format version)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class MemberModel(Strict):
    sha256: Sha256
    size: Bytes


class ManifestModel(Strict):
    format: Literal["contextlens-session"]
    format_version: Annotated[int, Field(ge=1, le=INT32_MAX)]
    app_version: str
    created: Moment
    members: dict[str, MemberModel]


class ArchivedSession(Strict):
    """A session's own fields in an archive (not the window's ``SessionModel``)."""

    name: str
    created: Moment


class DocumentModel(Strict):
    path: str
    sha256: Sha256
    size: Bytes
    encoding: Annotated[str, Field(max_length=64)]


def _sampling_field(kind: Any) -> Any:
    """The pydantic type of one SamplingSettings field: llama.cpp takes its integers as int32,
    its floats must be finite."""
    if kind is bool:
        return bool
    if kind is int:
        return Int32
    return Annotated[float, Field(allow_inf_nan=False)]


# Typed Any: spread into create_model beside its own keywords, a narrower type would have to fit
# those keywords' types too.
_sampling_fields: dict[str, Any] = {
    f.name: (_sampling_field(get_type_hints(SamplingSettings)[f.name]) | None, None)
    for f in dataclasses.fields(SamplingSettings)
}
_SamplingFields: Any = create_model("_SamplingFields", __base__=Open, **_sampling_fields)


class SamplingModel(_SamplingFields):  # type: ignore[misc]  # its base is built at run time
    """A version's ``settings["sampling"]`` (app.core.sampling.stored): the fields typed as
    SamplingSettings has them, and values llama.cpp would refuse refused here."""

    @model_validator(mode="after")
    def _usable(self) -> SamplingModel:
        given = {k: v for k, v in self.model_dump(exclude_unset=True).items() if v is not None}
        settings = SamplingSettings.from_dict(given)
        for name, rule in settings.problems():
            raise ValueError(f"{name} {rule}")
        return self


class SettingsModel(Open):
    """A version's settings as the CLI and the window record them (all optional: older records
    lack some); a rollback reads ``max_tokens``, ``engine`` and ``sampling`` back."""

    n_ctx: Annotated[int, Field(ge=1, le=MAX_N_CTX)] | None = None
    max_tokens: Annotated[int, Field(ge=1, le=INT32_MAX)] = 256
    kv_cache_type: CacheType | None = None
    engine: str | None = None
    sampling: SamplingModel | None = None


class VersionModel(Strict):
    id: Id
    parent: Id | None
    number: Annotated[int, Field(ge=1, le=INT32_MAX)]
    task: Label
    prompt: str
    strategy: Label
    model_path: str
    model_sha256: ModelSha
    settings: SettingsModel
    created: Moment


class SentenceModel(Strict):
    """A sentence of an output and the kept sentence that supports it (SentenceSource.as_dict)."""

    start: Count
    end: Count
    source: tuple[Count, Count] | None
    score: Annotated[float, Field(ge=0, le=1)]


class OutputModel(Strict):
    """One output span of a run (JobResult.as_dict): ``snapshots rollback --resume`` and the
    window read its source spans back."""

    step: str
    text: str
    source_spans: list[tuple[Count, Count]]
    finish_reason: Label
    ring_version: Count
    alignment: list[SentenceModel] = []  # absent from files written before outputs had it


ThreadChanges = Annotated[list[dict[str, str | int | float]], Field(max_length=10_000)]


class TimingsModel(Open):
    seconds: Seconds | None = None
    ttft_s: list[Seconds] | None = None
    evaluated_tokens: Count | None = None
    lanes: Count | None = None
    threads: Count | None = None
    # {"step", "from", "to", "cause", "reason", "others", "figure", "at_s"[, "took_s",
    # "expected_s"]}: absent from files written before runs kept them
    thread_changes: ThreadChanges | None = None


MAX_PLAN_TEXT = 100_000  # a plan's question or refusal
MAX_REASON = 2_000  # why a span is kept or dropped: one sentence
MAX_TERMS = 256  # the question's words a span holds


def _whole(value: Any, where: str, low: int = 0, high: int = INT64_MAX) -> None:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{where}: a whole number from {low} to {high:,} was expected")


def _text(value: Any, where: str, limit: int) -> None:
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError(f"{where}: a text of at most {limit:,} characters was expected")


def _check_span(span: Any, where: str) -> None:
    if not isinstance(span, dict):
        raise ValueError(f"{where}: a span was expected")
    for key in ("start", "end"):
        _whole(span.get(key), f"{where}.{key}")
    if span["end"] < span["start"]:
        raise ValueError(f"{where}: a span that ends before it starts")
    _whole(span.get("tokens"), f"{where}.tokens", high=INT32_MAX)
    _text(span.get("reason"), f"{where}.reason", MAX_REASON)
    score = span.get("score")
    if score is not None and (type(score) not in (int, float) or not math.isfinite(score)):
        raise ValueError(f"{where}.score: a finite number was expected")
    for key in ("rank", "next_to"):
        if span.get(key) is not None:
            _whole(span[key], f"{where}.{key}", high=INT32_MAX)
    terms = span.get("terms", [])
    if not isinstance(terms, list) or len(terms) > MAX_TERMS:
        raise ValueError(f"{where}.terms: at most {MAX_TERMS} words were expected")
    for term in terms:
        _text(term, f"{where}.terms", MAX_LABEL * 8)


def _check_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """A recorded plan (``Plan.as_dict``) as ``versions.plan_from_dict`` reads it back: every
    field it reads typed and bounded; ValueError naming the first that is not. ``{}``: none."""
    if not plan:
        return plan
    _text(plan.get("strategy", ""), "strategy", MAX_LABEL)
    for key in ("budget", "total_tokens"):
        _whole(plan.get(key, 0), key, high=INT32_MAX)
    for key in ("kept", "dropped"):
        spans = plan.get(key, [])
        if not isinstance(spans, list):
            raise ValueError(f"{key}: a list of spans was expected")
        for i, span in enumerate(spans):
            _check_span(span, f"{key}.{i}")
    windows = plan.get("windows", [])
    if not isinstance(windows, list):
        raise ValueError("windows: a list was expected")
    for i, window in enumerate(windows):
        if not isinstance(window, dict) or set(window) != {"start", "end", "tokens", "first",
                                                            "last"}:  # fmt: skip
            raise ValueError(f"windows.{i}: start, end, tokens, first and last were expected")
        for key, value in window.items():
            _whole(value, f"windows.{i}.{key}")
    if plan.get("refused") is not None:
        _text(plan["refused"], "refused", MAX_PLAN_TEXT)
    _text(plan.get("question") or "", "question", MAX_PLAN_TEXT)
    integrity = plan.get("boundary_integrity", 1.0)
    if type(integrity) not in (int, float) or not 0 <= integrity <= 1:
        raise ValueError("boundary_integrity: a share from 0 to 1 was expected")
    return plan


class RunModel(Strict):
    id: Id
    version: Id
    strategy: Label
    plan: Annotated[dict[str, Any], AfterValidator(_check_plan)]
    outputs: list[OutputModel]
    prompt_tokens: Count
    completion_tokens: Count
    kv_peak_cells: Count
    timings: TimingsModel
    finish_reason: Label
    truncated: bool
    created: Moment
    error: str | None = None  # absent from files written before runs kept their errors
    refused: str | None = None


class KVStateModel(Strict):
    id: Id
    version: Id
    model_sha256: ModelSha
    n_ctx: Annotated[int, Field(ge=1, le=MAX_N_CTX)]
    cache_type: CacheType
    ring: dict[str, Any]
    prompt_tokens: Count
    state_bytes: Bytes
    created: Moment


class SessionFileModel(Strict):
    session: ArchivedSession
    document: DocumentModel | None
    versions: list[VersionModel]
    runs: list[RunModel]
    kv_states: list[KVStateModel]


def stored(model: BaseModel) -> dict[str, Any]:
    """A typed JSON field as the history keeps it: what the file said, nothing added."""
    return model.model_dump(mode="json", exclude_unset=True)


assert set(get_args(CacheType)) == set(KV_CACHE_TYPE_NAMES)
