"""A job as a person asks for it, checked once, and run as a stream of events.

The window and the command line both turn their input into a :class:`JobSpec` (the window from
its toolbar, the CLI from its flags), so a run means the same thing from either face: the same
checks, the same job options, the same results and KV states kept, the same record in the
history (app/services/versions.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.core.engine.lanes import MAX_LANES
from app.core.engine.types import KVState, SamplingSettings
from app.core.jobs.audit import Audit
from app.core.jobs.tasks import (
    DEFAULT_LANES,
    TASKS,
    CancelToken,
    JobFinished,
    JobResult,
    planning,  # the faces' too (the window plans ahead): imported from here, not the job runner
)
from app.core.planning.frame import Budget, FrameSource, document_budget
from app.core.planning.plan import Plan
from app.core.planning.retrieve import NEEDS_QUESTION
from app.core.planning.strategies import (
    QUESTION_STRATEGIES,
    STRATEGIES,
    Planner,
    PlanOptions,
    plan_within,
)
from app.core.tokens import TokenCounter
from app.services.errors import BadOption, BadRequest


@dataclass(frozen=True)
class JobSpec:
    """One task under one or more strategies, with everything that decides its reply."""

    task: str  # one of TASKS: summarize, ask, extract
    strategies: tuple[str, ...]
    questions: tuple[str, ...] = ()  # for ask
    instruction: str = ""  # for extract
    max_tokens: int = 256
    lanes: int | None = DEFAULT_LANES  # a map phase's replies this many at a time (None: one)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    keep_kv: bool = False  # save the KV state after each strategy, for an instant rollback
    audit: bool = False  # check against llama.cpp that the model saw exactly the plan shown

    @property
    def prompt(self) -> str:
        """What the person typed: the questions (one per line) or the instruction."""
        return "\n".join(self.questions) or self.instruction

    def check(self) -> None:
        """BadRequest, before anything loads, for a job that cannot run as asked."""
        if self.task not in TASKS:
            raise BadRequest(f"unknown task {self.task!r} (choose one of {', '.join(TASKS)})")
        if not self.strategies:
            raise BadRequest("choose at least one strategy")
        for name in self.strategies:
            if name not in STRATEGIES:
                raise BadRequest(f"unknown strategy {name!r} (choose from {', '.join(STRATEGIES)})")
        if self.max_tokens < 1:
            raise BadOption("max_tokens", "must be at least 1")
        if self.lanes is not None and not 0 <= self.lanes <= MAX_LANES:
            raise BadOption("lanes", f"must be between 0 (one call at a time) and {MAX_LANES}")
        if self.task == "ask" and not (self.questions and all(q.strip() for q in self.questions)):
            raise BadRequest("ask needs at least one question")
        if self.task == "extract" and not self.instruction.strip():
            raise BadRequest("extract needs an instruction")
        if self.task == "summarize" and QUESTION_STRATEGIES & set(self.strategies):
            raise BadRequest(NEEDS_QUESTION)  # a summary has no question to rank against

    def ranked_by(self, strategy: str) -> tuple[str, ...]:
        """What ``strategy``'s plans rank the document against, one plan each, as the job plans
        them: each question under `retrieve` (the instruction for extract), else one plan."""
        if strategy not in QUESTION_STRATEGIES:
            return ("",)
        if self.task == "extract":
            return (self.instruction,)
        return self.questions or ("",)

    def framing(self, strategy: str, counter: TokenCounter) -> tuple[str, int]:
        """(instruction, reply reserve) that ``strategy``'s document is planned next to in
        the job's first call: what every face plans with (:func:`plan_job`, the window)."""
        return planning(self.task, strategy, counter, max_tokens=self.max_tokens,
                        questions=self.questions, instruction=self.instruction)  # fmt: skip

    def options(self, n_ctx: int, cancel: CancelToken) -> dict[str, Any]:
        """The keyword arguments of the core job (app.core.jobs.tasks) for this spec."""
        options: dict[str, Any] = {"n_ctx": n_ctx, "max_tokens": self.max_tokens,
                                   "cancel": cancel, "lanes": self.lanes or None,
                                   "sampling": self.sampling}  # fmt: skip
        if self.task == "ask":
            options["questions"] = list(self.questions)
        if self.task == "extract":
            options["instruction"] = self.instruction
        return options


@dataclass(frozen=True)
class JobPlan:
    """One plan a job makes, with the budget it was made in."""

    strategy: str
    question: str  # what it ranks the document against ("" for most strategies)
    budget: Budget
    plan: Plan


