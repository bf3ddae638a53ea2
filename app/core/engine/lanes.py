"""Batched generation: several prompts as parallel sequences of one llama.cpp context.

One token of one sequence costs a pass over all the model's weights; the same pass can carry a
token of several sequences for little more. The map phase of a multi-pass job asks the same
instruction of many windows: here each window is a *lane* (a sequence id), the shared instruction
prefix is evaluated once and copied to every other lane with ``llama_memory_seq_cp``, and each
step decodes one token of every lane in one batch. A lane whose reply ends takes the next waiting
prompt at once (continuous batching), so the batch stays full.

Each lane has a cache stream of its own (``kv_unified`` off): in one shared pool every token
would attend over every lane's cells, masked, and at windows of 600 tokens that cost more than
the batching saved (four lanes ran 0.75x as fast as one at a time; their own streams, 1.4x the
tokens per second). Copying between streams copies a whole stream (llama.cpp allows no range),
so the copy is followed by removing what the source held past the prefix.

llama-cpp-python's ``Llama`` creates its context with one sequence, so the lanes get their own
context through the low-level API, with ``n_seq_max`` lanes and a stream's room for each; it lives
for one request. Lives only in the engine child (it drives llama.cpp directly), which hands it
the loaded model as :class:`~app.core.engine.decoding.LlamaHandles`; decoding, sampling and the
reply's text are the single reply's own (decoding.py, sampler.py, reply_text.py).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.engine.decoding import (
    REPORT_S,
    SHORT_PROMPT,
    DecodeCancelled,
    LlamaHandles,
    ReportGate,
    abort_armed,
    check_token_ids,
    decode_batch,
)
from app.core.engine.gguf import inspect_model
from app.core.engine.reply_text import STREAM_INTERVAL_S, ReplyText
from app.core.engine.sampler import build_sampler
from app.core.engine.schedule import prompt_slices
from app.core.engine.types import (
    ContextOverflowError,
    GenerationStats,
    LaneCells,
    LaneDelta,
    LaneFinished,
    LanePrompt,
    LanesFinished,
    LaneStarted,
    SamplingSettings,
)

CELL_ROUNDING = 256  # llama.cpp pads the cache to this many cells anyway
MAX_LANES = 64
# Cancel is seen between steps; a step longer than this also arms llama.cpp's abort callback
# (a Python call per graph node: a few % of a step, so not for steps of a few tens of ms).
SLOW_STEP_S = 0.25


@dataclass
class _Reply:
    """One lane's reply to one prompt, token by token."""

    index: int
    lane: int
    pos: int  # the next KV position of this lane's sequence
    prompt_tokens: int
    evaluated: int
    prompt_seconds: float
    sampler: Any
    out: ReplyText
    t0: float = field(default_factory=time.perf_counter)
    completion: int = 0
    token: int = -1  # sampled, waiting to be evaluated
    text: str = ""  # not yet sent
    ids: list[int] = field(default_factory=list)
    reason: str = ""  # set when the reply is over


