"""One reply to one prompt, outside a job (``contextlens-cli generate``): the engine child with
a model loaded, or a server, the prompt framed by the model's chat template unless asked raw,
the reply streamed as the engine's events.

The faces never construct the engine host themselves (import-linter's "the faces never touch
the store, the engine host or llama.cpp"); jobs run through :class:`JobEngine`, a single
reply through :class:`Replier`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.core.engine.host import EngineHost
from app.core.engine.remote import RemoteEngine
from app.core.engine.types import GenerationEvent, LoadSettings, SamplingSettings


@dataclass(frozen=True)
class ReplyRequest:
    """What to answer: the prompt (framed as one user message, after ``system``, unless
    ``raw``), how long the reply may be, how to sample it and where to stop."""

    prompt: str
    max_tokens: int
    sampling: SamplingSettings
    stop: Sequence[str] = ()
    system: str | None = None
    raw: bool = False


class Replier:
    """An engine that answers single prompts: :meth:`local` (a new engine child, given a model
    by :meth:`load`) or :meth:`on_server`. ``cancel`` may be called from a signal handler."""

    def __init__(self, engine: EngineHost | RemoteEngine, *, warnings: Sequence[str] = (),
                 has_template: bool = False) -> None:  # fmt: skip
        self._engine = engine
        self._host = engine if isinstance(engine, EngineHost) else None
        self.warnings: tuple[str, ...] = tuple(warnings)
        self.has_template = has_template

    @classmethod
    def local(cls) -> Replier:
        """A new llama.cpp child (started on first use); :meth:`load` gives it a model."""
        return cls(EngineHost())

    @classmethod
    def on_server(cls, remote: RemoteEngine) -> Replier:
        """A connected server: its model is loaded already."""
        return cls(remote, warnings=remote.info.warnings,
                   has_template=bool(remote.info.chat_template))  # fmt: skip

    def load(self, model: Path, settings: LoadSettings) -> None:
        """Load ``model`` into the local child; its warnings (a context past the training one,
        no GPU offload) become :attr:`warnings`."""
        assert self._host is not None, "a server's model is loaded already"
        loaded = self._host.load(model, settings)
        info = self._host.model_info
        self.warnings = tuple(loaded.warnings)
        self.has_template = bool(info is not None and info.has_chat_template)

    def reply(self, request: ReplyRequest) -> Iterator[GenerationEvent]:
        """The reply's events (text deltas, thread changes, the finish with its figures)."""
        engine = self._engine
        if request.raw or not self.has_template:
            tokens = engine.tokenize(request.prompt)
        else:
            messages = [{"role": "system", "content": request.system}] if request.system else []
            messages.append({"role": "user", "content": request.prompt})
            tokens = engine.tokenize(engine.apply_chat_template(messages), parse_special=True)
        yield from engine.generate(tokens, max_tokens=request.max_tokens,
                                   sampling=request.sampling, stop=list(request.stop))  # fmt: skip

    def cancel(self) -> None:
        self._engine.cancel()

    def close(self) -> None:
        self._engine.close()
