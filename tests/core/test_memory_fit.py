"""Will it fit: the memory estimate against what llama.cpp allocates when it loads the model.

The engine reads back every buffer llama.cpp logs while loading (weights, KV cache, logits,
compute); ``contextlens-cli info MODEL --n-ctx N --json`` must give a total within 10% of
their sum, on both test models. Measured when this was written: within 1.7% at every size from
512 to 32,768 tokens (Gemma 3 is under by the 12.66 MiB of weights llama.cpp re-lays out for
this CPU; SmolLM2 exact to 1.2 MiB).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main as cli
from app.core.engine.gguf import inspect_model
from app.core.engine.host import EngineHost
from app.core.engine.kv_alloc import parse_buffer_log
from app.core.engine.types import LoadSettings
from app.core.memory_fit import Fit, estimate_memory

TOLERANCE = 0.10  # the bound; the estimate is far closer (see the docstring)


def _info_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert cli.main(["info", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("which", ["model_path", "gemma_path"])
def test_the_cli_estimate_at_8192_is_within_ten_percent_of_what_llama_cpp_allocates(
    which: str, idle_host: EngineHost, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    path: Path = request.getfixturevalue(which)
    memory = _info_json(capsys, str(path), "--n-ctx", "8192")["memory"]
    loaded = idle_host.load(path, LoadSettings(n_ctx=8192))
    allocated = loaded.allocated_bytes
    kinds = {b.kind for b in loaded.buffers}
    assert kinds == {"model", "output", "KV", "compute"}, "every kind of buffer was read back"
    assert abs(memory["total_bytes"] - allocated) <= TOLERANCE * allocated, (memory, allocated)
    # the parts: the KV cache exactly, the weights as the file's tensor data
    assert memory["kv_bytes"] == loaded.kv_cache_bytes
    mapped = sum(b.bytes for b in loaded.buffers if b.device.endswith("_Mapped"))
    assert abs(memory["weights_bytes"] - mapped) < 2**20 // 100
    compute = sum(b.bytes for b in loaded.buffers if b.kind == "compute")
    assert abs(memory["compute_bytes"] - compute) <= TOLERANCE * compute
    assert memory["n_ctx"] == 8192 and memory["kv_cache_type"] == "f16"
    assert memory["fits"] is (memory["ram_bytes"] <= memory["ram_free"])
    assert memory["summary"].startswith(("fits: ", "does not fit: "))
    assert "at n_ctx 8,192, f16 KV" in memory["summary"]


@pytest.mark.parametrize(
    ("n_ctx", "flash_attn", "kv_type"),
    [(512, False, "f16"), (32_768, False, "f16"), (32_768, True, "q8_0")],
)
def test_the_compute_buffer_follows_the_larger_peak_on_the_small_vocabulary(
    n_ctx: int, flash_attn: bool, kv_type: str, idle_host: EngineHost, model_path: Path
) -> None:
    """SmolLM2 (49,152 tokens): the logits of a micro-batch decide at a short context, the
    attention scores at a long one without flash attention (646 MiB against 98 with it)."""
    settings = LoadSettings(n_ctx=n_ctx, flash_attn=flash_attn, kv_cache_type=kv_type)
    loaded = idle_host.load(model_path, settings)
    est = estimate_memory(inspect_model(model_path), settings)
    compute = sum(b.bytes for b in loaded.buffers if b.kind == "compute")
    assert abs(est.compute_bytes - compute) <= 0.05 * compute, (est, loaded.buffers)
    assert abs(est.total - loaded.allocated_bytes) <= 0.05 * loaded.allocated_bytes


@pytest.mark.unit
def test_the_buffers_are_read_from_llama_cpp_s_log_lines() -> None:
    lines = [
        "load_tensors:   CPU_Mapped model buffer size =   235.16 MiB",
        "load_tensors:   CPU_REPACK model buffer size =    12.66 MiB",
        "llama_context:        CPU  output buffer size =     1.00 MiB",
        "llama_kv_cache:        CPU KV buffer size =    24.00 MiB",
        "llama_kv_cache:      CUDA0 KV buffer size =   120.00 MiB",
        "sched_reserve:        CPU compute buffer size =   514.50 MiB",
        "llama_kv_cache: size =  120.00 MiB (  8192 cells,  15 layers,  1/1 seqs), K (f16): "
        "60.00 MiB, V (f16):   60.00 MiB",
    ]
    buffers = parse_buffer_log(lines)
    assert [(b.kind, b.device) for b in buffers] == [
        ("model", "CPU_Mapped"), ("model", "CPU_REPACK"), ("output", "CPU"), ("KV", "CPU"),
        ("KV", "CUDA0"), ("compute", "CPU"),
    ]  # fmt: skip
    assert sum(b.bytes for b in buffers) == round((235.16 + 12.66 + 1 + 24 + 120 + 514.5) * 2**20)


@pytest.mark.unit
def test_the_fit_sentence_says_what_and_where(model_path: Path) -> None:
    info = inspect_model(model_path)
    est = estimate_memory(info, LoadSettings(n_ctx=8192, kv_cache_type="q8_0", flash_attn=True))
    assert Fit(est, 8192, "q8_0", ram_free=16 * 2**30).sentence() == (
        "fits: 0.28 GiB of 16.00 GiB free at n_ctx 8,192, q8_0 KV"
    )
    small = Fit(est, 8192, "q8_0", ram_free=100 * 2**20)
    assert not small.fits and small.sentence().startswith("does not fit: 0.28 GiB of 100 MiB")
    on_gpu = estimate_memory(info, LoadSettings(n_ctx=8192, n_gpu_layers=-1))
    fit = Fit(on_gpu, 8192, "f16", ram_free=2**30, vram_free=2**29)
    assert on_gpu.ram == on_gpu.output_bytes and on_gpu.vram == on_gpu.total - on_gpu.ram
    assert fit.fits and "free VRAM" in fit.sentence()
    assert not Fit(on_gpu, 8192, "f16", ram_free=2**30, vram_free=2**20).fits


@pytest.mark.unit
def test_impossible_settings_are_one_sentence(
    model_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["info", str(model_path), "--n-ctx", "8"]) == 2
    assert capsys.readouterr().err.strip() == "error: n_ctx must be at least 16 (got 8)"
