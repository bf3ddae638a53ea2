"""Live figures for the gauges, and the memory preflight that refuses a context before it is made.

KV figures come from llama.cpp, memory from the OS (psutil, for the app and the engine child) and
from the GPU driver (NVML through nvidia-ml-py, when it is installed and a GPU is present). Only
the memory preflight estimates, and says so: it must answer before the context exists.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

import psutil

from app.core.engine.gguf import ModelInfo
from app.core.engine.types import InsufficientMemoryError, KVUsage, LoadSettings


@dataclass(frozen=True)
class GPUMemory:
    index: int
    name: str
    used: int
    total: int


@dataclass(frozen=True)
class GPUState:
    """What NVML reports; ``reason`` says why there is nothing (not an error: a state)."""

    gpus: tuple[GPUMemory, ...] = ()
    reason: str = ""

    @property
    def available(self) -> bool:
        return bool(self.gpus)


# Why there are no VRAM figures (the window lists these to translate them).
NO_NVML = "no GPU figures: nvidia-ml-py is not installed"
NO_DRIVER = "no GPU: the NVIDIA driver is not available"
NO_GPU = "no GPU found"


def gpu_state() -> GPUState:
    """VRAM used and total per NVIDIA GPU, or why there are no figures."""
    try:
        import pynvml  # noqa: PLC0415 (nvidia-ml-py, the optional `gpu` extra)
    except ImportError:
        return GPUState(reason=NO_NVML)
    try:
        pynvml.nvmlInit()
    except Exception:  # NVML raises its own error types when there is no driver or GPU
        return GPUState(reason=NO_DRIVER)
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            gpus.append(GPUMemory(i, name, int(mem.used), int(mem.total)))
        return GPUState(tuple(gpus), "" if gpus else NO_GPU)
    finally:
        pynvml.nvmlShutdown()


def process_rss(pid: int | None = None) -> int:
    """Resident memory of a process (this one by default), 0 if it is gone."""
    try:
        return int(psutil.Process(pid or os.getpid()).memory_info().rss)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


@dataclass(frozen=True)
class Snapshot:
    """One reading of every gauge."""

    kv_cells_used: int
    n_ctx: int
    kv_bytes: int  # llama.cpp's state size of the sequence
    app_rss: int
    engine_rss: int
    gpu: GPUState

    @property
    def kv_fraction(self) -> float:
        return self.kv_cells_used / self.n_ctx if self.n_ctx else 0.0


def snapshot(kv: KVUsage, engine_pid: int | None, gpu: GPUState | None = None) -> Snapshot:
    return Snapshot(
        kv_cells_used=kv.cells_used,
        n_ctx=kv.n_ctx,
        kv_bytes=kv.state_bytes,
        app_rss=process_rss(),
        engine_rss=process_rss(engine_pid) if engine_pid else 0,
        gpu=gpu if gpu is not None else gpu_state(),
    )


@dataclass
class PromptHistogram:
    """How full the context was across runs: prompt tokens / n_ctx in tenths, plus refusals."""

    bins: list[int] = field(default_factory=lambda: [0] * 10)
    over: int = 0  # prompts that did not fit (refused)

    def add(self, prompt_tokens: int, n_ctx: int) -> None:
        if n_ctx <= 0 or prompt_tokens > n_ctx:
            self.over += 1
            return
        self.bins[min(9, prompt_tokens * 10 // n_ctx)] += 1

    def as_dict(self) -> dict[str, Any]:
        labels = [f"{i * 10}-{i * 10 + 10}%" for i in range(10)]
        return {**dict(zip(labels, self.bins, strict=True)), "over": self.over}


# ----- memory preflight ----------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryEstimate:
    kv_bytes: int
    compute_bytes: int
    weights_bytes: int  # what the model's weights add to RAM (0 when fully offloaded)

    @property
    def total(self) -> int:
        return self.kv_bytes + self.compute_bytes + self.weights_bytes


def estimate_memory(info: ModelInfo, settings: LoadSettings) -> MemoryEstimate:
    """KV from the model's shape: what llama.cpp allocates for the cache type, context rounded
    and sliding-window layers counted as it does (``ModelInfo.kv_cache_bytes``, tested against
    llama.cpp's own figure); compute buffers approximated.

    The compute estimate covers the logits of one micro-batch, its activations, and, without
    flash attention, the attention scores of one micro-batch against the whole context.
    """
    kv = info.kv_cache_bytes(settings.n_ctx, settings.kv_cache_type)
    if kv is None:  # unknown shape: assume a generous 128 KiB per token
        kv = 128 * 1024 * settings.n_ctx
    n_embd = info.n_embd or 4096
    n_vocab = info.vocab_size or 32_000
    n_head = info.n_head or 32
    ubatch = min(settings.n_ubatch, settings.n_ctx)
    compute = ubatch * n_vocab * 4 + ubatch * n_embd * 4 * 8
    if not settings.flash_attn:
        compute += ubatch * settings.n_ctx * n_head * 4
    n_layers = info.n_layers or 1
    offloaded = 1.0 if settings.n_gpu_layers < 0 else min(1.0, settings.n_gpu_layers / n_layers)
    weights = math.ceil(info.file_size * (1.0 - offloaded))
    return MemoryEstimate(kv, compute, weights)


def memory_preflight(
    info: ModelInfo,
    settings: LoadSettings,
    *,
    available: int | None = None,
    gpu_offload: bool | None = None,
) -> MemoryEstimate:
    """Refuse, before llama.cpp allocates anything, a context that would not fit in free RAM.

    (With layers offloaded, the KV cache goes to the GPU; this check then covers what stays in
    RAM, and llama.cpp reports a VRAM shortfall itself.) ``gpu_offload`` is whether the engine's
    llama.cpp build can offload at all (``EngineCapabilities.gpu_offload_supported``): a build
    that cannot runs every layer on the CPU whatever the settings ask, so its KV cache and
    weights are counted in RAM. None: unknown, the settings are taken at their word.
    """
    if gpu_offload is False and settings.n_gpu_layers != 0:
        settings = replace(settings, n_gpu_layers=0)
    est = estimate_memory(info, settings)
    free = available if available is not None else int(psutil.virtual_memory().available)
    on_gpu = settings.n_gpu_layers != 0
    needed = est.weights_bytes + est.compute_bytes + (0 if on_gpu else est.kv_bytes)
    if needed > free:
        raise InsufficientMemoryError(
            f"a context of {settings.n_ctx:,} tokens needs about {_gib(needed)} "
            f"(KV cache {_gib(est.kv_bytes)}, compute {_gib(est.compute_bytes)}, model "
            f"{_gib(est.weights_bytes)}); {_gib(free)} of memory is free"
        )
    return est


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**28 else f"{n / 2**20:,.0f} MiB"
