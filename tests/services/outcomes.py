"""Finished jobs as the engine hands them over, without an engine: two documents and a job's
outcome per strategy, for the history's use cases (tests/services)."""

from __future__ import annotations

from app.core.documents import document_from_text
from app.core.jobs.tasks import JobResult, OutputSpan
from app.core.planning.plan import Plan, Span
from app.services.jobs import EngineFacts, JobOutcome, JobSpec

FACTS = EngineFacts("/m.gguf", "m" * 64, "local", "f16")
DOC = document_from_text("The harbour at dawn. The boats go out. " * 20, name="harbour.txt")
OTHER = document_from_text("A different text altogether.", name="other.txt")


def outcome(*strategies: str, reply: str = "A reply.", max_tokens: int = 8) -> JobOutcome:
    """A finished job as the engine would hand it over, one result per strategy."""
    plan = Plan(strategies[0], 100, 200, (Span(0, 40, 10, "head"),), (Span(40, 80, 10, "cut"),))
    results = [
        JobResult("summarize", s, "stop", 512, prompt_tokens=50, completion_tokens=3,
                  outputs=[OutputSpan("summary", f"{reply}\nMore.", ((0, 40),), 1, "stop")],
                  plan=plan.as_dict())
        for s in strategies
    ]  # fmt: skip
    spec = JobSpec("summarize", strategies, max_tokens=max_tokens)
    return JobOutcome(spec, results=results, engine=FACTS)

