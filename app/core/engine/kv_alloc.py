"""What llama.cpp allocated for the KV cache and its other buffers, read back from what it logs
while creating them.

The C API does not expose the cache's buffers, but llama.cpp logs each cache as it allocates it
(src/llama-kv-cache.cpp, llama-cpp-python 0.3.36):

    llama_kv_cache_iswa: creating     SWA KV cache, size = 8192 cells
    llama_kv_cache:        CPU KV buffer size =   120.00 MiB
    llama_kv_cache: size =  120.00 MiB (  8192 cells,  15 layers,  1/1 seqs), K (f16): \
        60.00 MiB, V (f16):   60.00 MiB   (one line)

A model with interleaved sliding-window attention gets two caches (full attention, then the
windowed layers); others one. These figures are the "measured, not estimated" side of the KV
numbers: the engine child collects the lines while it loads (llama_engine.py) and the model's card
(``ModelInfo.kv_bytes_per_token``) is tested against them. Sizes are printed to 0.01 MiB, so a
cache's bytes here are exact to within 5,243 bytes (:data:`MIB_PRECISION`).

The other buffers are logged the same way, one line each: the weights (``load_tensors:
CPU_Mapped model buffer size = 92.10 MiB``, plus ``CPU_REPACK`` where weights are re-laid out for
this CPU), the logits (``CPU  output buffer size``) and the scratch memory of one micro-batch's
graph (``sched_reserve: CPU compute buffer size``). Together they are what loading took, the
figure the memory estimate (app/core/telemetry.py) is tested against.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MIB = 1 << 20
MIB_PRECISION = MIB // 200  # half of the 0.01 MiB llama.cpp prints

_SIZE = re.compile(
    r"llama_kv_cache: size =\s*(?P<mib>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) "
    r"layers,\s*(?P<seqs>\d+)/(?P<seq_max>\d+) seqs\), K \((?P<k_type>\w+)\):\s*(?P<k_mib>[\d.]+) "
    r"MiB, V \((?P<v_type>\w+)\):\s*(?P<v_mib>[\d.]+) MiB"
)
_BUFFER = re.compile(r"llama_kv_cache:\s*(?P<device>\S+) KV buffer size =\s*(?P<mib>[\d.]+) MiB")
_ANY_BUFFER = re.compile(
    r"(?P<device>\S+)\s+(?P<kind>model|output|KV|compute) buffer size =\s*(?P<mib>[\d.]+) MiB"
)
_CREATING = re.compile(r"llama_kv_cache_iswa: creating\s+(?P<kind>non-SWA|SWA) KV cache")


@dataclass(frozen=True)
class KVCacheAlloc:
    """One KV cache llama.cpp allocated: ``kind`` is "full" (every layer, or the full-attention
    layers of an interleaved model) or "swa" (the sliding-window layers)."""

    kind: str
    cells: int
    layers: int
    bytes: int  # K and V together, from the MiB llama.cpp printed (to 0.01 MiB)
    k_type: str
    v_type: str
    devices: tuple[str, ...] = ()  # the backend buffers holding it ("CPU", "CUDA0", ...)


def parse_kv_log(lines: Iterable[str]) -> tuple[KVCacheAlloc, ...]:
    """The caches the lines of one context's creation describe, in llama.cpp's order."""
    caches: list[KVCacheAlloc] = []
    kind = "full"
    devices: list[str] = []
    for line in lines:
        if m := _CREATING.search(line):
            kind = "swa" if m["kind"] == "SWA" else "full"
            devices = []
        elif m := _BUFFER.search(line):
            devices.append(m["device"])
        elif m := _SIZE.search(line):
            size = round(float(m["mib"]) * MIB)
            cells, layers = int(m["cells"]), int(m["layers"])
            caches.append(
                KVCacheAlloc(kind, cells, layers, size, m["k_type"], m["v_type"], tuple(devices))
            )
            devices = []
    return tuple(caches)


@dataclass(frozen=True)
class BufferAlloc:
    """One buffer llama.cpp allocated while loading: ``kind`` is "model" (weights), "output"
    (logits), "KV" or "compute"; ``device`` the backend buffer ("CPU_Mapped", "CUDA0", ...)."""

    kind: str
    device: str
    bytes: int  # from the MiB llama.cpp printed (to 0.01 MiB)


def parse_buffer_log(lines: Iterable[str]) -> tuple[BufferAlloc, ...]:
    """Every buffer the lines of one load name, in llama.cpp's order."""
    return tuple(
        BufferAlloc(m["kind"], m["device"], round(float(m["mib"]) * MIB))
        for line in lines
        if (m := _ANY_BUFFER.search(line))
    )
