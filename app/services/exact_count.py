"""Counting a document's tokens exactly with a model's vocabulary, in an engine child of its
own that loads only the vocabulary (``contextlens-cli count --model`` and ``chunk``).

The faces never construct the engine host themselves (import-linter's "the faces never touch
the store, the engine host or llama.cpp"); jobs run through :class:`JobEngine`, a single
reply through :class:`app.services.one_reply.Replier`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.core.engine.gguf import GGUFError
from app.core.engine.host import EngineHost
from app.core.engine.types import EngineError
from app.core.tokens import TokenCounter, host_counter
from app.services.errors import BadRequest


@contextmanager
def exact_counter(model: Path, *, continuation: bool = True) -> Iterator[TokenCounter]:
    """The exact counter for ``model``, with the engine child it was checked against (which
    holds only the vocabulary: no weights are read to count), closed when the block ends.
    ``continuation``: count texts as the jobs put them into a prompt (tokens.host_counter),
    else each as a whole text. BadRequest (one sentence) when the model cannot count."""
    with EngineHost() as host:
        try:
            host.load_vocab(model)
            counter = host_counter(model, host, continuation=continuation)
        except (GGUFError, EngineError, ValueError) as exc:
            raise BadRequest(f"cannot count with {model.name}: {exc}") from None
        yield counter  # the host stays up: a counter that falls back to llama.cpp needs it
