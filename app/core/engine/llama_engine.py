"""llama.cpp behind a small, explicit API, in the engine child (:class:`LlamaEngine`).

The engine is put together from its parts, each a module: what they share (the model, the
cache's tokens, the log, cancel, decoding: ``llama_base.py``), the vocabulary and chat template
(``vocabulary.py``), the KV state saved and restored (``kv_state_io.py``), removals and
compaction (``compaction.py``), replies (``generation.py``). Here: loading a model, evaluating
tokens, clearing the cache. Each public method is one request of the parent (``child.py``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from jinja2 import TemplateError

from app.core.engine.decoding import DecodeCancelled, ThreadPilot
from app.core.engine.generation import Generation
from app.core.engine.gguf import BASE_MODEL_NOTE, CheckedFile, base_model_reason
from app.core.engine.kv_alloc import parse_buffer_log, parse_kv_log
from app.core.engine.llama_base import plain_reason
from app.core.engine.schedule import llama_kwargs, slice_tokens
from app.core.engine.template_check import template_problem
from app.core.engine.threads import ThreadGovernor
from app.core.engine.types import (
    CancelledError,
    EngineCapabilities,
    EvalResult,
    LoadedModel,
    LoadSettings,
    ModelLoadError,
)
from app.core.engine.vocabulary import Vocabulary
from app.core.textutil import clip_message


def build_capabilities(lc: Any) -> EngineCapabilities:
    """What this llama.cpp build is and can do, read from the loaded ``llama_cpp`` module."""
    return EngineCapabilities(
        llama_cpp_python_version=lc.__version__,
        system_info=lc.llama_print_system_info().decode("utf-8", "replace").strip(),
        gpu_offload_supported=bool(lc.llama_supports_gpu_offload()),
        pid=os.getpid(),
    )


class LlamaEngine(Vocabulary, Generation):
    """llama.cpp behind a small, explicit API; lives only in the child process."""

    # ----- operations (each is one request from the parent) -----

    def capabilities(self) -> EngineCapabilities:
        return build_capabilities(self._lc)

    def load(
        self, path: str, settings: LoadSettings, files: Sequence[CheckedFile] = ()
    ) -> LoadedModel:
        """Load ``path``; with ``files`` (what the parent checked: see model_files.py), llama.cpp
        gets those very files or nothing."""
        settings.validate()
        self.unload()
        self.model_path = path
        try:
            return self._load(path, self._hold(path, files), settings)
        except BaseException:
            self.unload()
            raise

    def _load(self, path: str, opened: str, settings: LoadSettings) -> LoadedModel:
        """Load the model at ``opened`` (``path``, or the link to its checked file)."""
        self.tokenizer_path = opened
        lc = self._lc
        warnings: list[str] = []
        offload = bool(lc.llama_supports_gpu_offload())
        n_gpu_layers = settings.n_gpu_layers
        if n_gpu_layers and not offload:
            warnings.append(
                "this llama.cpp build cannot offload to a GPU; every layer runs on the CPU"
            )
            n_gpu_layers = 0
        n_threads_batch = settings.n_threads_batch or settings.n_threads
        self.log.clear()
        self.kv_log.clear()
        self.first_error = ""
        t0 = time.perf_counter()
        try:
            from llama_cpp import Llama  # noqa: PLC0415 (llama.cpp: engine process only)

            self._loading = True
            self.llm = Llama(**llama_kwargs(opened, settings, n_gpu_layers))
        except CancelledError:  # while the chat templates were checked
            self.llm = None
            raise CancelledError("loading cancelled") from None
        except (ValueError, RuntimeError, OSError, TemplateError) as exc:
            self.llm = None
            said = self.first_error or next(
                (ln for ln in reversed(self.log) if "error" in ln.lower()), ""
            )
            reason = plain_reason(said or str(exc))
            # llama-cpp-python compiles the chat template while loading.
            if isinstance(exc, TemplateError):
                first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
                reason = f"its chat template is not valid Jinja ({plain_reason(first_line, 200)})"
            elif isinstance(exc, RecursionError):
                reason = "its chat template is nested too deeply to compile"
            raise ModelLoadError(f"llama.cpp could not load {os.path.basename(path)}: {reason}") \
                from None  # fmt: skip
        finally:
            self._loading = False
        self._install_log_capture()  # Llama() may have replaced the global log callback
        load_s = time.perf_counter() - t0
        self.settings = settings
        governor = ThreadGovernor(max(settings.n_threads, n_threads_batch), self._meter,
                                  adaptive=settings.adapt_threads)  # fmt: skip
        self._pilot = ThreadPilot(lc, governor, settings.n_threads, n_threads_batch)
        self.slice = slice_tokens(self.llm.n_batch, n_gpu_layers)
        self.tokens = []
        n_ctx_train = self.llm._model.n_ctx_train()
        if settings.n_ctx > n_ctx_train:
            warnings.append(
                f"n_ctx {settings.n_ctx:,} is larger than the {n_ctx_train:,} tokens the model "
                "was trained on; quality may drop past that point"
            )
        try:
            unusable = template_problem(self.llm.metadata, self.apply_chat_template)
        except CancelledError:
            self.unload()
            raise CancelledError("loading cancelled") from None
        if unusable:
            warnings.append(
                f"the model's chat template cannot be used ({unusable}); prompts are sent "
                "without it"
            )
        can_shift = bool(lc.llama_memory_can_shift(self._mem))
        if not can_shift:
            warnings.append(
                "llama.cpp cannot shift this model's KV cache: dropping text from the start of "
                "the context re-evaluates what follows instead"
            )
        base_reason = base_model_reason(self.llm.metadata) or ""
        if base_reason:
            warnings.append(f"{BASE_MODEL_NOTE} ({base_reason})")
        return LoadedModel(
            path=path,
            n_ctx=self.llm.n_ctx(),
            n_ctx_train=n_ctx_train,
            n_vocab=self.llm.n_vocab(),
            n_threads=settings.n_threads,
            n_threads_batch=n_threads_batch,
            n_gpu_layers=n_gpu_layers,
            gpu_offload_supported=offload,
            kv_cache_type=settings.kv_cache_type,
            flash_attn=settings.flash_attn,
            load_seconds=load_s,
            warnings=tuple(clip_message(w) for w in warnings),  # some quote the file's author
            kv_caches=parse_kv_log(self.kv_log),
            buffers=parse_buffer_log(self.kv_log),
            can_shift=can_shift,
            sliding_window=int(lc.llama_model_n_swa(self.llm.model)),
            swa_full=bool(self.llm.context_params.swa_full),
            is_base_model=bool(base_reason),
            base_model_reason=base_reason,
        )

    def evaluate(self, tokens: Sequence[int]) -> EvalResult:
        self._check_ids(tokens)
        t0 = time.perf_counter()
        try:
            self._decode(tokens, abortable=True, prompt=True)
        except DecodeCancelled:
            raise CancelledError("evaluation cancelled") from None
        return EvalResult(len(tokens), len(self.tokens), time.perf_counter() - t0)

    def reset(self) -> None:
        self._require()
        self._lc.llama_memory_clear(self._mem, True)
        self.tokens = []
