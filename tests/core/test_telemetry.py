"""Telemetry: real figures from llama.cpp and the OS; the memory preflight refuses with numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.engine.gguf import inspect_model
from app.core.engine.host import EngineHost
from app.core.engine.types import InsufficientMemoryError, LoadSettings
from app.core.telemetry import (
    PromptHistogram,
    estimate_memory,
    gpu_state,
    memory_preflight,
    process_rss,
    snapshot,
)


def test_snapshot_reads_the_engine_and_the_os(engine: object) -> None:
    engine.reset()  # type: ignore[attr-defined]
    engine.evaluate(engine.tokenize("Some tokens to hold.", add_special=False))  # type: ignore[attr-defined]
    snap = snapshot(engine.kv_usage(), engine.pid)  # type: ignore[attr-defined]
    assert snap.kv_cells_used == engine.kv_usage().cells_used > 0  # type: ignore[attr-defined]
    assert snap.kv_bytes > 0 and 0 < snap.kv_fraction < 1
    assert snap.app_rss > 0 and snap.engine_rss > 50 * 2**20  # the child holds the model
    assert snap.gpu.available or snap.gpu.reason  # a state either way, never an exception


@pytest.mark.unit
def test_no_gpu_is_a_state_not_an_error() -> None:
    state = gpu_state()
    if not state.available:
        assert state.reason.startswith("no GPU")
    assert process_rss(2**22 + 12345) == 0  # a process that does not exist


@pytest.mark.unit
def test_kv_estimate_matches_the_model_shape(model_path: Path) -> None:
    info = inspect_model(model_path)
    est = estimate_memory(info, LoadSettings(n_ctx=8192))
    assert est.kv_bytes == 23_040 * 8192  # SmolLM2: 2 x 30 layers x 3 heads x 64 x 2 bytes
    assert est.weights_bytes == info.tensor_bytes and est.compute_bytes > 0
    half = estimate_memory(info, LoadSettings(n_ctx=8192, kv_cache_type="q8_0", flash_attn=True))
    assert half.kv_bytes < est.kv_bytes and half.compute_bytes < est.compute_bytes


@pytest.mark.unit
def test_preflight_refuses_with_the_numbers(model_path: Path) -> None:
    info = inspect_model(model_path)
    memory_preflight(info, LoadSettings(n_ctx=2048), available=2**32)
    with pytest.raises(InsufficientMemoryError) as err:
        memory_preflight(info, LoadSettings(n_ctx=8192), available=100 * 2**20)
    message = str(err.value)
    assert "8,192 tokens" in message and "KV cache 180 MiB" in message and "100 MiB" in message


@pytest.mark.unit
def test_host_refuses_a_context_larger_than_memory(model_path: Path) -> None:
    with EngineHost() as host, pytest.raises(InsufficientMemoryError, match="of memory is free"):
        host.load(model_path, LoadSettings(n_ctx=200_000_000))
    assert host.model is None


@pytest.mark.unit
def test_prompt_histogram() -> None:
    h = PromptHistogram()
    for tokens in (10, 500, 1000, 1023, 2000):
        h.add(tokens, 1024)
    d = h.as_dict()
    assert d["0-10%"] == 1 and d["40-50%"] == 1 and d["90-100%"] == 2 and d["over"] == 1
