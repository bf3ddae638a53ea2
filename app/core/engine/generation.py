"""Replies in the engine child: a prompt evaluated after the cached prefix it shares, then tokens
sampled and streamed as text (:meth:`Generation.generate`), or several replies at once in lanes
(:meth:`Generation.generate_lanes`, :mod:`app.core.engine.lanes`). Each sends its events through
``emit``: prompt progress, text, the cache's figures, changes of the thread count, a shift of a
full context, and the :class:`Finished` record last.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from app.core.engine.compaction import Compaction
from app.core.engine.decoding import REPORT_S, SHORT_PROMPT, DecodeCancelled, ReportGate
from app.core.engine.lanes import generate_lanes
from app.core.engine.reply_text import STREAM_INTERVAL_S, ReplyText
from app.core.engine.sampler import build_sampler
from app.core.engine.types import (
    ContextOverflowError,
    Finished,
    GenerationStats,
    OnFull,
    PromptProgress,
    SamplingSettings,
    Shifted,
    TextDelta,
)

SLOW_TOKEN_S = 0.05  # a token decode longer than this arms llama.cpp's abort callback


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _send_pending(emit: Callable[[Any], None], text: str, ids: tuple[int, ...]) -> None:
    """Send the text a reply holds back, if any (before a step hook ends the process)."""
    if text or ids:
        emit(TextDelta(text, ids))


class Generation(Compaction):
    """One reply, or several in lanes."""

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
        progress = self._prompt_reporter(len(todo), t0, emit)
        head = todo[:-1]
        try:
            if head:
                self._decode(head, abortable=True, prompt=True, progress=progress)
            # The last prompt token alone (schedule.prompt_slices): a reply resumed from a
            # saved KV state evaluates it so, and the same one-token step on the same cache gives
            # the same logits, so a rollback under greedy decoding replies what the job replied.
            self._decode(todo[-1:], abortable=True, prompt=True, progress=None if progress is None
                         else lambda done, inside: progress(len(head) + done, inside))  # fmt: skip
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
        if total <= SHORT_PROMPT:
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
                if self._step_hook is not None:  # what it holds back: the text so far
                    self._step_hook("generate", partial(_send_pending, emit, pending_text,
                                                        tuple(pending_ids)))  # fmt: skip
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
