"""What the window decides about the open document, its plans and its jobs, without Qt.

The window's workbench model (model.py) holds the state and says what changed;
what it decides from that state lives here as plain functions over plain values,
so the command line could ask the same and a unit test can check it without a window, a model
or a thread: which job the toolbar asks for (or why none can run), the plan a strategy shows
(made in the planning child or in this process), each compared strategy's needle retention, a
finished job's version to go on from, and a version's plan made again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.documents import Document
from app.core.engine.types import SamplingSettings
from app.core.history_records import VersionInfo
from app.core.planning.frame import FrameSource
from app.core.planning.plan import Plan
from app.core.planning.process import PlanProcess, Superseded
from app.core.planning.strategies import QUESTION_STRATEGIES, Planner, needle_spans, plan_for
from app.core.tokens import TokenCounter
from app.services import jobs, versions
from app.services.jobs import JobOutcome, JobSpec
from app.services.question_plans import SideBySide, side_by_side


@dataclass(frozen=True)
class JobChoices:
    """The toolbar's choices as plain values: what the plans shown are framed for, and what
    the next Run asks."""

    task: str = "summarize"  # summarize, ask, extract
    # the question (ask; several: one per line) or the instruction (extract), stripped
    question: str = ""
    strategy: str = "head"
    max_tokens: int = 256
    audit: bool = False
    lanes: int | None = None  # a map phase's replies generated this many at a time
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    needles: tuple[str, ...] = ()  # facts whose share a comparison measures

    @property
    def questions(self) -> tuple[str, ...]:
        """The questions an ask asks, one per line of what was typed (blank lines left out);
        () for a summary or an extract."""
        if self.task != "ask":
            return ()
        return tuple(q.strip() for q in self.question.split("\n") if q.strip())

    @property
    def ranked_by(self) -> str:
        """What `retrieve` ranks the document against in the plan shown: the (first) question
        or the instruction (a summary has neither)."""
        if self.task == "ask":
            return next(iter(self.questions), "")
        return self.question if self.task != "summarize" else ""

    def spec(self, strategies: Sequence[str], *, keep_kv: bool = True) -> JobSpec:
        """The job these choices ask for under ``strategies`` (the window keeps every KV
        state, so each version rolls back instantly): every question asked."""
        text = self.question
        return JobSpec(self.task, tuple(strategies), questions=self.questions,
                       instruction=text if self.task == "extract" else "",
                       max_tokens=self.max_tokens, lanes=self.lanes, sampling=self.sampling,
                       keep_kv=keep_kv, audit=self.audit)  # fmt: skip


@dataclass(frozen=True)
class StartedJob:
    """A job about to run, for the panels to make room for: its context, its strategies, side
    by side or not, and whether a rollback resumes it from a saved KV state (``version``: the
    version being run again, which the toolbar and the buffers show meanwhile; ``layout``: the
    restored prompt's segments, for the KV map, () when the state was kept without them)."""

    n_ctx: int
    strategies: tuple[str, ...]
    comparing: bool = False
    resumed: bool = False
    version: VersionInfo | None = field(default=None, compare=False)
    layout: versions.SegmentLayout = ()


@dataclass(frozen=True)
class JobPlace:
    """The document a job runs on and where its versions go: the session current when it
    started, under the version current then (the next Run branches from what was current)."""

    doc: Document
    target: versions.Target
    # the plan figures of each question of an ask of several (its versions record them)
    figures: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class Refusal(enum.Enum):
    """Why the toolbar's job cannot run yet; the window says it in the person's language."""

    NO_DOCUMENT = "open a document first"
    NO_MODEL = "load a model first"
    NO_QUESTION = "type the question (or the extract instruction) first"


def job_for(choices: JobChoices, strategies: Sequence[str], *, document: bool,
            model: bool) -> JobSpec | Refusal:  # fmt: skip
    """The job ``choices`` ask for under ``strategies``, or why it cannot run: no document
    open, no model (or server) to run it on, or an ask or extract with nothing typed."""
    if not document:
        return Refusal.NO_DOCUMENT
    if not model:
        return Refusal.NO_MODEL
    if choices.task != "summarize" and not choices.question.strip():
        return Refusal.NO_QUESTION
    return choices.spec(strategies)


# ----- plans, in the planning child or here -----

PlanWhere = PlanProcess | Planner  # the child (with the counter's key), or a planner here


def plan_shown(where: PlanWhere, doc: Document, key: str | None, strategy: str, *,
               model: FrameSource, n_ctx: int, reserve: int, instruction: str,
               question: str = "", ticket: int | None = None) -> Plan | None:  # fmt: skip
    """``plan_for`` in the planning child (None when a newer request superseded it) or by a
    planner of this process; ``question``: what `retrieve` ranks the document against."""
    if isinstance(where, Planner):
        return plan_for(where, strategy, model, instruction=instruction, n_ctx=n_ctx,
                        reserve=reserve, question=question)  # fmt: skip
    assert key is not None
    try:
        return where.plan(doc, key, strategy, model=model, n_ctx=n_ctx, reserve=reserve,
                          instruction=instruction, question=question, ticket=ticket)  # fmt: skip
    except Superseded:
        return None


def count_document(plans: PlanProcess, doc: Document, key: str | None,
                   counter: Callable[[], TokenCounter]) -> int | None:  # fmt: skip
    """The document's tokens: in the child when ``key`` names the counter there (None when
    the child is closed), else here with ``counter()``."""
    if key is None:
        return counter().count(doc.text)
    try:
        return plans.count(doc, key)
    except Superseded:
        return None


def job_plans(where: PlanWhere, doc: Document, key: str | None, spec: JobSpec,
              counter: TokenCounter, *, model: FrameSource,
              n_ctx: int) -> list[Plan] | None:  # fmt: skip
    """The plans the job ``spec`` runs (jobs.job_plans), made before it starts where the window
    plans (:func:`plan_shown`); None: superseded."""

    def plan_one(strategy: str, instruction: str, reserve: int, question: str) -> Plan | None:
        return plan_shown(where, doc, key, strategy, model=model, n_ctx=n_ctx, reserve=reserve,
                          instruction=instruction, question=question)  # fmt: skip

    return jobs.job_plans(spec, counter, plan_one)


def question_figures(plans: Sequence[Plan]) -> dict[str, dict[str, Any]]:
    """Each question's plan as a run records it (its figures, not its spans), by question."""
    return {p.question: {k: v for k, v in p.as_dict().items() if k not in ("kept", "dropped")}
            for p in plans if p.question}  # fmt: skip


def several_questions(spec: JobSpec, plans: Sequence[Plan]) -> SideBySide | None:
    """The plans of a job that asks several questions under `retrieve` side by side (None: it
    asks one, or its strategy plans once whatever is asked); ``plans``: as :func:`job_plans`
    makes them."""
    if not asks_several(spec) or len(plans) != len(spec.questions):
        return None
    return side_by_side(plans)


def asks_several(spec: JobSpec) -> bool:
    """Whether ``spec`` asks several questions under `retrieve` alone: a plan per question."""
    strategy = spec.strategies[0] if len(spec.strategies) == 1 else ""
    return spec.task == "ask" and len(spec.questions) > 1 and strategy in QUESTION_STRATEGIES


def needle_retention(where: PlanWhere, doc: Document, key: str | None, *, choices: JobChoices,
                     strategies: Sequence[str], counter: TokenCounter, model: FrameSource,
                     n_ctx: int) -> list[tuple[str, float]] | None:  # fmt: skip
    """Each strategy's share of ``choices.needles`` kept by the plan the window shows for it
    ([] when none of the needles occurs in the document; None: superseded)."""
    spans = needle_spans(doc.text, list(choices.needles))
    if not spans:
        return []
    spec = choices.spec(strategies)
    found = []
    for strategy in strategies:
        instruction, reserve = spec.framing(strategy, counter)
        plan = plan_shown(where, doc, key, strategy, model=model, n_ctx=n_ctx, reserve=reserve,
                          instruction=instruction, question=choices.ranked_by)  # fmt: skip
        if plan is None:
            return None
        found.append((strategy, plan.needle_retention(spans)))
    return found


def replan_version(where: PlanWhere, doc: Document, key: str | None,
                   opened: versions.OpenedVersion, counter: TokenCounter, *,
                   model: FrameSource) -> Plan | None:  # fmt: skip
    """The plan a version's job made, made again with the model loaded now (its tokenizer and
    chat frame): None when the version records no context size or the plan made differs
    from the figures it recorded."""
    v = opened.version
    n_ctx = v.settings.get("n_ctx")
    if not isinstance(n_ctx, int):
        return None
    spec = JobSpec(v.task, (v.strategy,),
                   questions=tuple(v.prompt.split("\n")) if v.task == "ask" else (),
                   instruction=v.prompt if v.task == "extract" else "",
                   max_tokens=int(v.settings.get("max_tokens", 256)))  # fmt: skip
    instruction, reserve = spec.framing(v.strategy, counter)
    question = next(iter(spec.ranked_by(v.strategy)), "")
    plan = plan_shown(where, doc, key, v.strategy, model=model, n_ctx=n_ctx, reserve=reserve,
                      instruction=instruction, question=question)  # fmt: skip
    return plan if plan is not None and opened.is_its_plan(plan) else None


# ----- the line of work -----


def version_to_go_on_from(done: versions.Recorded, outcome: JobOutcome, chosen: str) -> int:
    """The version a recorded job leaves current: of a comparison, the strategy ``chosen`` in
    the toolbar, else the first; of several questions, the last question's (the end of the
    line their versions make)."""
    strategies = [r.strategy for r in outcome.results]
    index = strategies.index(chosen) if chosen in strategies else 0
    ends = done.ends or done.versions
    return ends[min(index, len(ends) - 1)]
