"""The engine's schedule (app/core/engine/schedule.py): which decodes a prompt goes in is a pure
function of its length and the load settings, the last prompt token always alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.engine.schedule import (
    PROMPT_SLICE,
    llama_kwargs,
    prompt_slices,
    slice_tokens,
    slices,
)
from app.core.engine.types import LoadSettings

pytestmark = pytest.mark.unit


@given(n=st.integers(0, 5000), size=st.integers(1, 600))
def test_slices_cover_the_tokens_in_order_with_only_the_last_shorter(n: int, size: int) -> None:
    parts = slices(n, size)
    assert sum(parts) == n
    assert all(p == size for p in parts[:-1]) and all(0 < p <= size for p in parts)


@given(n=st.integers(1, 5000), size=st.integers(1, 600))
def test_a_prompt_ends_with_its_last_token_alone(n: int, size: int) -> None:
    parts = prompt_slices(n, size)
    assert sum(parts) == n and parts[-1] == 1
    assert parts[:-1] == slices(n - 1, size)


def test_the_slices_are_fixed_on_the_cpu_and_the_whole_batch_on_a_gpu() -> None:
    assert prompt_slices(300, slice_tokens(512, 0)) == [PROMPT_SLICE, PROMPT_SLICE, 43, 1]
    assert slice_tokens(64, 0) == 64  # never more than a batch
    assert prompt_slices(300, slice_tokens(512, -1)) == [299, 1]
    assert prompt_slices(1, PROMPT_SLICE) == [1] and prompt_slices(0, PROMPT_SLICE) == []


def test_llama_gets_every_setting_the_engine_chooses() -> None:
    settings = LoadSettings(n_ctx=256, n_threads=3, n_batch=512, n_ubatch=1024,
                            kv_cache_type="q8_0", flash_attn=True, seed=7)  # fmt: skip
    kwargs = llama_kwargs("m.gguf", settings, 0)
    assert kwargs["n_batch"] == kwargs["n_ubatch"] == 256  # within the context
    assert kwargs["n_threads"] == kwargs["n_threads_batch"] == 3
    assert kwargs["type_k"] == kwargs["type_v"] == 8  # GGML_TYPE_Q8_0
    assert kwargs["flash_attn"] and kwargs["swa_full"] and kwargs["seed"] == 7
    assert llama_kwargs("m.gguf", LoadSettings(n_threads=2, n_threads_batch=1),
                        -1)["n_threads_batch"] == 1  # fmt: skip
