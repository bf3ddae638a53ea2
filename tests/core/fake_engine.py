"""A scripted engine on the engine API (app/core/engine/api.py) and its tokenizer as a counter:
the unit tier's stand-in for the engine host, for jobs that must see the engine's reports."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from app.core.engine.types import (
    EngineError,
    Finished,
    GenerationStats,
    KVUsage,
    PromptProgress,
    TextDelta,
)

N_CTX = 10_240  # the context the scripted engine reports


class ReportingEngine:
    """Stands in for the engine host: a prompt of ``n`` tokens evaluated in four slices, with
    the reports llama.cpp's figures would give, then a two-token reply."""

    model_info = None

    def tokenize(self, text: str, **_kw: Any) -> list[int]:
        return [7] * max(1, len(text) // 4)

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], **_kw: Any) -> str:
        return "<s>" + "".join(str(m["content"]) for m in messages) + "</s>"

    def kv_usage(self) -> KVUsage:
        # a cache that cannot move positions (it has no removal): rolling re-prompts each window
        return KVUsage(N_CTX, self.held, 0, self.held - 1, self.held * 100, False)

    def generate(self, prompt: Sequence[int], **_kw: Any) -> Iterator[Any]:
        n = len(prompt)
        for done in (0, n // 4, n // 2, 3 * n // 4, n):
            self.held = done
            yield PromptProgress(done, n, done / 1000, self.kv_usage())
        self.held = n + 1
        yield TextDelta("Hi", (1,))
        yield self.kv_usage()
        yield Finished(GenerationStats(n, n, n / 1000, 2, 0.01, "stop", n + 1))

    held = 0

    # the rest of the engine API (app/core/engine/api.py), which these jobs never reach

    def detokenize(self, tokens: Sequence[int], **_kw: Any) -> str:
        return "x" * len(tokens)

    def generate_lanes(self, prefix: Sequence[int], suffixes: Sequence[Sequence[int]],
                       **_kw: Any) -> Iterator[Any]:  # fmt: skip
        raise EngineError("this scripted engine has no lanes")

    def kv_tokens(self) -> list[int]:
        return [7] * self.held

    def remove(self, start: int, end: int, **_kw: Any) -> Any:
        raise EngineError("this scripted engine cannot remove positions")

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


class FakeCounter:
    """The fake engine's tokenizer as a TokenCounter."""

    name, exact, splits_at_spaces = "fake", True, False

    def __init__(self, engine: ReportingEngine) -> None:
        self.engine = engine

    def encode(self, text: str) -> list[int]:
        return self.engine.tokenize(text)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def count_special(self, text: str) -> int:
        return self.count(text)
