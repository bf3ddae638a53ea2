"""Decoding in llama.cpp, as a single reply (child.py) and the lanes (lanes.py) both do it.

One place for what either would otherwise repeat: the handles on the loaded model that a decode
needs (:class:`LlamaHandles`, so the lanes get those and not the whole engine), the token-id
check, arming llama.cpp's abort callback so cancel is seen inside a long decode, and what a
``llama_decode`` return code means (cancelled, or a failure said in words with llama.cpp's last
log line). Lives only in the engine child: nothing here imports llama.cpp, the callers hand it
their ``llama_cpp`` module.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.engine.threads import Change, ThreadGovernor
from app.core.engine.types import LoadSettings

DECODE_OK, DECODE_ABORTED = 0, 2  # llama_decode's success, and its answer to the abort callback

# Live figures while a prompt is evaluated: how far a slice is comes from inside it: llama.cpp's
# abort callback runs after every node of the graph, the nodes are counted, and every REPORT_S the
# count is turned into tokens (LlamaBase._inside), once a decode has shown how many nodes a graph
# has. A prompt of at most SHORT_PROMPT tokens gets no progress reports: it is over at once.
# The slices themselves are the schedule's (schedule.py).
REPORT_S = 0.2
SHORT_PROMPT = 32
REPORT_GAP_S = 0.05  # reports closer together than this are skipped (the last one never)


class DecodeCancelled(Exception):
    """Cancel (or an orphaned engine) stopped a decode or the loop around it. Caught inside the
    engine, which then ends the reply as ``cancelled``; the parent is told with
    :class:`~app.core.engine.types.CancelledError` or a finish reason, never with this."""


@dataclass(frozen=True)
class LlamaHandles:
    """What code that decodes outside the engine's class needs of the loaded model: llama.cpp's
    handles and the engine's cancel check, explicitly, rather than the engine and its insides."""

    lc: Any  # the engine's ``llama_cpp`` module (a test may stand in for it)
    model: Any  # the loaded ``llama_cpp._internals.LlamaModel``: weights and vocabulary
    context_params: Any  # the ``llama_context_params`` the loaded context was made with
    model_path: str
    n_ctx: int  # what one reply may hold
    n_batch: int  # the most tokens one llama_decode takes
    slice_tokens: int  # the tokens of a prompt slice (schedule.slice_tokens)
    settings: LoadSettings  # what the model was loaded with
    log: Sequence[str]  # llama.cpp's latest warnings and errors, live: a failure quotes the last
    stopped: Callable[[], bool]  # cancelled, or the parent is gone
    abort_callback: Any  # llama.cpp's abort callback answering ``stopped``
    pilot: ThreadPilot  # the thread count of every decode

    @property
    def vocab(self) -> Any:
        return self.model.vocab


def check_token_ids(tokens: Sequence[int], n_vocab: int) -> None:
    """Refuse an id outside the vocabulary before llama.cpp sees it: it would read past its
    tables, and this process would die instead of answering with an error."""
    bad = next((t for t in tokens if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise ValueError(f"token id {bad} is outside the vocabulary (0..{n_vocab - 1})")


@contextlib.contextmanager
def abort_armed(lc: Any, ctx: Any, callback: Any, armed: bool = True) -> Iterator[None]:
    """llama.cpp's abort callback on context ``ctx`` for the block, when ``armed``: llama.cpp
    calls it once per graph node, so a cancel ends a long decode at once, but it costs a Python
    call per node and is armed only where a decode is slow enough for cancel to need it."""
    if not armed:
        yield
        return
    lc.llama_set_abort_callback(ctx, callback, None)
    try:
        yield
    finally:
        lc.llama_set_abort_callback(ctx, lc.ggml_abort_callback(), None)


def decode_batch(
    lc: Any,
    ctx: Any,
    batch: Any,
    *,
    armed: bool,
    stopped: Callable[[], bool],
    log: Sequence[str],
) -> None:
    """One ``llama_decode`` of ``batch``. Raises :class:`DecodeCancelled` when the abort
    callback stopped it or (``armed``) cancel came during it, RuntimeError when llama.cpp could
    not evaluate it (:func:`decode_failure`). What the batch left in the cache is the caller's."""
    rc = lc.llama_decode(ctx, batch)
    if rc == DECODE_ABORTED or (armed and stopped()):
        raise DecodeCancelled
    if rc != DECODE_OK:
        raise RuntimeError(decode_failure(rc, log))


def decode_failure(rc: int, log: Sequence[str]) -> str:
    """A failed ``llama_decode`` in words, with llama.cpp's last logged line as the detail."""
    reasons = {1: "no KV cache slot was free for the batch", -1: "the batch was invalid"}
    detail = reasons.get(rc, f"llama_decode returned {rc}")
    last = log[-1] if log else ""
    return f"llama.cpp could not evaluate the tokens: {detail}" + (f" ({last})" if last else "")


class ReportGate:
    """Lets a report through at most every :data:`REPORT_GAP_S` seconds (and always the one
    marked last), so a fast model's many small steps do not flood the pipe."""

    def __init__(self, gap_s: float = REPORT_GAP_S) -> None:
        self.gap_s = gap_s
        self._last = -1e9

    def ready(self, now: float, *, last: bool = False) -> bool:
        if last or now - self._last >= self.gap_s:
            self._last = now
            return True
        return False


class ThreadPilot:
    """Applies the engine's :class:`~app.core.engine.threads.ThreadGovernor` to llama.cpp
    contexts: ``before`` each decode sets the count it answers (``llama_set_n_threads``, which
    llama.cpp reads at its next graph), ``after`` tells it how long the decode took, and each
    change goes to ``on_change`` (the request's event stream)."""

    def __init__(self, lc: Any, governor: ThreadGovernor, n_threads: int,
                 n_threads_batch: int) -> None:  # fmt: skip
        self.lc, self.governor = lc, governor
        self.n_threads, self.n_threads_batch = n_threads, n_threads_batch
        self.on_change: Callable[[Change], None] | None = None
        self._applied: tuple[int, int] | None = None  # (id of the context, count) last set
        # changes made while no request listened (a chunk evaluated on its own, the frame's
        # prefix): the next request reports them first, so the record misses none
        self.pending: deque[Change] = deque(maxlen=100)

    @property
    def current(self) -> int:
        return self.governor.current

    def _apply(self, ctx: Any) -> None:
        n = self.governor.current
        if self._applied != (id(ctx), n):
            self.lc.llama_set_n_threads(ctx, min(self.n_threads, n),
                                        min(self.n_threads_batch, n))  # fmt: skip
            self._applied = (id(ctx), n)

    def _changed(self, change: Change | None) -> None:
        if change is None:
            return
        if self.on_change is not None:
            self.on_change(change)
        else:
            self.pending.append(change)

    def take_pending(self) -> list[Change]:
        """The changes no request has reported yet, oldest first (and forgets them)."""
        out = list(self.pending)
        self.pending.clear()
        return out

    def before(self, ctx: Any) -> float:
        """Set ``ctx``'s thread count for the decode about to start; returns the start time."""
        self._changed(self.governor.before_decode())
        self._apply(ctx)
        return time.perf_counter()

    def after(self, ctx: Any, tokens: int, started: float, n_past: int = 0) -> None:
        """The decode of ``tokens`` after ``n_past`` positions, begun at ``started``
        (``before``'s answer), is over."""
        change = self.governor.after_decode(tokens, time.perf_counter() - started, n_past)
        if change is not None:
            self._apply(ctx)
            self._changed(change)