# make one plan: (strategy, the job's instruction, its reply reserve, the question ranked by)
# -> the plan, or None when a newer request superseded it
PlanOne = Callable[[str, str, int, str], Plan | None]


def job_plans(spec: JobSpec, counter: TokenCounter, plan_one: PlanOne) -> list[Plan] | None:
    """The plans the job ``spec`` runs: one per strategy, and under `retrieve` one per
    question asked (in the order asked), each made by ``plan_one`` with the job's own
    instruction and reply reserve. The one way both faces plan a job: `contextlens-cli plan`
    in this process (:func:`plan_job`), the window in its planning child
    (app/services/workbench/decisions.py). None when one was superseded."""
    made = []
    for strategy in spec.strategies:
        instruction, reserve = spec.framing(strategy, counter)
        for question in spec.ranked_by(strategy):
            plan = plan_one(strategy, instruction, reserve, question)
            if plan is None:
                return None
            made.append(plan)
    return made


def plan_job(
    spec: JobSpec,
    planner: Planner,
    model: FrameSource,
    n_ctx: int,
    *,
    reserve: int | None = None,
    overlap: float = PlanOptions.overlap,
) -> list[JobPlan]:
    """The plans the job ``spec`` makes on ``n_ctx`` tokens, before anything loads
    (:func:`job_plans` in this process), each with its budget: the same instruction, frame
    (``model``'s chat template) and reply reserve as the job, so `plan` shows the budget `run`
    executes. ``reserve`` overrides the reply's room and ``overlap`` semantic's (`plan
    --reserve`, `--overlap`). A strategy with no room for the document gets a refused plan."""
    made: list[JobPlan] = []

    def plan_one(strategy: str, instruction: str, needed: int, question: str) -> Plan:
        budget = document_budget(model, n_ctx=n_ctx, counter=planner.counter, task=instruction,
                                 reserve=needed if reserve is None else reserve)  # fmt: skip
        plan = plan_within(planner, strategy, budget, question=question, overlap=overlap)
        made.append(JobPlan(strategy, question, budget, plan))
        return plan

    job_plans(spec, planner.counter, plan_one)
    return made


@dataclass(frozen=True)
class EngineFacts:
    """What the history records about the engine a run used."""

    model_label: str  # the GGUF's path, or "URL model" for a server (never with a key)
    model_sha256: str  # the GGUF's; a server's model: the local GGUF's when given, else ""
    engine: str  # "local", or the server's address
    kv_cache_type: str | None  # the local cache's type (None on a server: it does not say)


@dataclass(frozen=True)
class ResumeSpec:
    """A rollback that resumes: the saved state, how much of it is the prompt, what it was."""

    state: KVState
    prompt_tokens: int
    task: str
    strategy: str
    max_tokens: int = 256
    sources: tuple[tuple[int, int], ...] = ()
    sampling: SamplingSettings = field(default_factory=SamplingSettings)  # the version's
    saved_version: int = 0  # the version whose run saved the state
    # the prompt's segments as the job laid them, (kind, first position, tokens, span) each
    layout: tuple[tuple[str, int, int, tuple[int, int] | None], ...] = ()


@dataclass
class JobOutcome:
    """A job's end: a result per strategy, the KV state after each (when kept), its audit."""

    spec: JobSpec
    results: list[JobResult] = field(default_factory=list)
    states: dict[int, KVState] = field(default_factory=dict)  # results' index -> its state
    audit: Audit | None = None
    lost_state: str = ""  # why a KV state could not be kept (the engine died saving it)
    engine: EngineFacts | None = None  # the engine it ran on, as the history records it


class JobRun:
    """A job being run: iterate over it for its events, in order; :attr:`outcome` fills in as
    each strategy finishes (its result, and its KV state when the spec keeps them)."""

    def __init__(self, events: Iterator[Any], outcome: JobOutcome,
                 keep_state: Callable[[JobResult], KVState | None]) -> None:  # fmt: skip
        self._events, self.outcome, self._keep_state = events, outcome, keep_state

    def __iter__(self) -> Iterator[Any]:
        outcome = self.outcome
        for ev in self._events:
            if isinstance(ev, JobFinished):
                outcome.results.append(ev.result)
                if outcome.spec.keep_kv:
                    state = self._keep_state(ev.result)
                    if state is not None:
                        outcome.states[len(outcome.results) - 1] = state
            yield ev

    def drain(self) -> JobOutcome:
        """Run to the end without looking at the events."""
        for _ev in self:
            pass
        return self.outcome
