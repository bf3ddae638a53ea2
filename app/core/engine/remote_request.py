"""The completion request an inference server is sent, and what it is refused.

Apart from the engine (``remote.py``) because it is where servers differ: every sampling field is
spelled out, since a server's own defaults differ from the local engine's, and named as each kind
of server names it; what a server cannot sample as asked is refused
(:class:`UnsupportedRemotelyError`, also the engine's word for what needs llama.cpp's own KV
cache) rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.core.engine.remote_info import ServerInfo
from app.core.engine.types import ContextOverflowError, EngineError, SamplingSettings


class UnsupportedRemotelyError(EngineError):
    """The operation needs the local llama.cpp engine; the message says why."""


def completion_body(
    info: ServerInfo,
    prompt: Sequence[int],
    max_tokens: int,
    sampling: SamplingSettings,
    stop: Sequence[str],
    *,
    url: str,
    payload: Callable[[Sequence[int]], list[int] | str],
) -> dict[str, Any]:
    """The streamed ``/v1/completions`` request for ``prompt`` (its ``max_tokens`` already at
    least 1) on the server ``info`` describes, at ``url``; ``payload`` gives the prompt as the
    server takes it (token ids, or their text)."""
    n_ctx = info.n_ctx
    if len(prompt) >= n_ctx:
        raise ContextOverflowError(len(prompt), n_ctx, max_tokens)
    sampling.validate()
    body: dict[str, Any] = {
        "model": info.model, "prompt": payload(prompt),
        "max_tokens": min(max_tokens, n_ctx - len(prompt)), "stream": True,
        "stream_options": {"include_usage": True},
        **sampling_fields(info.kind, url, sampling),
    }  # fmt: skip
    if info.kind == "llama-server":
        body["cache_prompt"] = True  # a second question on the document reuses its prefix
    if stop:
        body["stop"] = list(stop)
    return body


def sampling_fields(kind: str, url: str, s: SamplingSettings) -> dict[str, Any]:
    """The request's sampling fields, always explicit: a server's own defaults differ
    (llama-cpp-python's server applies a repeat penalty of 1.1), and greedy replies must
    equal the same model's here. llama-server takes every field the local engine has; the
    others have no DRY and no window for the repeat penalty of their own choosing
    (llama-cpp-python's is the last 64 tokens, vLLM's the whole context), so asking them
    for one is refused rather than silently ignored."""
    fields: dict[str, Any] = {"temperature": s.temperature, "top_p": s.top_p,
                              "top_k": s.top_k, "min_p": s.min_p, "seed": s.seed}  # fmt: skip
    if kind == "vllm":
        fields["repetition_penalty"] = s.repeat_penalty
    else:
        fields["repeat_penalty"] = s.repeat_penalty
    if kind == "llama-server":
        fields.update(repeat_last_n=s.repeat_last_n, dry_multiplier=s.dry_multiplier,
                      dry_base=s.dry_base, dry_allowed_length=s.dry_allowed_length)  # fmt: skip
        if s.dry_last_n != -1:  # -1, the whole context, is the server's own default; it
            fields["dry_penalty_last_n"] = s.dry_last_n  # refuses the value said outright
        return fields
    if s.dry_multiplier > 0:
        raise UnsupportedRemotelyError(
            f"DRY sampling needs llama-server; {url} ({kind}) has none: set the DRY multiplier to 0"
        )
    default_window = SamplingSettings().repeat_last_n
    if s.repeat_penalty != 1.0 and s.repeat_last_n != default_window:
        raise UnsupportedRemotelyError(
            f"the repeat penalty's window can be chosen on llama-server only; {url} ({kind}) "
            f"uses its own: leave repeat-last-n at {default_window}"
        )
    return fields
