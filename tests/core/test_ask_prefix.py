"""A second question on the same document evaluates only itself: the document stays in the KV
cache (prefix reuse), counted in tokens that llama.cpp reports, not in seconds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from app.core.engine.host import EngineHost
from app.core.engine.types import Finished, GenerationStats
from app.core.jobs.tasks import JobFinished, PlanReady, ask
from app.core.paths import sample_document
from app.core.tokens import exact_counter, host_tokenize
from tests.engines import Hosts

N_CTX = 1024


class Recording:
    """The engine host, with the statistics of every generate call kept in order."""

    def __init__(self, host: EngineHost) -> None:
        self.host = host
        self.calls: list[GenerationStats] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.host, name)

    def generate(self, prompt: Sequence[int], **kwargs: Any) -> Iterator[Any]:
        for event in self.host.generate(prompt, **kwargs):
            if isinstance(event, Finished):
                self.calls.append(event.stats)
            yield event


def test_each_later_question_evaluates_only_the_question(make_host: Hosts, model_path: Path):
    host = make_host(n_ctx=N_CTX)
    counter = exact_counter(model_path, host_tokenize(host))
    text = sample_document().read_text(encoding="utf-8")[:8000]
    questions = ["Who edited the Jargon File?", "What is a hacker?", "What does foo mean?"]
    engine = Recording(host)
    events = list(ask(engine, text, counter, questions=questions, strategy="head",  # type: ignore[arg-type]
                      n_ctx=N_CTX, max_tokens=16))  # fmt: skip
    plan = next(e for e in events if isinstance(e, PlanReady))
    result = next(e.result for e in events if isinstance(e, JobFinished))
    assert [o.step for o in result.outputs] == ["answer 1", "answer 2", "answer 3"]
    assert len(engine.calls) == 3 and plan.kept_tokens > 500
    first, *later = engine.calls
    assert first.prompt_tokens > plan.kept_tokens
    for stats in later:
        # the system prompt and the document were found in the cache; only what follows them
        # (the question in its template) was evaluated
        assert stats.prompt_eval_tokens <= stats.prompt_tokens - plan.kept_tokens
        assert 0 < stats.prompt_eval_tokens < 40
    assert result.evaluated_tokens == sum(s.prompt_eval_tokens for s in engine.calls)
