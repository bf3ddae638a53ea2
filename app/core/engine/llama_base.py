"""The engine child's hold on llama.cpp: the model and context, the log, cancel, and decoding.

:class:`LlamaBase` is what the parts of :class:`~app.core.engine.llama_engine.LlamaEngine` share:
the loaded ``Llama``, the tokens its cache holds, llama.cpp's log captured for error messages,
the abort callback (cancel inside a long decode, and a prompt slice's progress counted from the
graph nodes computed), the thread pilot, and :meth:`LlamaBase._decode`, which every operation
that puts tokens into the cache goes through. The operations are in the parts: the vocabulary
(``vocabulary.py``), the KV state saved and restored (``kv_state_io.py``), removals and
compaction (``compaction.py``), replies (``generation.py``), loading (``llama_engine.py``).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from app.core.engine.decoding import (
    REPORT_S,
    DecodeCancelled,
    LlamaHandles,
    ThreadPilot,
    abort_armed,
    check_token_ids,
    decode_batch,
)
from app.core.engine.gguf import CheckedFile
from app.core.engine.ipc import SharedFlag
from app.core.engine.model_files import HeldFiles, hold_checked
from app.core.engine.schedule import PROMPT_SLICE, slices
from app.core.engine.template_check import SandboxedTemplateCheck
from app.core.engine.threads import Change, CpuMeter
from app.core.engine.types import (
    ContextOverflowError,
    EngineNotLoadedError,
    LoadSettings,
    ThreadsChanged,
)

_LOG_LINES = 40

# A checkpoint before each step of a phase the engine goes through: "load" (a line llama.cpp
# logs while it loads a model, about 2,000 a load), "prompt" (a batch of prompt tokens about to
# be decoded), "generate" (a token about to be sampled) and "save" (a KV state written, before
# the reply). Called with the phase and a function that sends what the step holds back from the
# parent (the reply's text so far), for a hook that ends the process there. None in the app:
# each check is one comparison. The crash-isolation tests install one (tests/fault_child.py).
StepHook = Callable[[str, Callable[[], None]], None]


def nothing_pending() -> None:
    """What a step that holds nothing back sends before a :data:`StepHook` ends the process."""


class LlamaBase:
    """The loaded llama.cpp model and context, and how tokens go into its cache: what every part
    of :class:`~app.core.engine.llama_engine.LlamaEngine` shares. Lives only in the child
    process."""

    def __init__(self, cancel_flag: SharedFlag, step_hook: StepHook | None = None) -> None:
        import llama_cpp  # noqa: PLC0415 (llama.cpp only in the engine process, not importers)
        import llama_cpp.llama_chat_format as chat_format  # noqa: PLC0415

        chat_format.Jinja2ChatFormatter = SandboxedTemplateCheck  # type: ignore[misc,assignment]
        SandboxedTemplateCheck.stopped = self._stopped
        self._lc = llama_cpp
        self._cancel = cancel_flag
        self.llm: Any = None
        self.vocab_model: Any = None  # a vocabulary-only model (load_vocab), for counting
        self.tokenizer_path = ""  # the GGUF the tokenizer comes from (model or vocabulary)
        self.model_path = ""  # the model's path as the parent named it (llama.cpp may open a link)
        self.held: HeldFiles | None = None  # the loaded model's checked files (model_files.py)
        self.continuation_model: Any = None  # the vocabulary without its space prefix, or None
        self.space_prefix: bool | None = None  # whether the vocabulary adds one (None: unread)
        self.settings: LoadSettings | None = None
        self.tokens: list[int] = []  # what occupies KV positions 0..len-1 of sequence 0
        self.log: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
        self.first_error = ""  # llama.cpp's first error since the last load began: the cause
        # llama.cpp's lines about what the last load allocated: the KV caches and every buffer
        self.kv_log: list[str] = []
        self._step_hook = step_hook  # None unless a test installed one
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
        self.slice = PROMPT_SLICE  # the tokens of a prompt slice (schedule.slice_tokens), by load

    def _on_node(self, _data: Any) -> bool:
        self._nodes += 1
        if self._node_hook is not None:
            self._node_hook()
        return self._stopped()

    def _stopped(self) -> bool:
        """Cancelled, or orphaned: a parent killed outright (``timeout``, a crash) cannot cancel,
        and its engine must not go on computing for nobody."""
        return self._cancel.is_set() or os.getppid() != self._parent

    def _install_log_capture(self) -> None:
        """Keep llama.cpp's warnings and errors so failures can quote them."""

        def log_line(level: int, text: bytes, _user: Any) -> None:
            if self._step_hook is not None and self._loading:
                self._step_hook("load", nothing_pending)
            if self._loading and (text.startswith(b"llama_kv_cache") or b"buffer size =" in text):
                self.kv_log.append(text.decode("utf-8", "replace").rstrip())
            if level in (3, 4) or (level == 5 and self.log):  # ggml: warn, error, continuation
                line = text.decode("utf-8", "replace").rstrip()
                if line:
                    self.log.append(line)
                if level == 4 and line and not self.first_error:
                    self.first_error = line

        # llama.cpp's callback type (a ctypes class, which mypy takes for an untyped decorator)
        on_log = self._lc.llama_log_callback(log_line)
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
        """Append ``tokens`` to the KV cache in slices of ``self.slice`` (schedule.py says why
        the slices are fixed); logits for the last token only.
        ``prompt``: these are a prompt's tokens (not a generated one, not a re-evaluation).
        ``progress``: told how many of ``tokens`` are in the cache after each slice (False), and
        a few times a second during one (True: counted from the graph nodes llama.cpp has
        computed, see :meth:`_inside`, once a decode has shown how many nodes a graph has). The
        thread count is set before each slice (ThreadPilot).
        """
        llm = self._require()
        lc = self._lc
        pilot = self._require_pilot()
        n_ctx = llm.n_ctx()
        if len(self.tokens) + len(tokens) > n_ctx:
            raise ContextOverflowError(len(self.tokens) + len(tokens), n_ctx, 0)
        n_ubatch = max(1, int(llm.context_params.n_ubatch))
        i = 0
        with abort_armed(lc, llm.ctx, self._abort_cb, abortable):
            for size in slices(len(tokens), self.slice):
                if prompt and self._step_hook is not None:
                    self._step_hook("prompt", nothing_pending)
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
                pilot.after(llm.ctx, len(piece), started, n_past)
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
            slice_tokens=self.slice,
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
                                time.perf_counter() - t0, ch.took_s, ch.expected_s))  # fmt: skip

        for ch in pilot.take_pending():  # made between requests: reported first
            changed(ch)
        pilot.on_change = changed
        try:
            yield
        finally:
            pilot.on_change = None


    def _hold(self, path: str, files: Sequence[CheckedFile]) -> str:
        """What llama.cpp is to open for ``path``: with ``files`` (what the parent checked), a
        link to the very files held open here (model_files.py); ``path`` itself otherwise."""
        if not files:
            return path
        self.held = hold_checked(files, Path(self._cancel.path).parent / "model")
        return self.held.path

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
        if self.held is not None:
            self.held.close()
            self.held = None
        self.tokenizer_path, self.model_path, self.space_prefix = "", "", None
        self.tokens = []
        self.settings = None
        self._pilot = None

    def _check_ids(self, tokens: Sequence[int]) -> None:
        check_token_ids(tokens, self._require().n_vocab())



def plain_reason(line: str, limit: int = 300) -> str:
    """A llama.cpp log line as a reason: without the C function name, and not endless."""
    line = re.sub(r"^[A-Za-z_]\w*: ", "", line.strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"

