"""The factories behind the ``make_host`` and ``make_counter`` fixtures (tests/conftest.py): the
engine children and exact token counters a test module shares, each made once per module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.core.engine.host import EngineHost
from app.core.engine.types import LoadSettings
from app.core.tokens import TokenCounter, exact_counter, host_tokenize


class Hosts:
    """Engine children by model and load settings, each started and loaded on first use."""

    def __init__(self, default_model: Path) -> None:
        self.default_model = default_model
        self._hosts: dict[tuple[Path, LoadSettings], EngineHost] = {}

    def __call__(self, model: Path | None = None, /, **settings: Any) -> EngineHost:
        """``model`` (the default model unless given) loaded with ``LoadSettings(**settings)``:
        the same child for the same arguments."""
        key = (Path(model or self.default_model), LoadSettings(**settings))
        if key not in self._hosts:
            host = EngineHost()
            try:
                host.load(*key)
            except BaseException:
                host.close()
                raise
            self._hosts[key] = host
        return self._hosts[key]

    def close(self) -> None:
        for host in self._hosts.values():
            host.close()
        self._hosts.clear()


class Counters:
    """Exact token counters by model and engine, each built on first use."""

    def __init__(self, default_model: Path) -> None:
        self.default_model = default_model
        self._counters: dict[tuple[Path, int | None], TokenCounter] = {}

    def __call__(
        self, host: EngineHost | None = None, *, model: Path | None = None
    ) -> TokenCounter:
        """The exact counter of ``model`` (the default model unless given), checked against
        ``host``'s llama.cpp tokenizer (an engine with that model loaded); without a host the
        fastest form that can be built, unchecked."""
        path = Path(model or self.default_model)
        key = (path, None if host is None else id(host))
        if key not in self._counters:
            tokenize = None if host is None else host_tokenize(host)
            self._counters[key] = exact_counter(path, tokenize)
        return self._counters[key]
