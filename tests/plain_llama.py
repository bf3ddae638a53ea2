"""llama-cpp-python on its own, under the engine's settings and schedule
(app/core/engine/schedule.py): what the engine's replies are compared with, token for token.

Only the schedule's *replay* is here: the settings and the slices come from the app's own
functions, so a change of either reaches both sides of the comparison."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import Llama

from app.core.engine.schedule import llama_kwargs, prompt_slices, slice_tokens
from app.core.engine.types import LoadSettings


class PlainLlama:
    """One ``Llama`` made with :func:`llama_kwargs`, replying greedily after evaluating each
    prompt in :func:`prompt_slices` (``Llama.eval`` of each slice, one ``llama_decode``) from an
    empty cache, and each generated token alone."""

    def __init__(self, llm: Llama) -> None:
        self.llm = llm
        self.slice = slice_tokens(llm.n_batch, 0)

    def _evaluate(self, prompt: Sequence[int]) -> None:
        llm = self.llm
        llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        done = 0
        for size in prompt_slices(len(prompt), self.slice):
            llm.eval(list(prompt[done : done + size]))
            done += size

    def greedy(self, prompt: Sequence[int], max_tokens: int) -> list[int]:
        llm = self.llm
        self._evaluate(prompt)
        reply: list[int] = []
        while len(reply) < max_tokens:
            token = llm.sample(top_k=1, temp=0.0, repeat_penalty=1.0)
            if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
                break
            reply.append(token)
            llm.eval([token])
        return reply


    def leads(self, prompt: Sequence[int], max_tokens: int) -> tuple[list[int], list[float]]:
        """The greedy reply (end of generation included, if it comes) and, at each of its
        tokens, by how much its logit led the next best: how far other kernels would have to
        move the logits to change the reply."""
        llm = self.llm
        self._evaluate(prompt)
        reply: list[int] = []
        leads: list[float] = []
        while len(reply) < max_tokens:
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                           shape=(llm.n_vocab(),))  # fmt: skip
            second, first = np.partition(logits, -2)[-2:]
            token = int(np.argmax(logits))
            reply.append(token)
            leads.append(float(first - second))
            if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
                break
            llm.eval([token])
        return reply, leads


@contextlib.contextmanager
def plain_llama(model: Path, settings: LoadSettings) -> Iterator[PlainLlama]:
    llm = Llama(**llama_kwargs(str(model), settings, 0))
    try:
        yield PlainLlama(llm)
    finally:
        llm.close()
