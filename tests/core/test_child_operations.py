"""The engine child answers only the operations the engine API declares
(app/core/engine/api.py: CHILD_OPERATIONS): a request for anything else, a fault hook or a
private method among them, is refused in one sentence (a ValueError in the host) and the engine
goes on."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from app.core.engine.api import CHILD_OPERATIONS, STREAMED_OPERATIONS, LocalEngine
from app.core.engine.host import EngineHost
from app.core.engine.llama_engine import LlamaEngine
from app.core.engine.types import LoadSettings


@pytest.mark.unit
def test_every_operation_the_child_answers_is_declared_and_served() -> None:
    declared = {name for name, _ in inspect.getmembers(LocalEngine, inspect.isfunction)}
    assert declared >= CHILD_OPERATIONS and STREAMED_OPERATIONS <= CHILD_OPERATIONS
    assert all(callable(getattr(LlamaEngine, op, None)) for op in CHILD_OPERATIONS)


def test_the_child_refuses_what_the_api_does_not_declare(model_path: Path) -> None:
    with EngineHost() as host:
        host.load(model_path, LoadSettings(n_ctx=512))
        for op in ("crash", "unload", "_require", "__init__"):
            with pytest.raises(ValueError, match=f"unknown engine operation '{op}'"):
                host._call(op, "asking for it")
        assert host.alive and host.tokenize("still here")  # nothing happened to the engine
