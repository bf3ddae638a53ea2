"""Attention kinds and base models on the model card, and KV bytes that match what llama.cpp
allocates.

The card reads sliding-window attention the way llama.cpp does (the window key, the per-layer
pattern key, each architecture's default pattern), and tells a base model apart. Its KV bytes per
token are then checked against llama.cpp itself: the real engine loads the real models and the
figures it logs while allocating the cache are read back (app/core/engine/kv_alloc.py), never
assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from app.cli import main as cli
from app.core.engine.gguf import (
    BASE_MODEL_NOTE,
    GGUFError,
    ModelInfo,
    base_model_reason,
    inspect_model,
)
from app.core.engine.host import EngineHost
from app.core.engine.kv_alloc import MIB_PRECISION, parse_kv_log
from app.core.engine.lanes import _kv_bytes_per_cell
from app.core.engine.types import LoadSettings
from app.core.telemetry import estimate_memory
from tests.core import gguf_cases as gc

TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def card(
    tmp_path: Path,
    arch: str,
    n_layers: int,
    *extra: bytes,
    template: str | None = TEMPLATE,
    name: str = "Test",
) -> ModelInfo:
    """The card of a header-only GGUF of ``arch``: 2 KV heads of 64 per layer, plus ``extra``."""
    kvs = [
        gc.kv("general.architecture", gc.STRING, arch),
        gc.kv("general.name", gc.STRING, name),
        gc.kv(f"{arch}.block_count", gc.UINT32, n_layers),
        gc.kv(f"{arch}.context_length", gc.UINT32, 8192),
        gc.kv(f"{arch}.embedding_length", gc.UINT32, 256),
        gc.kv(f"{arch}.attention.head_count", gc.UINT32, 4),
        gc.kv(f"{arch}.attention.head_count_kv", gc.UINT32, 2),
        gc.kv(f"{arch}.attention.key_length", gc.UINT32, 64),
        gc.kv(f"{arch}.attention.value_length", gc.UINT32, 64),
        *extra,
    ]
    if template is not None:
        kvs.append(gc.kv("tokenizer.chat_template", gc.STRING, template))
    path = tmp_path / f"{arch}.gguf"
    path.write_bytes(gc.build_gguf(kvs))
    return inspect_model(path)


def window(arch: str, tokens: int) -> bytes:
    return gc.kv(f"{arch}.attention.sliding_window", gc.UINT32, tokens)


def pattern(arch: str, value: int | Sequence[bool]) -> bytes:
    key = f"{arch}.attention.sliding_window_pattern"
    if isinstance(value, int):
        return gc.kv(key, gc.UINT32, value)
    return gc.kv(key, gc.ARRAY, list(value), gc.BOOL)


# ----- reading the attention kind ------------------------------------------------------------


@pytest.mark.unit
def test_gemma3_windows_five_of_every_six_layers(tmp_path: Path) -> None:
    info = card(tmp_path, "gemma3", 18, window("gemma3", 512))
    assert info.sliding_window == 512 and info.swa_type == "standard"
    assert info.swa_layers == (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16)
    assert info.describe_attention() == (
        "sliding window of 512 tokens on 15 of 18 layers (5 of every 6); full attention on 3"
    )
    # without the key, Gemma 3 runs with full attention in llama.cpp
    assert card(tmp_path, "gemma3", 18).describe_attention() == "full attention on all 18 layers"


@pytest.mark.unit
def test_gemma2_alternates_and_has_a_default_window(tmp_path: Path) -> None:
    info = card(tmp_path, "gemma2", 6)  # no window key: llama.cpp assumes Gemma 2's 4096
    assert (info.sliding_window, info.swa_layers) == (4096, (0, 2, 4))
    assert info.describe_attention().endswith(
        "on 3 of 6 layers (1 of every 2); full attention on 3"
    )
    assert card(tmp_path, "gemma2", 6, window("gemma2", 1024)).sliding_window == 1024


@pytest.mark.unit
def test_a_per_layer_pattern_key_wins_over_the_default(tmp_path: Path) -> None:
    mask = [True, False, False, True, True, False]
    info = card(tmp_path, "gemma3", 6, window("gemma3", 256), pattern("gemma3", mask))
    assert info.swa_layers == (0, 3, 4)
    assert info.describe_attention() == (
        "sliding window of 256 tokens on 3 of 6 layers; full attention on 3"
    )
    period = card(tmp_path, "gemma3", 8, window("gemma3", 256), pattern("gemma3", 4))
    assert period.swa_layers == (0, 1, 2, 4, 5, 6)
    dense_first = card(tmp_path, "cohere2moe", 8, window("cohere2moe", 4096))
    assert dense_first.swa_layers == (1, 2, 3, 5, 6, 7)  # the first of every 4 is dense
    with pytest.raises(GGUFError, match="lists 5 values for 6 layers"):
        card(tmp_path, "gemma3", 6, window("gemma3", 256), pattern("gemma3", mask[:5]))


@pytest.mark.unit
def test_mistral_style_windows_every_layer_and_a_window_llama_cpp_ignores_is_said(
    tmp_path: Path,
) -> None:
    every = card(tmp_path, "dflash", 4, window("dflash", 4096))
    assert every.swa_layers == (0, 1, 2, 3)
    assert every.describe_attention() == "sliding window of 4,096 tokens on all 4 layers"
    # Mistral 7B v0.1 as a llama model, and Phi-3: the GGUF names a window llama.cpp does not use
    for arch in ("llama", "phi3"):
        info = card(tmp_path, arch, 4, window(arch, 4096))
        assert info.sliding_window is None and info.swa_layers == ()
        assert info.describe_attention() == (
            f"full attention on all 4 layers (the file gives a window of 4,096 tokens, which "
            f"llama.cpp does not apply to {arch})"
        )


@pytest.mark.unit
def test_kv_bytes_count_every_layer_with_the_full_size_cache_and_the_window_without(
    tmp_path: Path,
) -> None:
    info = card(tmp_path, "gemma3", 12, window("gemma3", 512))
    per_layer = 2 * (64 + 64) * 2  # 2 KV heads, K and V of 64, f16
    assert info.kv_bytes_per_token("f16") == 12 * per_layer
    assert info.kv_cache_bytes(8192) == 12 * per_layer * 8192
    assert info.kv_cache_bytes(1000) == 12 * per_layer * 1024  # llama.cpp pads to 256 cells
    small = info.kv_cache_bytes(8192, swa_full=False, n_ubatch=512)  # 512 + 512 cells windowed
    assert small == 2 * per_layer * 8192 + 10 * per_layer * 1024


# ----- base models -----------------------------------------------------------------------------


@pytest.mark.unit
def test_a_model_without_a_chat_template_is_a_base_model(tmp_path: Path) -> None:
    info = card(tmp_path, "gemma3", 6, template=None)
    assert info.is_base_model and info.base_model_reason == "it has no chat template"
    assert info.as_dict()["is_base_model"] is True
    assert not card(tmp_path, "llama", 6).is_base_model


@pytest.mark.unit
@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ({"general.finetune": "Base"},
         "its GGUF names it a base model (general.finetune is 'Base')"),
        ({"general.name": "Qwen3 8B Base"},
         "its GGUF names it a base model (general.name is 'Qwen3 8B Base')"),
        ({"general.name": "Qwen3 8B Base Instruct"}, None),  # instruction-tuned from a base
        ({"general.name": "Database Coder 7B"}, None),  # "base" inside a word
        ({"general.base_model.0.name": "Llama 3 8B"}, None),  # derived from a base: a fine-tune
        ({"general.finetune": "it"}, None),
    ],
)  # fmt: skip
def test_a_gguf_that_names_itself_a_base_model_is_one(
    metadata: dict[str, str], reason: str | None
) -> None:
    # llama-cpp-python's Llama.metadata holds strings, as here; the reader's dict works the same
    assert base_model_reason({"tokenizer.chat_template": TEMPLATE, **metadata}) == reason


# ----- against llama.cpp: the real models, loaded by the real engine --------------------------


def test_gemma3_kv_bytes_per_token_times_cells_is_what_llama_cpp_allocated(
    idle_host: EngineHost, gemma_path: Path
) -> None:
    info = inspect_model(gemma_path)
    settings = LoadSettings(n_ctx=8192)
    loaded = idle_host.load(gemma_path, settings)
    caches = loaded.kv_caches  # as llama.cpp logged them while allocating
    assert [(c.kind, c.cells, c.layers, c.k_type) for c in caches] == [
        ("full", 8192, 3, "f16"),
        ("swa", 8192, 15, "f16"),  # the full-size cache for the windowed layers
    ]
    assert loaded.kv_cells == 8192 and loaded.swa_full
    per_token = info.kv_bytes_per_token("f16")
    assert per_token == 18_432
    assert abs(per_token * loaded.kv_cells - loaded.kv_cache_bytes) <= MIB_PRECISION * len(caches)
    assert loaded.kv_cache_bytes == 144 * 2**20
    # each cache alone: its layers of the card, times its cells
    layer_bytes = info.kv_heads_per_layer[0] * (info.head_dim_k + info.head_dim_v) * 2
    for cache in caches:
        assert abs(cache.layers * layer_bytes * cache.cells - cache.bytes) <= MIB_PRECISION
    assert caches[1].layers == info.n_swa_layers == 15
    # the memory preflight and the lanes count the same bytes
    assert estimate_memory(info, settings).kv_bytes == loaded.kv_cache_bytes
    assert _kv_bytes_per_cell(str(gemma_path), "f16") == per_token
    # what else the engine read back at load
    assert loaded.sliding_window == info.sliding_window == 512
    assert loaded.can_shift and loaded.kv_devices == ("CPU",)
    assert loaded.is_base_model and loaded.base_model_reason == "it has no chat template"
    assert f"{BASE_MODEL_NOTE} (it has no chat template)" in loaded.warnings


def test_full_attention_and_a_padded_context_match_llama_cpp_too(
    idle_host: EngineHost, model_path: Path
) -> None:
    info = inspect_model(model_path)
    settings = LoadSettings(n_ctx=1000)  # llama.cpp makes 1,024 cells
    loaded = idle_host.load(model_path, settings)
    assert [(c.kind, c.cells, c.layers) for c in loaded.kv_caches] == [("full", 1024, 30)]
    expected = estimate_memory(info, settings).kv_bytes
    assert expected == info.kv_bytes_per_token() * 1024
    assert abs(expected - loaded.kv_cache_bytes) <= MIB_PRECISION
    assert not loaded.is_base_model and loaded.sliding_window == 0
    assert not any(BASE_MODEL_NOTE in w for w in loaded.warnings)


@pytest.mark.unit
def test_the_smaller_window_cache_as_llama_cpp_logs_it(gemma_path: Path) -> None:
    """Gemma 3 at n_ctx 8192 with ``swa_full=False``, as llama.cpp 0.3.36 logged it (the engine
    never turns it off; the card's figure for it is checked against llama.cpp's)."""
    lines = [
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 8192 cells",
        "llama_kv_cache:        CPU KV buffer size =    24.00 MiB",
        "llama_kv_cache: size =   24.00 MiB (  8192 cells,   3 layers,  1/1 seqs), "
        "K (f16):   12.00 MiB, V (f16):   12.00 MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells",
        "llama_kv_cache:      CUDA0 KV buffer size =    15.00 MiB",
        "llama_kv_cache: size =   15.00 MiB (  1024 cells,  15 layers,  1/1 seqs), "
        "K (f16):    7.50 MiB, V (f16):    7.50 MiB",
    ]
    caches = parse_kv_log(lines)
    assert [(c.kind, c.cells, c.layers, c.devices) for c in caches] == [
        ("full", 8192, 3, ("CPU",)),
        ("swa", 1024, 15, ("CUDA0",)),
    ]
    assert sum(c.bytes for c in caches) == 39 * 2**20
    assert inspect_model(gemma_path).kv_cache_bytes(8192, swa_full=False) == 39 * 2**20


@pytest.mark.unit
def test_the_cli_card_names_the_window_and_the_base_model(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["info", str(gemma_path)]) == 0
    out = capsys.readouterr().out
    assert f"model: {BASE_MODEL_NOTE} (it has no chat template)" in out
    assert (
        "attention: sliding window of 512 tokens on 15 of 18 layers (5 of every 6); "
        "full attention on 3"
    ) in out
    assert "KV bytes/token: 18,432 (f16)" in out
