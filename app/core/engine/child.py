"""The engine host's child side: the one process that touches llama.cpp.

Everything native happens here, so that an abort, a segfault or an illegal instruction inside
llama.cpp ends this process and never the app. The parent (``host.py``) sends one request at a
time over a pipe; this loop answers with ``("ok", result)``, a stream of ``("event", ...)`` or
``("err", kind, payload)``. It is the single serial owner of the llama context.

Cancel arrives through a shared flag, not the pipe, so it is seen while a request runs: between
generated tokens, and inside a long prompt decode through llama.cpp's abort callback.

What a single reply shares with the batched replies of the lanes (``lanes.py``) is in modules of
its own that both import: decoding and cancel (``decoding.py``), the sampler chain
(``sampler.py``), tokens to streamed text with stop strings and loops (``reply_text.py``). The
lanes get the loaded model from here as :class:`LlamaHandles`, never this class.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import dataclasses
import json
import mmap
import os
import re
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from gguf.constants import GGMLQuantizationType
from jinja2 import TemplateError

from app.core.engine.chat_template import (
    ChatTemplateError,
    check_chat_template,
    render_chat_template,
)
from app.core.engine.decoding import (
    MIN_SLICE,
    REPORT_S,
    DecodeCancelled,
    LlamaHandles,
    ReportGate,
    SlicePacer,
    ThreadPilot,
    abort_armed,
    check_token_ids,
    decode_batch,
)
from app.core.engine.gguf import BASE_MODEL_NOTE, adds_space_prefix, base_model_reason, read_gguf
from app.core.engine.ipc import SharedFlag
from app.core.engine.kv_alloc import parse_kv_log
from app.core.engine.lanes import generate_lanes
from app.core.engine.reply_text import STREAM_INTERVAL_S, ReplyText, token_bytes
from app.core.engine.sampler import build_sampler
from app.core.engine.threads import Change, CpuMeter, ThreadGovernor
from app.core.engine.types import (
    CancelledError,
    ContextOverflowError,
    EngineCapabilities,
    EngineNotLoadedError,
    EvalResult,
    Finished,
    GenerationStats,
    KVEdit,
    KVState,
    KVUsage,
    LoadedModel,
    LoadSettings,
    ModelLoadError,
    OnFull,
    PromptProgress,
    SamplingSettings,
    Shifted,
    TextDelta,
    ThreadsChanged,
)
from app.core.textutil import utf8

SLOW_TOKEN_S = 0.05  # a token decode longer than this arms llama.cpp's abort callback
_LOG_LINES = 40


# The KV state is saved for sequence -1 (every sequence: this context has one) and restored into
# sequence 0. Saved for sequence 0, llama.cpp leaves out the cells of the sliding-window layers
# outside the window of the sequence's last position (Gemma 3: all but the last 512), so the
# restored cache could not serve a shorter prefix: a rollback's resumed reply differed from the
# job's, and the cache's first position read 888 instead of 0.
_STATE_SEQ = -1

# A removal of at least this many cells moves the rest to the front of the cache (remove's
# compact). llama.cpp's attention spans the cells in blocks of 256; a smaller hole saves
# little, and the state's copy costs a few milliseconds per thousand cells of a small model.
COMPACT_MIN = 256


class _SandboxedTemplateCheck:
    """Stands in for llama-cpp-python's ``Jinja2ChatFormatter`` in this process.

    ``Llama()`` compiles every chat template a file carries with its own Jinja environment,
    folding constant expressions outside any cap: ``{{ 2 ** 100000 }}`` failed the load and
    ``'x' * 300000000`` cost seconds and gigabytes. The app renders templates itself
    (``render_chat_template``), so at load they are only compiled, in the capped sandbox of the
    chat-template renderer process, under its deadline and ``stopped`` (a cancel ends the load);
    a template that does not compile still fails the load as Jinja's TemplateError.
    """

    stopped: Callable[[], bool] | None = None  # the engine's cancel check, set by Engine

    def __init__(self, template: str, **_ignored: Any) -> None:
        check_chat_template(template, cancelled=_SandboxedTemplateCheck.stopped)

    def to_chat_handler(self) -> None:
        return None  # llama-cpp-python's chat completion is never used here


# ----- fault injection, for tests only -----------------------------------------------------------

FAULT_ENV = "CONTEXTLENS_ENGINE_FAULT"
FAULT_PHASES = ("load", "prompt", "generate", "save")
FAULT_SIGNALS = ("SIGKILL", "SIGSEGV", "SIGABRT")


class Fault:
    """A test's one-shot crash of this child: the real ``signal`` at step ``after`` (0: the first)
    of ``phase``, counted over the child's life.

    Steps: ``load`` — a line llama.cpp logs while it loads the model (about 2,000 a load);
    ``prompt`` — a batch of prompt tokens about to be decoded (``after`` batches are in the KV
    cache); ``generate`` — a token about to be sampled (``after`` tokens were generated, and the
    text so far was sent to the parent); ``save`` — a ``save_state`` call, once llama.cpp has
    written the state.

    Armed only when ``$CONTEXTLENS_ENGINE_FAULT`` names a JSON file
    ``{"phase": ..., "signal": ..., "after": N}``; the child deletes that file as it reads it, so
    the engine started after the crash is healthy. Unarmed, the engine holds None and each check
    is one comparison.
    """

    def __init__(self, phase: str, signal_name: str, after: int) -> None:
        if phase not in FAULT_PHASES or signal_name not in FAULT_SIGNALS or after < 0:
            raise ValueError(f"bad fault: {phase!r}, {signal_name!r}, {after!r}")
        self.phase, self.signal, self.after = phase, signal.Signals[signal_name], after
        self.steps = 0

    @classmethod
    def from_env(cls) -> Fault | None:
        path = os.environ.get(FAULT_ENV)
        if not path:
            return None
        try:
            with open(path, encoding="utf-8") as fh:
                spec = json.load(fh)
            os.unlink(path)
        except FileNotFoundError:  # spent by an earlier child
            return None
        return cls(spec["phase"], spec["signal"], int(spec.get("after", 0)))

    def due(self, phase: str) -> bool:
        """Count one step of ``phase``; True when the crash is due now."""
        if phase != self.phase:
            return False
        self.steps += 1
        return self.steps == self.after + 1

    def fire(self) -> NoReturn:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a planned crash leaves no core
        sys.stderr.flush()
        signal.raise_signal(self.signal)  # the exit status is the signal, as for a real crash
        os._exit(70)  # not reached


def build_capabilities(lc: Any) -> EngineCapabilities:
    """What this llama.cpp build is and can do, read from the loaded ``llama_cpp`` module."""
    return EngineCapabilities(
        llama_cpp_python_version=lc.__version__,
        system_info=lc.llama_print_system_info().decode("utf-8", "replace").strip(),
        gpu_offload_supported=bool(lc.llama_supports_gpu_offload()),
        pid=os.getpid(),
    )


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Engine:
    """llama.cpp behind a small, explicit API; lives only in the child process."""

    def __init__(self, cancel_flag: SharedFlag) -> None:
        import llama_cpp  # noqa: PLC0415 (llama.cpp only in the engine process, not importers)
        import llama_cpp.llama_chat_format as chat_format  # noqa: PLC0415

        chat_format.Jinja2ChatFormatter = _SandboxedTemplateCheck  # type: ignore[misc,assignment]
        _SandboxedTemplateCheck.stopped = self._stopped
        self._lc = llama_cpp
        self._cancel = cancel_flag
        self.llm: Any = None
        self.vocab_model: Any = None  # a vocabulary-only model (load_vocab), for counting
        self.tokenizer_path = ""  # the GGUF the tokenizer comes from (model or vocabulary)
        self.continuation_model: Any = None  # the vocabulary without its space prefix, or None
        self.space_prefix: bool | None = None  # whether the vocabulary adds one (None: unread)
        self.settings: LoadSettings | None = None
        self.tokens: list[int] = []  # what occupies KV positions 0..len-1 of sequence 0
        self.log: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
        self.first_error = ""  # llama.cpp's first error since the last load began: the cause
        self.kv_log: list[str] = []  # llama.cpp's lines about the KV cache of the last load
        self._fault = Fault.from_env()  # None unless a test armed one
        self._loading = False
        self._install_log_capture()
        self._parent = os.getppid()
        # llama.cpp calls this after each node of the graph it computes: cancel is seen inside a
        # long decode, and the nodes counted tell how far a prompt slice is (_decode)
        self._abort_cb = llama_cpp.ggml_abort_callback(self._on_node)
        self._nodes = 0  # nodes computed in the current decode (while the callback is armed)
        self._node_hook: Callable[[], None] | None = None
        self._nodes_per_graph = 0  # learned from a decode of one micro-batch; 0: not yet
        self._meter = CpuMeter().start()  # other programs' CPU use, for the thread count
        self._pilot: ThreadPilot | None = None  # set by load

    def _on_node(self, _data: Any) -> bool:
        self._nodes += 1
        if self._node_hook is not None:
            self._node_hook()
        return self._stopped()

    def _stopped(self) -> bool:
        """Cancelled, or orphaned: a parent killed outright (``timeout``, a crash) cannot cancel,
        and its engine must not go on computing for nobody."""
        return self._cancel.is_set() or os.getppid() != self._parent

    # ----- llama.cpp plumbing -----

    def _install_log_capture(self) -> None:
        """Keep llama.cpp's warnings and errors so failures can quote them."""

        @self._lc.llama_log_callback
        def on_log(level: int, text: bytes, _user: Any) -> None:
            if self._fault is not None and self._loading and self._fault.due("load"):
                self._fault.fire()
            if self._loading and text.startswith(b"llama_kv_cache"):  # what it allocates
                self.kv_log.append(text.decode("utf-8", "replace").rstrip())
            if level in (3, 4) or (level == 5 and self.log):  # ggml: warn, error, continuation
                line = text.decode("utf-8", "replace").rstrip()
                if line:
                    self.log.append(line)
                if level == 4 and line and not self.first_error:
                    self.first_error = line

        self._log_cb = on_log  # keep a reference: llama.cpp holds only the raw pointer
        self._lc.llama_log_set(on_log, ctypes.c_void_p(0))

    def _require(self) -> Any:
        if self.llm is None:
            raise EngineNotLoadedError("no model is loaded")
        return self.llm

    @property
    def _mem(self) -> Any:
        return self._lc.llama_get_memory(self._require().ctx)

    def _vocab(self) -> Any:
        return self._require()._model.vocab

    def _decode(
        self,
        tokens: Sequence[int],
        *,
        abortable: bool,
        prompt: bool = False,
        progress: Callable[[int, bool], None] | None = None,
    ) -> None:
        """Append ``tokens`` to the KV cache in slices (SlicePacer); logits for the last token only.
        ``prompt``: these are a prompt's tokens (not a generated one, not a re-evaluation).
        ``progress``: told how many of ``tokens`` are in the cache after each slice (False), and
        a few times a second during one (True: counted from the graph nodes llama.cpp has
        computed, see :meth:`_inside`). The thread count is set before each slice (ThreadPilot).
        """
        llm = self._require()
        lc = self._lc
        pilot = self._require_pilot()
        n_ctx = llm.n_ctx()
        if len(self.tokens) + len(tokens) > n_ctx:
            raise ContextOverflowError(len(self.tokens) + len(tokens), n_ctx, 0)
        n_ubatch = max(1, int(llm.context_params.n_ubatch))
        pacer = SlicePacer(llm.n_batch)
        i = 0
        with abort_armed(lc, llm.ctx, self._abort_cb, abortable):
            while i < len(tokens):
                if prompt and self._fault is not None and self._fault.due("prompt"):
                    self._fault.fire()
                # until a decode has shown how many nodes a graph has, a first small slice
                # learns it, so the progress of every later one can be told from inside it
                size = pacer.size
                if progress is not None and not self._nodes_per_graph and abortable:
                    size = min(MIN_SLICE, n_ubatch)
                piece = list(tokens[i : i + size])
                n_past = len(self.tokens)
                llm._batch.set_batch(batch=piece, n_past=n_past, logits_all=False)
                started = pilot.before(llm.ctx)
                self._nodes = 0
                if progress is not None and abortable and self._nodes_per_graph:
                    self._node_hook = self._inside(i, len(piece), n_ubatch, progress)
                try:
                    decode_batch(lc, llm.ctx, llm._batch.batch, armed=abortable,
                                 stopped=self._stopped, log=self.log)  # fmt: skip
                except (DecodeCancelled, RuntimeError):
                    # Drop whatever the failed batch left behind so tokens and KV agree.
                    lc.llama_memory_seq_rm(self._mem, -1, n_past, -1)
                    raise
                finally:
                    self._node_hook = None
                if abortable and len(piece) <= n_ubatch and self._nodes:
                    self._nodes_per_graph = self._nodes
                pilot.after(llm.ctx, len(piece), started)
                pacer.done(len(piece), time.perf_counter() - started)
                self.tokens.extend(piece)
                i += len(piece)
                if progress is not None:
                    progress(i, False)

    def _inside(
        self, done: int, size: int, n_ubatch: int, progress: Callable[[int, bool], None]
    ) -> Callable[[], None]:
        """The node hook of a slice of ``size`` tokens after ``done``: every REPORT_S, how many
        of its tokens the nodes computed so far stand for (never all: the slice's end is
        reported once llama.cpp returns). Runs on llama.cpp's first worker, which is this
        thread, between two nodes, with the GIL: it does arithmetic and, a few times a second,
        sends one event."""
        expected = self._nodes_per_graph * -(-size // n_ubatch)
        last = time.perf_counter()

        def hook() -> None:
            nonlocal last
            if self._nodes & 15:  # the clock is read every 16 nodes
                return
            now = time.perf_counter()
            if now - last >= REPORT_S:
                last = now
                progress(done + min(size - 1, size * self._nodes // expected), True)

        return hook

    def _handles(self) -> LlamaHandles:
        """The loaded model's handles and this engine's cancel check, for code that decodes
        outside this class (the lanes)."""
        llm = self._require()
        assert self.settings is not None  # set with llm
        return LlamaHandles(
            lc=self._lc,
            model=llm._model,
            context_params=llm.context_params,
            model_path=llm.model_path,
            n_ctx=llm.n_ctx(),
            n_batch=llm.n_batch,
            settings=self.settings,
            log=self.log,
            stopped=self._stopped,
            abort_callback=self._abort_cb,
            pilot=self._require_pilot(),
        )

    def _require_pilot(self) -> ThreadPilot:
        assert self._pilot is not None  # set with llm
        return self._pilot

    @contextlib.contextmanager
    def _reporting(self, emit: Callable[[Any], None]) -> Iterator[None]:
        """During a streamed request, each change of the thread count is an event of it."""
        pilot = self._require_pilot()
        t0 = time.perf_counter()

        def changed(ch: Change) -> None:
            emit(ThreadsChanged(ch.before, ch.after, ch.cause, ch.reason, ch.others,
                                time.perf_counter() - t0))  # fmt: skip

        pilot.on_change = changed
        try:
            yield
        finally:
            pilot.on_change = None

    # ----- operations (each is one request from the parent) -----

    def capabilities(self) -> EngineCapabilities:
        return build_capabilities(self._lc)

    def load(self, path: str, settings: LoadSettings) -> LoadedModel:
        settings.validate()
        self.unload()
        self.tokenizer_path = path
        lc = self._lc
        warnings: list[str] = []
        offload = bool(lc.llama_supports_gpu_offload())
        n_gpu_layers = settings.n_gpu_layers
        if n_gpu_layers and not offload:
            warnings.append(
                "this llama.cpp build cannot offload to a GPU; every layer runs on the CPU"
            )
            n_gpu_layers = 0
        cache_type = int(GGMLQuantizationType[settings.kv_cache_type.upper()])
        n_threads_batch = settings.n_threads_batch or settings.n_threads
        self.log.clear()
        self.kv_log.clear()
        self.first_error = ""
        t0 = time.perf_counter()
        try:
            from llama_cpp import Llama  # noqa: PLC0415 (llama.cpp: engine process only)

            self._loading = True
            self.llm = Llama(
                model_path=path,
                n_ctx=settings.n_ctx,
                n_batch=min(settings.n_batch, settings.n_ctx),
                n_ubatch=min(settings.n_ubatch, settings.n_batch, settings.n_ctx),
                n_threads=settings.n_threads,
                n_threads_batch=n_threads_batch,
                n_gpu_layers=n_gpu_layers,
                type_k=cache_type,
                type_v=cache_type,
                flash_attn=settings.flash_attn,
                seed=settings.seed,
                # llama.cpp's default, said here because the app relies on it: sliding-window
                # layers keep every position, so prefix reuse, rollback and the ring's shifts
                # work on them as on any layer (and ModelInfo.kv_bytes_per_token counts them).
                swa_full=True,
                verbose=False,
            )
        except CancelledError:  # while the chat templates were checked
            self.llm = None
            raise CancelledError("loading cancelled") from None
        except (ValueError, RuntimeError, OSError, TemplateError) as exc:
            self.llm = None
            said = self.first_error or next(
                (ln for ln in reversed(self.log) if "error" in ln.lower()), ""
            )
            reason = _plain(said or str(exc))
            # llama-cpp-python compiles the chat template while loading.
            if isinstance(exc, TemplateError):
                first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
                reason = f"its chat template is not valid Jinja ({_plain(first_line, 200)})"
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
        self.tokens = []
        n_ctx_train = self.llm._model.n_ctx_train()
        if settings.n_ctx > n_ctx_train:
            warnings.append(
                f"n_ctx {settings.n_ctx:,} is larger than the {n_ctx_train:,} tokens the model "
                "was trained on; quality may drop past that point"
            )
        try:
            unusable = self._template_problem()
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
            warnings=tuple(warnings),
            kv_caches=parse_kv_log(self.kv_log),
            can_shift=can_shift,
            sliding_window=int(lc.llama_model_n_swa(self.llm.model)),
            swa_full=bool(self.llm.context_params.swa_full),
            is_base_model=bool(base_reason),
            base_model_reason=base_reason,
        )

    def _template_problem(self) -> str:
        """Why the model's chat template cannot frame a document, or "" when it can (or when
        there is none: a plain prompt is then the expected thing). Jobs fall back to a plain
        prompt on the same failure; this says so once, at load."""
        from app.core.planning.frame import (  # noqa: PLC0415 (tiktoken: not at engine start)
            document_messages,
            split_at_document,
        )

        if not self.llm.metadata.get("tokenizer.chat_template"):
            return ""
        try:
            split_at_document(self.apply_chat_template(document_messages("Summarize.")))
        except ValueError as exc:  # ChatTemplateError is one
            return str(exc)
        return ""

    def unload(self) -> None:
        if self.llm is not None:
            self.llm.close()
            self.llm = None
        if self.vocab_model is not None:
            self.vocab_model.close()
            self.vocab_model = None
        if self.continuation_model is not None:
            self.continuation_model.close()
            self.continuation_model = None
        self.tokenizer_path, self.space_prefix = "", None
        self.tokens = []
        self.settings = None
        self._pilot = None

    def load_vocab(self, path: str) -> int:
        """Load only the vocabulary (llama.cpp's ``vocab_only``): counting needs no weights, and
        a vocabulary-only GGUF has none. Replaces a loaded model; returns the vocabulary size."""
        self.unload()
        self.vocab_model = self._vocab_only(path)
        self.tokenizer_path = path
        return int(self.vocab_model.n_vocab())

    def _vocab_only(self, path: str, overrides: dict[str, bool] | None = None) -> Any:
        """A vocabulary-only llama.cpp model of ``path``, with metadata ``overrides``."""
        from llama_cpp import _internals  # noqa: PLC0415 (llama.cpp: engine process only)

        lc = self._lc
        params = lc.llama_model_default_params()
        params.vocab_only = True
        keep: Any = None
        if overrides:
            keep = (lc.llama_model_kv_override * (len(overrides) + 1))()  # ends with a blank
            for i, (key, value) in enumerate(overrides.items()):
                keep[i].key = key.encode()
                keep[i].tag = lc.LLAMA_KV_OVERRIDE_TYPE_BOOL
                keep[i].value.val_bool = value
            params.kv_overrides = keep
        self.log.clear()
        self.first_error = ""
        try:
            return _internals.LlamaModel(path_model=path, params=params, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            reason = _plain(self.first_error or str(exc))
            raise ModelLoadError(
                f"llama.cpp could not read the vocabulary of {os.path.basename(path)}: {reason}"
            ) from None

    def _tokenizer(self) -> Any:
        """The llama.cpp model whose vocabulary tokenizes: the loaded one, or a vocabulary."""
        if self.llm is None and self.vocab_model is not None:
            return self.vocab_model
        return self._require()._model

    def _continuation(self) -> Any:
        """The tokenizer for text that continues a prompt: the vocabulary again with llama.cpp's
        space prefix switched off where the file asks for one. SentencePiece models such as
        Llama 2, Mistral and Phi-3 put '▁' before every text tokenized from its start, so a
        chunk tokenized on its own would reach the model as ' chunk' where the document says
        'chunk' (Gemma and every BPE model add none, and need no second vocabulary)."""
        model = self._tokenizer()
        if self.space_prefix is None:  # read once per file: a header holds the whole vocabulary
            path = self.tokenizer_path
            self.space_prefix = bool(path) and adds_space_prefix(read_gguf(path))
        if not self.space_prefix:
            return model
        if self.continuation_model is None:
            self.continuation_model = self._vocab_only(
                self.tokenizer_path, {"tokenizer.ggml.add_space_prefix": False}
            )
        return self.continuation_model

    def tokenize(
        self,
        text: str,
        add_special: bool = True,
        parse_special: bool = False,
        continuation: bool = False,
    ) -> list[int]:
        model = self._continuation() if continuation else self._tokenizer()
        return model.tokenize(utf8(text), add_special, parse_special)

    def tokenize_many(
        self, texts: list[str], parse_special: bool = False, continuation: bool = False
    ) -> list[list[int]]:
        """Several texts at once, on as many threads as there are cores: llama.cpp's tokenizer
        reads the vocabulary only, and ctypes lets go of the GIL during each call."""
        model = self._continuation() if continuation else self._tokenizer()
        if len(texts) < 2:
            return [model.tokenize(utf8(t), False, parse_special) for t in texts]
        workers = min(len(texts), os.cpu_count() or 1)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tokenize") as pool:
            return list(pool.map(lambda t: model.tokenize(utf8(t), False, parse_special), texts))

    def token_attrs(self) -> list[int]:
        """llama.cpp's attribute of every token (control, user-defined, lstrip, ...): what its
        tokenizer decides by, after the fixes it applies to what the file says."""
        vocab = self._tokenizer().vocab
        get = self._lc.llama_vocab_get_attr
        return [int(get(vocab, i)) for i in range(self._lc.llama_vocab_n_tokens(vocab))]

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        """The text of ``tokens``, every piece whole. llama-cpp-python's ``detokenize`` gives
        each piece a 32-byte buffer and silently drops longer ones (379 tokens of Gemma 3, a run
        of sixteen '─' among them; 47 of SmolLM2), so text rebuilt with it can lack what the
        model saw. A leading space after BOS is dropped, as llama-cpp-python does."""
        self._check_ids(tokens)
        lc = self._lc
        vocab = self._vocab()
        buf = ctypes.create_string_buffer(256)
        out = b"".join(token_bytes(lc, vocab, tok, buf, special) for tok in tokens)
        if tokens and tokens[0] == lc.llama_vocab_bos(vocab) and out[:1] == b" ":
            out = out[1:]
        return out.decode("utf-8", "replace")

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> str:
        llm = self._require()
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ChatTemplateError("this model has no chat template; send a plain prompt instead")
        vocab = self._vocab()
        lc = self._lc

        def text_of(tok: int) -> str:
            return llm._model.token_get_text(tok) if tok >= 0 else ""

        return render_chat_template(
            template,
            messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=text_of(lc.llama_vocab_bos(vocab)),
            eos_token=text_of(lc.llama_vocab_eos(vocab)),
            cancelled=self._stopped,
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

    def kv_tokens(self) -> list[int]:
        """The token ids at KV positions 0..n-1 of the sequence, as the engine put them there."""
        self._require()
        return list(self.tokens)

    def kv_usage(self) -> KVUsage:
        llm = self._require()
        lc = self._lc
        mem = self._mem
        pos_min = lc.llama_memory_seq_pos_min(mem, 0)
        pos_max = lc.llama_memory_seq_pos_max(mem, 0)
        used = pos_max - pos_min + 1 if pos_max >= 0 else 0
        return KVUsage(
            n_ctx=llm.n_ctx(),
            cells_used=used,
            pos_min=pos_min,
            pos_max=pos_max,
            state_bytes=lc.llama_state_seq_get_size(llm.ctx, _STATE_SEQ),
            can_shift=bool(lc.llama_memory_can_shift(mem)),
        )

    def _state_out(self) -> tuple[ctypes.Array[ctypes.c_uint8], int]:
        """The sequence's KV state in a buffer of its own, and how many of its bytes it fills."""
        ctx = self._require().ctx
        size = self._lc.llama_state_seq_get_size(ctx, _STATE_SEQ)
        buf = (ctypes.c_uint8 * size)()
        return buf, self._lc.llama_state_seq_get_data(ctx, buf, size, _STATE_SEQ)

    def save_state(self, path: str | None = None) -> KVState:
        """The sequence's KV state; with ``path`` the bytes go to that file, not the reply."""
        llm = self._require()
        lc = self._lc
        assert self.settings is not None
        data = b""
        if path is not None:  # llama.cpp writes straight into the mapped file
            size = lc.llama_state_seq_get_size(llm.ctx, _STATE_SEQ)
            with open(path, "w+b") as out:
                out.truncate(size)
                with mmap.mmap(out.fileno(), size) as view:
                    buf = (ctypes.c_uint8 * size).from_buffer(view)
                    n = lc.llama_state_seq_get_data(llm.ctx, buf, size, _STATE_SEQ)
                    del buf  # the mapping closes only once nothing exports it
                out.truncate(n)
        else:
            buf, n = self._state_out()
            data = bytes(memoryview(buf)[:n])
        if self._fault is not None and self._fault.due("save"):
            self._fault.fire()
        return KVState(
            tokens=tuple(self.tokens),
            data=data,
            n_ctx=llm.n_ctx(),
            kv_cache_type=self.settings.kv_cache_type,
            model_path=llm.model_path,
        )

    def restore_state(self, state: KVState, path: str | None = None) -> int:
        """Load a saved state; with ``path`` its bytes are read from that file."""
        llm = self._require()
        assert self.settings is not None
        if state.n_ctx != llm.n_ctx() or state.kv_cache_type != self.settings.kv_cache_type:
            raise ValueError(
                f"the saved KV state was made with n_ctx {state.n_ctx} and a {state.kv_cache_type} "
                f"cache; the loaded model has n_ctx {llm.n_ctx()} and a "
                f"{self.settings.kv_cache_type} cache"
            )
        if len(state.tokens) > llm.n_ctx():
            raise ValueError("the saved KV state holds more tokens than the context")
        lc = self._lc
        lc.llama_memory_seq_rm(self._mem, 0, -1, -1)
        self.tokens = []
        with contextlib.ExitStack() as stack:
            if path is not None:  # mapped, not copied: llama.cpp reads the pages directly
                src = stack.enter_context(open(path, "rb"))
                size = os.fstat(src.fileno()).st_size
                if size == 0:
                    raise ValueError("the saved KV state is empty")
                view = stack.enter_context(mmap.mmap(src.fileno(), size, access=mmap.ACCESS_COPY))
                buf = (ctypes.c_uint8 * size).from_buffer(view)
            else:
                size = len(state.data)
                buf = (ctypes.c_uint8 * size).from_buffer_copy(state.data)
            n = lc.llama_state_seq_set_data(llm.ctx, buf, size, 0)
            del buf  # the mapping closes only once nothing exports it
        if n == 0:
            lc.llama_memory_seq_rm(self._mem, 0, -1, -1)
            raise ValueError("llama.cpp rejected the saved KV state (made by another model?)")
        # llama.cpp ignores bytes after what it needs and restores the cells the state says:
        # a state that is not all read, or whose last position is not its last token's, is
        # not the state of its tokens (a damaged or crafted one)
        last = lc.llama_memory_seq_pos_max(self._mem, 0)
        if n != size or last != len(state.tokens) - 1:
            lc.llama_memory_seq_rm(self._mem, 0, -1, -1)
            raise ValueError(
                f"the saved KV state does not match its {len(state.tokens):,} tokens (llama.cpp "
                f"read {n:,} of its {size:,} bytes, up to position {last:,}); it was not restored"
            )
        self.tokens = list(state.tokens)
        return len(self.tokens)

    def remove(self, start: int, end: int, *, compact: bool = True) -> KVEdit:
        """Remove KV positions ``[start, end)``; what follows moves down so positions stay
        contiguous. Where llama.cpp cannot shift this cache, what follows is evaluated again.

        ``compact``: after a hole of at least :data:`COMPACT_MIN` cells on the CPU, the cells
        are also moved to the front of the cache (:meth:`_compact`). llama.cpp moves positions,
        not cells: the text behind the hole keeps its high cells, and every later decode
        attends over the cache up to the highest cell in use: the next window after a removal
        took 1.39x as long (tests/benchmarks/bench_kv.py). False leaves them (the benchmark's
        baseline).
        """
        self._require()
        lc = self._lc
        if not 0 <= start < end <= len(self.tokens):
            held = f"0..{len(self.tokens) - 1}" if self.tokens else "nothing"
            raise ValueError(
                f"cannot remove positions {start}..{end - 1}; the context holds {held}"
            )
        t0 = time.perf_counter()
        mem = self._mem
        rest = self.tokens[end:]
        reevaluated = 0
        compacted = False
        if not rest or lc.llama_memory_can_shift(mem):
            lc.llama_memory_seq_rm(mem, 0, start, end)
            if rest:
                lc.llama_memory_seq_add(mem, 0, end, -1, start - end)
            del self.tokens[start:end]
            assert self.settings is not None  # set with the model
            if (rest and compact and end - start >= COMPACT_MIN
                    and self.settings.n_gpu_layers == 0):  # fmt: skip
                compacted = self._compact()
        else:
            lc.llama_memory_seq_rm(mem, 0, start, -1)
            del self.tokens[start:]
            self._decode(rest, abortable=False)
            reevaluated = len(rest)
        # Without compaction llama.cpp applies the position change to the cached keys itself
        # at the next decode.
        return KVEdit(end - start, len(rest), reevaluated, time.perf_counter() - t0,
                      len(self.tokens), compacted)  # fmt: skip

    def _compact(self) -> bool:
        """Move the sequence's cells to the front of the cache, in the order they are in.

        llama.cpp rotates the shifted keys at the next decode, so the last token is decoded
        again first (its keys and values come out as a fresh evaluation's); the sequence's state
        is then read out, the cache cleared and the state put back, which llama.cpp writes into
        contiguous cells from the first. The state is byte for byte the one the removal left
        in place would have (tests/core/test_kv_compaction.py); only the cells' places change,
        and with them the order of float sums over them. False where llama.cpp refused to take
        the state back: the cache is then evaluated again from its tokens."""
        llm = self._require()
        lc = self._lc
        last = self.tokens.pop()
        lc.llama_memory_seq_rm(self._mem, 0, len(self.tokens), -1)
        self._decode([last], abortable=False)
        buf, n = self._state_out()
        lc.llama_memory_seq_rm(self._mem, 0, -1, -1)
        if n and lc.llama_state_seq_set_data(llm.ctx, buf, n, 0) == n \
                and lc.llama_memory_seq_pos_max(self._mem, 0) == len(self.tokens) - 1:  # fmt: skip
            return True
        lc.llama_memory_seq_rm(self._mem, 0, -1, -1)  # not expected; nothing is lost either way
        tokens, self.tokens = self.tokens, []
        self._decode(tokens, abortable=False)
        return False

    def _check_ids(self, tokens: Sequence[int]) -> None:
        check_token_ids(tokens, self._require().n_vocab())

    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int,
        sampling: SamplingSettings,
        stop: Sequence[str],
        emit: Callable[[Any], None],
        on_full: OnFull = "stop",
        keep: int = 0,
    ) -> None:
        """Evaluate ``prompt`` (re-using a cached prefix) and stream the reply through ``emit``.

        When the context fills up while generating, ``on_full="stop"`` ends with finish reason
        ``length``; ``"shift"`` removes half of what follows the first ``keep`` positions (the
        pinned prefix), emits :class:`Shifted`, and goes on. ``keep`` makes the policy: the
        system prompt and task for a rolling window; those plus the document's opening to
        truncate the middle (the start and the latest text stay).
        """
        llm = self._require()
        lc = self._lc
        prompt = list(prompt)
        if not prompt:
            raise ValueError("the prompt is empty")
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        sampling.validate()
        self._check_ids(prompt)
        n_ctx = llm.n_ctx()
        if on_full == "stop" and len(prompt) + max_tokens > n_ctx:
            raise ContextOverflowError(len(prompt), n_ctx, max_tokens)
        if on_full == "shift":
            if len(prompt) >= n_ctx:
                raise ContextOverflowError(len(prompt), n_ctx, 1)
            if not 0 <= keep < len(prompt):
                raise ValueError(f"keep must be between 0 and the prompt length ({len(prompt)})")

        # Prefix reuse: keep what the KV cache already holds; always evaluate at least the last
        # prompt token so its logits are fresh.
        reused = min(common_prefix_len(self.tokens, prompt), len(prompt) - 1)
        if reused < len(self.tokens):
            lc.llama_memory_seq_rm(self._mem, 0, reused, -1)
            del self.tokens[reused:]
        todo = prompt[reused:]
        with self._reporting(emit):
            self._generate(llm, prompt, todo, reused, max_tokens=max_tokens, sampling=sampling,
                           stop=stop, emit=emit, shift_keep=keep if on_full == "shift" else None)

    def _generate(
        self,
        llm: Any,
        prompt: list[int],
        todo: list[int],
        reused: int,
        *,
        max_tokens: int,
        sampling: SamplingSettings,
        stop: Sequence[str],
        emit: Callable[[Any], None],
        shift_keep: int | None,
    ) -> None:
        """generate's work once the prompt is checked: ``todo`` is what the cache lacks."""
        t0 = time.perf_counter()
        reason = "length"
        completion = 0
        try:
            self._decode(todo, abortable=True, prompt=True,
                         progress=self._prompt_reporter(len(todo), t0, emit))  # fmt: skip
        except DecodeCancelled:
            reason = "cancelled"
        t_prompt = time.perf_counter() - t0
        evaluated = len(self.tokens) - reused

        t1 = time.perf_counter()
        if reason != "cancelled":
            reason, completion = self._stream(
                llm, max_tokens=max_tokens, sampling=sampling, stop=stop, emit=emit,
                shift_keep=shift_keep,
            )  # fmt: skip
        t_gen = time.perf_counter() - t1
        emit(Finished(GenerationStats(
            prompt_tokens=len(prompt),
            prompt_eval_tokens=evaluated,
            prompt_seconds=t_prompt,
            completion_tokens=completion,
            gen_seconds=t_gen,
            finish_reason=reason,  # type: ignore[arg-type]
            n_past=len(self.tokens),
            threads=self._require_pilot().current,
        )))  # fmt: skip

    def _prompt_reporter(
        self, total: int, t0: float, emit: Callable[[Any], None]
    ) -> Callable[[int, bool], None] | None:
        """What tells the parent how far a prompt of ``total`` tokens to evaluate is (None for
        one short enough to go in one small slice): :class:`PromptProgress` now, at 0, then
        during and between slices, at most every REPORT_GAP_S, and always at the end.

        Between slices the KV figures are read from llama.cpp. During one (``inside``) llama.cpp
        is computing and is not asked: the cells are those read last plus the tokens the slice
        has evaluated so far, the state's bytes scaled with them."""
        if total <= MIN_SLICE:
            return None
        gate = ReportGate()
        read, read_at = self.kv_usage(), 0  # llama.cpp's figures, and how far the prompt was

        def report(done: int, inside: bool) -> None:
            nonlocal read, read_at
            now = time.perf_counter()
            if not gate.ready(now, last=done >= total):
                return
            if inside:
                cells = read.cells_used + done - read_at
                per_cell = read.state_bytes / read.cells_used if read.cells_used else 0
                kv = dataclasses.replace(read, cells_used=cells, pos_min=max(0, read.pos_min),
                                         pos_max=read.pos_max + done - read_at,
                                         state_bytes=int(per_cell * cells) or read.state_bytes)
            else:
                kv = read = self.kv_usage()
                read_at = done
            emit(PromptProgress(done, total, now - t0, kv))

        report(0, False)
        return report

    def _stream(
        self,
        llm: Any,
        *,
        max_tokens: int,
        sampling: SamplingSettings,
        stop: Sequence[str],
        emit: Callable[[Any], None],
        shift_keep: int | None = None,
    ) -> tuple[str, int]:
        """Sample until a stop; return the finish reason and the number of tokens produced.

        With ``shift_keep`` a full context is shifted (keeping that many positions) instead of
        ending the reply.
        """
        out = ReplyText(self._lc, self._vocab(), stop,
                        stop_on_repetition=sampling.stop_on_repetition)  # fmt: skip
        sampler = build_sampler(llm._model, llm.n_ctx(), sampling, self.tokens)
        pending_ids: list[int] = []
        pending_text = ""
        last_emit = 0.0  # the first piece goes out at once: time to first token matters
        completion = 0
        reason = "length"
        slow = True  # until the first token shows how long one takes
        kv_gate = ReportGate(REPORT_S)  # the cache's figures, 5 times a second
        try:
            while True:
                if self._fault is not None and self._fault.due("generate"):
                    if pending_text or pending_ids:  # the text so far reaches the parent first
                        emit(TextDelta(pending_text, tuple(pending_ids)))
                    self._fault.fire()
                if self._stopped():
                    reason = "cancelled"
                    break
                tok = sampler.sample(llm._ctx, -1)
                fed = out.feed(tok)
                if fed is None:  # end of generation
                    reason = "stop"
                    break
                completion += 1
                pending_ids.append(tok)
                text, ended = fed
                pending_text += text
                now = time.perf_counter()
                # the text before a stop string goes out at once
                if pending_text and (now - last_emit >= STREAM_INTERVAL_S or ended == "stop"):
                    emit(TextDelta(pending_text, tuple(pending_ids)))
                    pending_ids, pending_text, last_emit = [], "", now
                if ended:  # a stop string, or a loop
                    reason = ended
                    break
                if completion >= max_tokens:
                    reason = "length"
                    break
                if len(self.tokens) >= llm.n_ctx():
                    if shift_keep is None:
                        reason = "length"
                        break
                    if pending_text or pending_ids:  # text before the shift stays before it
                        emit(TextDelta(pending_text, tuple(pending_ids)))
                        pending_ids, pending_text = [], ""
                    held = len(self.tokens)
                    discard = max(1, (held - shift_keep) // 2)
                    edit = self.remove(shift_keep, shift_keep + discard)
                    emit(Shifted(shift_keep, shift_keep + discard, held, edit.reevaluated))
                # The abort callback costs a Python call per graph node (~5% of a fast token), so
                # it is armed only when tokens are slow enough for cancel to need it.
                t_tok = time.perf_counter()
                try:
                    self._decode([tok], abortable=slow)
                except DecodeCancelled:
                    reason = "cancelled"
                    break
                now = time.perf_counter()
                slow = now - t_tok > SLOW_TOKEN_S
                if kv_gate.ready(now):
                    emit(self.kv_usage())
        finally:
            sampler.close()
        tail = pending_text + out.tail(reason)
        if tail or pending_ids:
            emit(TextDelta(tail, tuple(pending_ids)))
        return reason, completion

    def generate_lanes(
        self,
        prefix: Sequence[int],
        suffixes: Sequence[Sequence[int]],
        *,
        lanes: int,
        max_tokens: int,
        sampling: SamplingSettings,
        stop: Sequence[str],
        emit: Callable[[Any], None],
    ) -> None:
        """Reply to ``prefix + suffix`` for each suffix, ``lanes`` at a time in one batch (see
        :mod:`app.core.engine.lanes`). The loaded context and its cache are left as they were."""
        with self._reporting(emit):
            generate_lanes(self._handles(), prefix, suffixes, lanes=lanes,
                           max_tokens=max_tokens, sampling=sampling, stop=stop,
                           emit=emit)  # fmt: skip

    # ----- fault injection (tests of crash isolation use this; nothing else does) -----

    def crash(self, kind: str) -> None:
        if kind == "segfault":
            ctypes.string_at(0)
        elif kind == "abort":
            os.abort()
        elif kind == "illegal-instruction":
            os.kill(os.getpid(), signal.SIGILL)
        raise ValueError(f"unknown crash kind {kind!r}")


def _plain(line: str, limit: int = 300) -> str:
    """A llama.cpp log line as a reason: without the C function name, and not endless."""
    line = re.sub(r"^[A-Za-z_]\w*: ", "", line.strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _error_reply(exc: BaseException) -> tuple[str, str, Any]:
    if isinstance(exc, ContextOverflowError):
        return ("err", "overflow", (exc.prompt_tokens, exc.n_ctx, exc.reserve))
    kinds: list[tuple[type[BaseException], str]] = [
        (ModelLoadError, "load"),
        (EngineNotLoadedError, "not-loaded"),
        (CancelledError, "cancelled"),
        (ChatTemplateError, "template"),
        (ValueError, "value"),
    ]
    for cls, kind in kinds:
        if isinstance(exc, cls):
            return ("err", kind, str(exc))
    return ("err", "engine", f"{type(exc).__name__}: {exc}")


def serve(conn: Connection, cancel_flag: SharedFlag) -> None:
    """Child main loop: answer requests until the pipe closes or a 'close' request arrives."""
    engine = Engine(cancel_flag)
    conn.send(("ok", engine.capabilities()))
    while True:
        try:
            op, kwargs = conn.recv()
        except (EOFError, OSError):
            break
        if op == "close":
            engine.unload()
            conn.send(("ok", None))
            break
        try:
            if op in ("generate", "generate_lanes"):  # streamed: events, then the last one
                getattr(engine, op)(emit=lambda ev: conn.send(("event", ev)), **kwargs)
                continue
            handler = getattr(engine, op, None)
            if handler is None or op.startswith("_"):
                raise ValueError(f"unknown engine operation {op!r}")
            conn.send(("ok", handler(**kwargs)))
        except Exception as exc:
            if not isinstance(exc, ValueError | EngineNotLoadedError | ModelLoadError):
                traceback.print_exc(file=sys.stderr)
            conn.send(_error_reply(exc))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the child: ``python -m app.core.engine.child --fd N --flag PATH``."""
    parser = argparse.ArgumentParser(prog="contextlens-engine")
    parser.add_argument("--fd", type=int, required=True, help="inherited socket for messages")
    parser.add_argument("--flag", required=True, help="file holding the shared cancel byte")
    args = parser.parse_args(argv)
    conn = Connection(args.fd)
    flag = SharedFlag(args.flag)
    try:
        serve(conn, flag)
    finally:
        flag.close()
        conn.close()


if __name__ == "__main__":
    main()
