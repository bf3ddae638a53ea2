"""What the llama.cpp build in this process can do (``contextlens-cli backend``, ``info``'s
memory fit), asked here so that no face imports llama.cpp itself."""

from __future__ import annotations

from app.core.engine.gguf import ModelInfo
from app.core.engine.types import EngineCapabilities, LoadSettings
from app.core.memory_fit import Fit
from app.core.telemetry import memory_fit


def capabilities() -> EngineCapabilities:
    """The build's backends, whether it can offload to a GPU, its version and system line."""
    import llama_cpp  # noqa: PLC0415 (the native library loads only when asked)

    from app.core.engine.llama_engine import build_capabilities  # noqa: PLC0415

    return build_capabilities(llama_cpp)


def fit_of(info: ModelInfo, settings: LoadSettings) -> Fit:
    """Will the model fit at ``settings`` against the memory free now; the build is asked
    whether it can offload only when layers are to go to a GPU."""
    offload = None
    if settings.n_gpu_layers:
        import llama_cpp  # noqa: PLC0415

        offload = bool(llama_cpp.llama_supports_gpu_offload())
    return memory_fit(info, settings, gpu_offload=offload)
