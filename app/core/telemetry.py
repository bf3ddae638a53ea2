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
from app.core.memory_fit import Fit, MemoryEstimate, estimate_memory, gib

__all__ = ["Fit", "MemoryEstimate", "estimate_memory", "memory_fit", "memory_preflight"]


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


def _as_run(settings: LoadSettings, gpu_offload: bool | None) -> LoadSettings:
    """``settings`` as the engine runs them: a build that cannot offload runs every layer on
    the CPU, whatever the settings ask."""
    if gpu_offload is False and settings.n_gpu_layers != 0:
        return replace(settings, n_gpu_layers=0)
    return settings


def memory_preflight(
    info: ModelInfo,
    settings: LoadSettings,
    *,
    available: int | None = None,
    gpu_offload: bool | None = None,
) -> MemoryEstimate:
    """Refuse, before llama.cpp allocates anything, a context that would not fit in free RAM.

    (With layers offloaded, their share of the weights and KV cache and the compute buffer go
    to the GPU; this check then covers what stays in RAM, and llama.cpp reports a VRAM
    shortfall itself.) ``gpu_offload`` is whether the engine's
    llama.cpp build can offload at all (``EngineCapabilities.gpu_offload_supported``): a build
    that cannot runs every layer on the CPU whatever the settings ask, so its KV cache and
    weights are counted in RAM. None: unknown, the settings are taken at their word.
    """
    settings = _as_run(settings, gpu_offload)
    est = estimate_memory(info, settings)
    free = available if available is not None else int(psutil.virtual_memory().available)
    needed = est.ram
    if needed > free:
        share = 1.0 - est.offloaded
        raise InsufficientMemoryError(
            f"a context of {settings.n_ctx:,} tokens needs about {gib(needed)} "
            f"(KV cache {gib(math.ceil(est.kv_bytes * share))}, compute "
            f"{gib(est.compute_bytes if share >= 1 else 0)}, model "
            f"{gib(math.ceil(est.weights_bytes * share))}); {gib(free)} of memory is free"
        )
    return est


def memory_fit(info: ModelInfo, settings: LoadSettings, *, gpu_offload: bool | None = None) -> Fit:
    """Will ``info`` fit at ``settings``: the estimate against the RAM free now and, where
    layers go to a GPU that NVML reports, the VRAM free on the first one. A build that cannot
    offload runs every layer in RAM (``gpu_offload=False``)."""
    settings = _as_run(settings, gpu_offload)
    est = estimate_memory(info, settings)
    vram_free = None
    if est.offloaded > 0:
        state = gpu_state()
        if state.gpus:
            vram_free = max(0, state.gpus[0].total - state.gpus[0].used)
    return Fit(est, settings.n_ctx, settings.kv_cache_type,
               int(psutil.virtual_memory().available), vram_free)  # fmt: skip