def generate_lanes(
    llama: LlamaHandles,
    prefix: Sequence[int],
    suffixes: Sequence[Sequence[int]],
    *,
    lanes: int,
    max_tokens: int,
    sampling: SamplingSettings,
    stop: Sequence[str],
    emit: Callable[[Any], None],
) -> None:
    """Reply to ``prefix + suffix`` for every suffix, ``lanes`` at a time.

    Emits :class:`LanePrompt` as a prompt goes in (from its start, slice by slice),
    :class:`LaneStarted` when a prompt is in its lane's cache, :class:`LaneDelta` text
    (whole characters), :class:`LaneFinished` per prompt and :class:`LanesFinished` last. Each
    reply is the one the engine's single reply (``LlamaEngine.generate``) would give with
    ``on_full="stop"``: with one lane the very same decodes in the same order (the first prompt
    whole, then each suffix after the cached prefix, each in the schedule of schedule.py); with
    more, a step decodes a token of every lane in one batch, which other kernels compute than a
    token alone, so greedy replies may differ from it by floating-point rounding.
    """
    lc = llama.lc
    prefix = list(prefix)
    suffix_ids = [list(s) for s in suffixes]
    if not prefix or not suffix_ids or not all(suffix_ids):
        raise ValueError("batched generation needs a prefix and at least one non-empty suffix")
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    if lanes < 1:
        raise ValueError("lanes must be at least 1")
    sampling.validate()
    n_vocab = llama.model.n_vocab()
    check_token_ids(prefix, n_vocab)
    for s in suffix_ids:
        check_token_ids(s, n_vocab)
    n_ctx = llama.n_ctx  # what one reply may hold, as for a single one
    longest = max(len(s) for s in suffix_ids)
    if len(prefix) + longest + max_tokens > n_ctx:
        raise ContextOverflowError(len(prefix) + longest, n_ctx, max_tokens)
    t_setup = time.perf_counter()
    per_lane = -(-(len(prefix) + longest + max_tokens) // CELL_ROUNDING) * CELL_ROUNDING
    lanes = min(lanes, len(suffix_ids), lc.llama_max_parallel_sequences(),
                _lanes_that_fit(llama, per_lane))  # fmt: skip
    with contextlib.ExitStack() as stack:
        ctx, lanes = _lane_context(llama, lanes, per_lane)
        cells = lanes * per_lane
        stack.enter_context(contextlib.closing(ctx))
        batch_size = max(llama.n_batch, lanes)
        batch = lc.llama_batch_init(batch_size, 0, 1)
        stack.callback(lc.llama_batch_free, batch)
        run = _Run(llama, ctx, batch, batch_size, emit)
        setup_s = time.perf_counter() - t_setup
        reason = "stop"
        try:
            run.go(prefix, suffix_ids, lanes=lanes, max_tokens=max_tokens, sampling=sampling,
                   stop=stop)  # fmt: skip
        except DecodeCancelled:
            reason = "cancelled"
            for reply in run.active.values():
                reply.reason = "cancelled"
            run.settle()
        finally:
            for reply in run.active.values():  # after an engine error
                reply.sampler.close()
        emit(LanesFinished(lanes, cells, time.perf_counter() - t_setup, setup_s,
                           reason))  # type: ignore[arg-type]  # fmt: skip


def _lanes_that_fit(llama: LlamaHandles, per_lane: int) -> int:
    """How many lanes' caches fit in half the free memory (at least one: the request then
    fails as any context would). With layers on a GPU the cache is there, and llama.cpp's own
    refusal decides (:func:`_lane_context` halves the lanes until one fits)."""
    import psutil  # noqa: PLC0415 (only when lanes run: the CLI imports this module at start)

    settings = llama.settings
    if settings.n_gpu_layers != 0:
        return MAX_LANES
    per_cell = _kv_bytes_per_cell(llama.model_path, settings.kv_cache_type)
    if not per_cell:
        return MAX_LANES
    free = int(psutil.virtual_memory().available) // 2
    return max(1, free // (per_cell * per_lane))


@functools.lru_cache(maxsize=4)
def _kv_bytes_per_cell(model_path: str, kv_cache_type: str) -> int | None:
    """From the GGUF card, read once per model (not at every map phase); None if unknown."""
    try:
        return inspect_model(model_path).kv_bytes_per_token(kv_cache_type)
    except (OSError, ValueError):
        return None


def _lane_context(llama: LlamaHandles, lanes: int, per_lane: int) -> tuple[Any, int]:
    """A context like the loaded one with a stream of ``per_lane`` cells for each lane, and the
    number of lanes it has: where llama.cpp cannot allocate them all, half as many, down to one."""
    from llama_cpp._internals import LlamaContext  # noqa: PLC0415 (llama.cpp: engine process only)

    lc = llama.lc
    while True:
        params = lc.llama_context_params()
        ctypes.pointer(params)[0] = llama.context_params  # a copy: the loaded context's settings
        params.n_ctx = lanes * per_lane
        params.n_seq_max = lanes
        params.kv_unified = False  # a stream per lane: each attends over its own cells only
        params.n_batch = max(params.n_batch, lanes)
        params.n_ubatch = max(params.n_ubatch, min(lanes, params.n_batch))
        try:
            return LlamaContext(model=llama.model, params=params, verbose=False), lanes
        except ValueError:
            if lanes > 1:
                lanes //= 2
                continue
            last = llama.log[-1] if llama.log else "it could not allocate the cache"
            raise RuntimeError(
                f"llama.cpp could not create a context for a lane of {per_lane:,} cells ({last})"
            ) from None


class _Run:
    """The state of one batched request: which lane holds which prompt, and the shared batch."""

    def __init__(
        self,
        llama: LlamaHandles,
        ctx: Any,
        batch: Any,
        batch_size: int,
        emit: Callable[[Any], None],
    ) -> None:
        self.llama = llama
        self.lc = llama.lc
        self.ctx = ctx
        self.mem = self.lc.llama_get_memory(ctx.ctx)
        self.batch = batch
        self.batch_size = batch_size
        self.emit = emit
        self.active: dict[int, _Reply] = {}
        self.last_emit = 0.0
        self.prefix_len = 0
        self.has_prefix: set[int] = set()  # lanes holding the prefix; empty: none evaluated yet
        self.prefix_lane = 0  # the lane the prefix was evaluated in
        self._slow = True  # until a step shows how long one takes
        self._cells_gate = ReportGate(REPORT_S)  # each lane's cells, 5 times a second

    # ----- llama.cpp -----

    def _decode(self, entries: Sequence[tuple[int, int, int, bool]], *, abortable: bool) -> None:
        """Decode (token, position, lane, wants logits) entries, ``batch_size`` at a time."""
        lc, llama = self.lc, self.llama
        with abort_armed(lc, self.ctx.ctx, llama.abort_callback, abortable):
            for i in range(0, len(entries), self.batch_size):
                piece = entries[i : i + self.batch_size]
                b = self.batch
                b.n_tokens = len(piece)
                for j, (tok, pos, lane, logits) in enumerate(piece):
                    b.token[j], b.pos[j], b.n_seq_id[j], b.logits[j] = tok, pos, 1, logits
                    b.seq_id[j][0] = lane
                started = llama.pilot.before(self.ctx.ctx)
                decode_batch(lc, self.ctx.ctx, b, armed=abortable, stopped=llama.stopped,
                             log=llama.log)  # fmt: skip
                llama.pilot.after(self.ctx.ctx, len(piece), started,
                                  max(pos for _, pos, _, _ in piece))  # fmt: skip

    def _prompt(self, tokens: Sequence[int], start: int, lane: int, index: int) -> None:
        """Evaluate prompt ``index``'s tokens into ``lane`` from position ``start``, in the
        single reply's schedule (schedule.prompt_slices: the last token alone, with its
        logits); one longer than SHORT_PROMPT says how far it is (:class:`LanePrompt`)."""
        entries = [(t, start + k, lane, False) for k, t in enumerate(tokens)]
        tok, pos, _, _ = entries[-1]
        entries[-1] = (tok, pos, lane, True)
        total, t0, gate = len(entries), time.perf_counter(), ReportGate()
        if total > SHORT_PROMPT:
            self.emit(LanePrompt(index, lane, 0, total, 0.0))
        i = 0
        for size in prompt_slices(total, self.llama.slice_tokens):
            self._decode(entries[i : i + size], abortable=True)
            i += size
            now = time.perf_counter()
            if total > SHORT_PROMPT and gate.ready(now, last=i >= total):
                self.emit(LanePrompt(index, lane, i, total, now - t0))

    # ----- the schedule -----

    def go(
        self,
        prefix: list[int],
        suffixes: list[list[int]],
        *,
        lanes: int,
        max_tokens: int,
        sampling: SamplingSettings,
        stop: Sequence[str],
    ) -> None:
        waiting = collections.deque(enumerate(suffixes))
        self.prefix_len = len(prefix)
        free = list(range(lanes))

        def start(lane: int) -> None:
            index, suffix = waiting.popleft()
            t0 = time.perf_counter()
            if not self.has_prefix:  # the first prompt goes in whole, as a single reply's does
                self._prompt(prefix + suffix, 0, lane, index)
                evaluated = len(prefix) + len(suffix)
                self.has_prefix.add(lane)
                self.prefix_lane = lane
            else:
                if lane not in self.has_prefix:  # the whole stream, then only the prefix
                    self.lc.llama_memory_seq_cp(self.mem, self.prefix_lane, lane, -1, -1)
                    self.lc.llama_memory_seq_rm(self.mem, lane, self.prefix_len, -1)
                    self.has_prefix.add(lane)
                self._prompt(suffix, self.prefix_len, lane, index)
                evaluated = len(suffix)
            held = self.prefix_len + len(suffix)
            llama = self.llama
            sampler = build_sampler(llama.model, llama.n_ctx, sampling, prefix + suffix)
            out = ReplyText(llama.lc, llama.vocab, stop,
                            stop_on_repetition=sampling.stop_on_repetition)  # fmt: skip
            reply = _Reply(index=index, lane=lane, pos=held, prompt_tokens=held,
                           evaluated=evaluated, prompt_seconds=time.perf_counter() - t0,
                           sampler=sampler, out=out)  # fmt: skip
            self.active[lane] = reply
            self.emit(LaneStarted(index, lane, evaluated, reply.pos))
            self._take(reply, reply.sampler.sample(self.ctx, -1), max_tokens)

        def fill() -> None:
            """Give waiting prompts to free lanes; a reply that ends at once frees its lane."""
            while waiting and free:
                start(free.pop(0))
                free.extend(self.settle())
                free.sort()

        fill()
        while self.active:
            if self.llama.stopped():
                raise DecodeCancelled
            order = sorted(self.active.values(), key=lambda r: r.lane)
            t_step = time.perf_counter()
            self._decode([(r.token, r.pos, r.lane, True) for r in order], abortable=self._slow)
            self._slow = time.perf_counter() - t_step > SLOW_STEP_S
            for i, reply in enumerate(order):
                reply.pos += 1
                self._take(reply, reply.sampler.sample(self.ctx, i), max_tokens)
            self._flush()
            if self._cells_gate.ready(time.perf_counter()):
                self.emit(LaneCells(self.cells()))
            free.extend(self.settle())
            free.sort()
            fill()

    def _take(self, reply: _Reply, tok: int, max_tokens: int) -> None:
        """One sampled token of ``reply``: its text, or the end of the reply."""
        fed = reply.out.feed(tok)
        if fed is None:  # end of generation
            reply.reason = "stop"
            return
        reply.completion += 1
        reply.ids.append(tok)
        text, ended = fed
        reply.text += text
        if ended:
            reply.reason = ended
        elif reply.completion >= max_tokens or reply.pos >= self.llama.n_ctx:
            reply.reason = "length"
        else:
            reply.token = tok

    def _flush(self) -> None:
        now = time.perf_counter()
        if now - self.last_emit < STREAM_INTERVAL_S:
            return
        for reply in sorted(self.active.values(), key=lambda r: r.lane):
            if reply.text or (reply.ids and reply.reason):
                self.emit(LaneDelta(reply.index, reply.lane, reply.text, tuple(reply.ids)))
                reply.text, reply.ids = "", []
        self.last_emit = now

    def settle(self) -> list[int]:
        """Finish the replies that ended (their last text, their record); the lanes freed."""
        done = [r for r in self.active.values() if r.reason]
        for reply in done:
            tail = reply.text + reply.out.tail(reply.reason)
            if tail or reply.ids:
                self.emit(LaneDelta(reply.index, reply.lane, tail, tuple(reply.ids)))
            reply.text, reply.ids = "", []
            # the last sampled token is never evaluated: the lane holds positions 0..pos-1
            stats = GenerationStats(
                prompt_tokens=reply.prompt_tokens,
                prompt_eval_tokens=reply.evaluated,
                prompt_seconds=reply.prompt_seconds,
                completion_tokens=reply.completion,
                gen_seconds=time.perf_counter() - reply.t0,
                finish_reason=reply.reason,  # type: ignore[arg-type]
                n_past=reply.pos,
                threads=self.llama.pilot.current,
            )
            cells = self.cells()
            self.emit(LaneFinished(reply.index, reply.lane, stats, cells))
            reply.sampler.close()
            del self.active[reply.lane]
            # keep the shared prefix; the lane's own positions go for the next prompt
            self.lc.llama_memory_seq_rm(self.mem, reply.lane, self.prefix_len, -1)
        return [r.lane for r in done]

    def cells(self) -> tuple[int, ...]:
        """The positions llama.cpp holds for each lane's sequence (the prefix included)."""
        lc = self.lc
        n = self.ctx.params.n_seq_max
        return tuple(lc.llama_memory_seq_pos_max(self.mem, s) + 1 for s in range(n))
