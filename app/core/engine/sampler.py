"""llama.cpp's sampler chain for :class:`~app.core.engine.types.SamplingSettings`.

Built in one place so that a single reply (child.py) and each reply of the lanes (lanes.py)
choose their tokens alike: with one lane the lanes' replies are the single reply's, token for
token. Lives only in the engine child (llama.cpp is imported when a chain is built).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.core.engine.types import SamplingSettings

# DRY does not count a repeat across these (llama.cpp's defaults): lines, "key:", quotes and
# markdown emphasis repeat legitimately.
DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")


def build_sampler(
    model: Any, n_ctx: int, s: SamplingSettings, history: Sequence[int] = ()
) -> Any:
    """llama.cpp's sampler chain for ``s`` on ``model`` (a ``llama_cpp._internals.LlamaModel``)
    in a context of ``n_ctx``, in llama.cpp's own order (repetition penalty, DRY, top-k, top-p,
    min-p, temperature, the seeded draw; greedy at temperature 0), having seen ``history`` (the
    prompt): the penalties' windows count the prompt's tokens too, as llama-server's do, so a
    server and this engine sample alike. The caller closes it."""
    from llama_cpp._internals import LlamaSampler  # noqa: PLC0415 (llama.cpp: engine process only)

    sampler = LlamaSampler()
    windows = []
    if s.repeat_penalty != 1.0 and s.repeat_last_n != 0:
        last_n = n_ctx if s.repeat_last_n < 0 else s.repeat_last_n
        sampler.add_penalties(model.n_vocab(), last_n, s.repeat_penalty, 0.0, 0.0)
        windows.append(last_n)
    if s.dry_multiplier > 0 and s.dry_last_n != 0:
        last_n = n_ctx if s.dry_last_n < 0 else s.dry_last_n
        sampler.add_dry(model, s.dry_multiplier, s.dry_base, s.dry_allowed_length,
                        last_n, list(DRY_SEQUENCE_BREAKERS))  # fmt: skip
        windows.append(last_n)
    if s.greedy:
        sampler.add_greedy()
    else:
        if s.top_k > 0:
            sampler.add_top_k(s.top_k)
        if s.top_p < 1:
            sampler.add_top_p(s.top_p, 1)
        if s.min_p > 0:
            sampler.add_min_p(s.min_p, 1)
        sampler.add_temp(s.temperature)
        sampler.add_dist(s.seed)
    if windows:
        for tok in list(history)[-max(windows):]:
            sampler.accept(tok)
    return sampler
