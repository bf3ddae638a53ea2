"""The engine's API, declared once: what jobs, the audit, calibration and the services call.

Two engines implement it: :class:`~app.core.engine.host.EngineHost` (llama.cpp in a child
process) and :class:`~app.core.engine.remote.RemoteEngine` (an OpenAI-compatible server, which
raises ``UnsupportedRemotelyError`` for what only a local cache can do: states, removals, the
audit's read of the cache). Tests pass scripted engines of their own. ``tests/core/
test_engine_api.py`` checks that both engines have every method here with the same parameters.

- :class:`Engine`: tokens, the chat template, generation (one reply, or several in lanes), the
  cache's figures and contents, removing positions (the ring's shifts), cancel and close.
- :class:`ResumableEngine`: and the KV state saved and put back (a rollback resumes from it).
- :class:`LocalEngine`: and what only the engine host does: start its child, load a model or a
  vocabulary, evaluate tokens, clear the cache (calibration and counting drive it so).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from app.core.engine.types import (
    EngineCapabilities,
    EvalResult,
    Finished,
    GenerationEvent,
    KVEdit,
    KVState,
    KVUsage,
    LaneEvent,
    LoadedModel,
    LoadSettings,
    OnFull,
    SamplingSettings,
)


@runtime_checkable
class Engine(Protocol):
    """What a job needs from an engine (the engine host, a server, or a test's own)."""

    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = ...,
        parse_special: bool = ...,
        continuation: bool = ...,
    ) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int], *, special: bool = ...) -> str: ...

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = ...
    ) -> str: ...

    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int = ...,
        sampling: SamplingSettings | None = ...,
        stop: Sequence[str] = ...,
        on_full: OnFull = ...,
        keep: int = ...,
    ) -> Iterator[GenerationEvent]: ...

    def generate_lanes(
        self,
        prefix: Sequence[int],
        suffixes: Sequence[Sequence[int]],
        *,
        lanes: int,
        max_tokens: int = ...,
        sampling: SamplingSettings | None = ...,
        stop: Sequence[str] = ...,
    ) -> Iterator[LaneEvent]: ...

    def kv_usage(self) -> KVUsage: ...

    def kv_tokens(self) -> list[int]: ...

    def remove(self, start: int, end: int, *, compact: bool = ...) -> KVEdit: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class ResumableEngine(Engine, Protocol):
    """An engine whose KV state can be kept after a job and put back to resume it."""

    def save_state(self) -> KVState: ...

    def restore_state(self, state: KVState) -> int: ...


@runtime_checkable
class LocalEngine(ResumableEngine, Protocol):
    """The engine host's own operations, beyond what a server can do."""

    capabilities: EngineCapabilities | None

    def start(self) -> EngineCapabilities: ...

    def load(
        self, path: str | os.PathLike[str], settings: LoadSettings | None = ...
    ) -> LoadedModel: ...

    def load_vocab(self, path: str | os.PathLike[str]) -> int: ...

    def tokenize_many(
        self, texts: Sequence[str], *, parse_special: bool = ..., continuation: bool = ...
    ) -> list[list[int]]: ...

    def evaluate(self, tokens: Sequence[int]) -> EvalResult: ...

    def reset(self) -> None: ...

    def generate_text(self, prompt: Sequence[int], **kwargs: Any) -> tuple[str, Finished]: ...

    def token_attrs(self) -> list[int]: ...


# What the engine child answers over its pipe (app/core/engine/child.py), and nothing else: the
# operations above that run inside llama.cpp's process. ``start``, ``cancel`` and ``close`` are
# the host's own (it starts the child, sets the shared cancel flag, asks it to close);
# ``generate_text`` is ``generate`` gathered by the host.
CHILD_OPERATIONS: frozenset[str] = frozenset({
    "load", "load_vocab", "tokenize", "tokenize_many", "token_attrs", "detokenize",
    "apply_chat_template", "evaluate", "generate", "generate_lanes", "kv_usage", "kv_tokens",
    "remove", "reset", "save_state", "restore_state",
})  # fmt: skip
# streamed: the child sends each event as it comes, then the last one
STREAMED_OPERATIONS: frozenset[str] = frozenset({"generate", "generate_lanes"})
