"""Will it fit: what loading a model at a context size takes, before anything is allocated.

llama.cpp allocates four kinds of buffer when it loads a model and makes its context (it logs
each; app/core/engine/kv_alloc.py reads them back):

- the weights: the file's tensor data, memory-mapped (plus a re-laid-out copy of some tensors
  on CPUs with wider vector units, a few percent of them, not counted here);
- the KV cache: the model's shape times the context, rounded up to 256 cells
  (``ModelInfo.kv_cache_bytes``, exact);
- the logits of one token (``n_vocab`` floats);
- the compute buffer: the scratch memory of one micro-batch's graph. ggml's allocator reuses
  memory between the graph's steps, so it is the larger of two peaks: the output projection
  (the logits of every token of the micro-batch, ``n_ubatch x n_vocab`` floats) and, without
  flash attention, one layer's attention scores against the whole context (``n_ubatch x n_ctx
  x n_head`` floats and the mask). A model with a large vocabulary (Gemma 3: 262,144 tokens)
  needs 512 MiB of it at any context size; a small one at a long context needs the scores.

``tests/core/test_memory_fit.py`` checks the total against what llama.cpp then allocates, on
both test models, with and without flash attention, from 512 to 32,768 tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.core.engine.gguf import KV_CELL_PAD, ModelInfo
from app.core.engine.types import LoadSettings

FLOAT = 4  # bytes of an f32: logits, scores and activations are computed in f32
HALF = 2  # the attention mask is f16 under flash attention


@dataclass(frozen=True)
class MemoryEstimate:
    """The bytes a load takes, each kind summed over devices; ``offloaded`` is the share of the
    layers on the GPU (0: everything in RAM)."""

    kv_bytes: int
    compute_bytes: int
    weights_bytes: int
    output_bytes: int = 0
    offloaded: float = 0.0

    @property
    def total(self) -> int:
        return self.kv_bytes + self.compute_bytes + self.weights_bytes + self.output_bytes

    @property
    def vram(self) -> int:
        """What goes to the GPU: its share of weights and KV cache, and its compute buffer."""
        if self.offloaded <= 0:
            return 0
        share = math.ceil((self.weights_bytes + self.kv_bytes) * self.offloaded)
        return share + self.compute_bytes

    @property
    def ram(self) -> int:
        """What stays in RAM (all of it without a GPU)."""
        return self.total - self.vram


def _cells(n_ctx: int) -> int:
    return -(-n_ctx // KV_CELL_PAD) * KV_CELL_PAD


def compute_bytes(info: ModelInfo, settings: LoadSettings) -> int:
    """llama.cpp's compute buffer for one micro-batch: the larger of the output projection and
    one layer's attention (see the module docstring)."""
    cells = _cells(settings.n_ctx)
    ubatch = min(settings.n_ubatch, settings.n_batch, cells)
    n_embd = info.n_embd or 4096
    n_vocab = info.vocab_size or 32_000
    n_head = info.n_head or 32
    n_ff = info.n_ff or 4 * n_embd
    output = ubatch * n_vocab * FLOAT + ubatch * n_embd * FLOAT * 2
    layer = ubatch * (2 * n_ff + n_embd) * FLOAT
    if settings.flash_attn:
        attention = ubatch * cells * HALF + layer
    else:
        attention = ubatch * cells * (n_head + 1) * FLOAT + layer
    return max(output, attention)


def estimate_memory(info: ModelInfo, settings: LoadSettings) -> MemoryEstimate:
    """What loading ``info`` with ``settings`` allocates, before anything is (see the module
    docstring). A model whose shape the file does not give is assumed to take a generous
    128 KiB of KV cache per token."""
    kv = info.kv_cache_bytes(settings.n_ctx, settings.kv_cache_type)
    if kv is None:
        kv = 128 * 1024 * _cells(settings.n_ctx)
    n_layers = info.n_layers or 1
    offloaded = 1.0 if settings.n_gpu_layers < 0 else min(1.0, settings.n_gpu_layers / n_layers)
    return MemoryEstimate(
        kv_bytes=kv,
        compute_bytes=compute_bytes(info, settings),
        weights_bytes=info.tensor_bytes or info.file_size,
        output_bytes=(info.vocab_size or 32_000) * FLOAT,
        offloaded=offloaded,
    )


@dataclass(frozen=True)
class Fit:
    """An estimate against the memory that is free: RAM, and VRAM where a GPU takes layers."""

    estimate: MemoryEstimate
    n_ctx: int
    kv_cache_type: str
    ram_free: int
    vram_free: int | None = None  # None: no GPU figures (or nothing offloaded)

    @property
    def fits(self) -> bool:
        ram_ok = self.estimate.ram <= self.ram_free
        vram_ok = self.vram_free is None or self.estimate.vram <= self.vram_free
        return ram_ok and vram_ok

    def sentence(self) -> str:
        """"fits: 0.41 of 15.6 GiB free at n_ctx 8,192, f16 KV" (or "does not fit: …")."""
        verdict = "fits" if self.fits else "does not fit"
        where = f"{gib(self.estimate.ram)} of {gib(self.ram_free)} free"
        if self.vram_free is not None and self.estimate.vram:
            where += f" RAM, {gib(self.estimate.vram)} of {gib(self.vram_free)} free VRAM"
        return f"{verdict}: {where} at n_ctx {self.n_ctx:,}, {self.kv_cache_type} KV"

    def as_dict(self) -> dict[str, object]:
        est = self.estimate
        return {
            "n_ctx": self.n_ctx,
            "kv_cache_type": self.kv_cache_type,
            "weights_bytes": est.weights_bytes,
            "kv_bytes": est.kv_bytes,
            "compute_bytes": est.compute_bytes,
            "output_bytes": est.output_bytes,
            "total_bytes": est.total,
            "ram_bytes": est.ram,
            "vram_bytes": est.vram,
            "ram_free": self.ram_free,
            "vram_free": self.vram_free,
            "fits": self.fits,
            "summary": self.sentence(),
        }


def gib(n: int) -> str:
    """Bytes for a person: "0.41 GiB" from a quarter of a GiB up, else "180 MiB"."""
    return f"{n / 2**30:,.2f} GiB" if n >= 2**28 else f"{n / 2**20:,.0f} MiB"
