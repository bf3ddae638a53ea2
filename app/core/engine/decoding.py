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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.engine.types import LoadSettings

DECODE_OK, DECODE_ABORTED = 0, 2  # llama_decode's success, and its answer to the abort callback

# Live figures while a prompt is evaluated: the prompt goes to llama.cpp in slices sized so one
# takes about REPORT_S, and the KV figures are read between slices. A model fast enough for full
# n_batch slices in that time gets them (nothing changes); a slow one gets smaller slices, never
# under MIN_SLICE tokens (smaller ones would cost more than the reports are worth). The slicing
# does not change what llama.cpp computes: the logits are the same bit for bit. SmolLM2 on the
# project's two cores (160-300 prompt tokens/s): 5-8 reports a second, and 2,000 tokens took
# as long as in n_batch slices, within the machine's noise of about 8 %.
REPORT_S = 0.2
MIN_SLICE = 32
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
    n_batch: int  # the most tokens one llama_decode of a prompt takes
    settings: LoadSettings  # what the model was loaded with
    log: Sequence[str]  # llama.cpp's latest warnings and errors, live: a failure quotes the last
    stopped: Callable[[], bool]  # cancelled, or the parent is gone
    abort_callback: Any  # llama.cpp's abort callback answering ``stopped``

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


class SlicePacer:
    """How many prompt tokens the next ``llama_decode`` takes, so that each takes about
    :data:`REPORT_S` and progress can be reported between them (at least 4 times a second).

    The first slice is :data:`MIN_SLICE` tokens: it measures the model on this machine; after
    each slice the size follows the rate just measured, in multiples of MIN_SLICE, up to
    ``n_batch`` (the cost of attention grows as the cache fills, so the rate is re-measured
    at every slice rather than once)."""

    def __init__(self, n_batch: int) -> None:
        self.n_batch = max(1, n_batch)
        self.size = min(MIN_SLICE, self.n_batch)

    def done(self, tokens: int, seconds: float) -> None:
        """A slice of ``tokens`` took ``seconds``: size the next one."""
        if tokens < self.size or seconds <= 0:  # a short last slice, or no time to measure
            return
        fits = int(tokens / seconds * REPORT_S) // MIN_SLICE * MIN_SLICE
        self.size = max(min(MIN_SLICE, self.n_batch), min(self.n_batch, fits))


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
