"""What an inference server is and reports, read from its answers: :class:`ServerInfo` (each
figure with where it comes from), the kind of server and its context from ``/props`` and
``/v1/models``, the KV cache's figures from ``/slots`` and ``/metrics``, a "prompt too long"
as the engine's own refusal, and the lines that describe a server to a person. What a server
cannot do that the local engine can is said here once (``NO_KV_STATE``, ``NO_KV_SHIFT``,
``NO_AUDIT``)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.core.engine.remote_http import ServerError
from app.core.engine.types import ContextOverflowError
from app.core.planning.frame import ServerTemplate

NOT_REPORTED = "not reported by this server"
NO_KV_STATE = (
    "saving and restoring the KV state needs llama.cpp's own cache, which a server does not "
    "hand out over HTTP"
)
NO_KV_SHIFT = (
    "removing or shifting KV positions needs llama.cpp's own cache, which a server does not "
    "let a client edit"
)
NO_AUDIT = (
    "the faithfulness audit reads llama.cpp's KV cache position by position, which a server "
    "does not expose"
)


@dataclass(frozen=True)
class ServerInfo:
    """What :meth:`RemoteEngine.connect` found out about the server, each with its source."""

    url: str
    kind: str  # "llama-server", "llama-cpp-python", "vllm" or "openai-compatible"
    model: str  # the model id sent with every request
    n_ctx: int
    n_ctx_source: str  # "/props", "/v1/models max_model_len" or "given (--n-ctx)"
    n_ctx_train: int | None  # as the server reports it, when it does
    tokenizer: str  # where token counts come from
    exact_counts: bool
    chat_template: str  # where the chat template comes from; "" when prompts are plain
    slots: int | None  # requests the server serves in parallel, when it says
    kv_source: str  # "/slots", "/metrics", "" (not reported)
    accepts_token_ids: bool  # prompts may be sent as token ids
    warnings: tuple[str, ...] = ()
    # What frames a document, for plans made elsewhere (the window's): the local GGUF's path,
    # the server's template, or None (plain prompts)
    frame: str | ServerTemplate | None = None

    @property
    def unsupported(self) -> dict[str, str]:
        """Feature -> why it is off for this engine."""
        return {"kv_state": NO_KV_STATE, "kv_shift": NO_KV_SHIFT, "audit": NO_AUDIT}

    def kv_figures(self) -> str:
        return f"from {self.kv_source}" if self.kv_source else NOT_REPORTED

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url, "kind": self.kind, "model": self.model, "n_ctx": self.n_ctx,
            "n_ctx_source": self.n_ctx_source, "n_ctx_train": self.n_ctx_train,
            "tokenizer": self.tokenizer, "exact_counts": self.exact_counts,
            "chat_template": self.chat_template or "none: plain prompts",
            "parallel_slots": self.slots, "kv_figures": self.kv_figures(),
            "prompts_as_token_ids": self.accepts_token_ids, "unsupported": self.unsupported,
            "warnings": list(self.warnings),
        }  # fmt: skip


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def identify(props: Any, entry: dict[str, Any]
              ) -> tuple[str, int | None, str, int | None, str | None]:  # fmt: skip
    """(kind, n_ctx, its source, parallel slots, chat template) from /props and the model's
    /v1/models entry."""
    if isinstance(props, dict) and isinstance(props.get("default_generation_settings"), dict):
        settings = props["default_generation_settings"]
        n_ctx = _positive_int(settings.get("n_ctx"))
        template = props.get("chat_template")
        return ("llama-server", n_ctx, "/props", _positive_int(props.get("total_slots")),
                template if isinstance(template, str) and template else None)  # fmt: skip
    max_len = _positive_int(entry.get("max_model_len"))
    if max_len is not None:
        return "vllm", max_len, "/v1/models max_model_len", None, None
    return "openai-compatible", None, "", None, None


def hidden_paths_note(host: str, n_ctx: int, tokenizer: str | None, kv_source: str) -> str:
    """Said once for a server that answers only the OpenAI paths, as a gateway in front of
    servers does (LiteLLM's proxy): which of llama.cpp's own it hides, and where the figures
    come from instead (``tokenizer``: the exact counts' source, None for estimates, which are
    warned of apart)."""
    instead = [f"the context is the {n_ctx:,} tokens given"]
    if tokenizer:
        instead.append(f"token counts come from the {tokenizer}")
    instead.append(
        f"KV figures come from {kv_source}" if kv_source else "KV figures are not reported"
    )
    return (
        f"{host} answers none of /props, /tokenize and /slots (a gateway in front of "
        f"servers hides them): {', '.join(instead[:-1])} and {instead[-1]}"
    )


def n_ctx_train(entry: dict[str, Any]) -> int | None:
    meta = entry.get("meta")
    if isinstance(meta, dict) and _positive_int(meta.get("n_ctx_train")):
        return int(meta["n_ctx_train"])
    return None


def kv_from_slots(slots: Any) -> int | None:
    """Cells in use over every slot, from llama-server's /slots (``n_past`` per slot, or the
    prompt and decoded counts of newer versions)."""
    if not isinstance(slots, list):
        return None
    total, seen = 0, False
    for slot in slots:
        if not isinstance(slot, dict):
            continue
        if isinstance(slot.get("n_past"), int):
            total += max(0, slot["n_past"])
            seen = True
            continue
        prompt = slot.get("n_prompt_tokens") or slot.get("n_prompt_tokens_processed")
        nxt = slot.get("next_token")
        if isinstance(nxt, list):  # newer llama-server: one entry per sequence
            nxt = nxt[0] if nxt else None
        decoded = nxt.get("n_decoded") if isinstance(nxt, dict) else None  # [1]: not a figure
        if isinstance(prompt, int) or isinstance(decoded, int):
            total += int(prompt or 0) + int(decoded or 0)
            seen = True
    return total if seen else None


_KV_TOKENS = ("llamacpp:kv_cache_tokens",)
_KV_RATIO = ("llamacpp:kv_cache_usage_ratio", "vllm:kv_cache_usage_perc",
             "vllm:gpu_cache_usage_perc")  # fmt: skip
# A /metrics page is read up to this many characters (vLLM's is about 100 kB); the server, or
# anyone on the path of plain http://, decides what it holds.
MAX_METRICS_CHARS = 1 << 20


def _metric_lines(text: str) -> Iterator[tuple[str, str]]:
    r"""(name, value) of each sample line of Prometheus text that names a KV figure, in one pass
    of string operations. A regex over the page (``\{[^}]*\}`` under MULTILINE) backtracked
    quadratically on lines like ``a{``: 1.25 s for 96 kB, holding the GIL, minutes for 1 MB."""
    wanted = (*_KV_TOKENS, *_KV_RATIO)
    for line in text[:MAX_METRICS_CHARS].splitlines():
        if not line.startswith(wanted):
            continue
        end = len(line)
        for mark in ("{", " ", "\t"):
            at = line.find(mark)
            if 0 <= at < end:
                end = at
        name, rest = line[:end], line[end:]
        if name not in wanted:
            continue  # a longer name that starts like one ("…_tokens_total")
        if rest.startswith("{"):
            close = rest.find("}")
            if close < 0:
                continue
            rest = rest[close + 1 :]
        fields = rest.split()
        if fields and (not rest[:1].isspace() or len(fields) > 2):
            continue  # "name{…}x 1" or a trailing word: not a sample line
        if fields:
            yield name, fields[0]


def kv_from_metrics(text: str) -> tuple[int | None, float] | None:
    """(cells used, share of the cache in use) from Prometheus text, or None without either."""
    values: dict[str, float] = {}
    for name, value in _metric_lines(text):
        try:
            number = float(value)
        except ValueError:
            continue
        if math.isnan(number):  # nothing measured yet
            continue
        # one line per label set (model, engine): tokens add up, a share is the fullest one's
        values[name] = (
            values.get(name, 0.0) + number
            if name in _KV_TOKENS
            else max(values.get(name, 0.0), number)
        )
    tokens = next((values[n] for n in _KV_TOKENS if n in values), None)
    ratio = next((values[n] for n in _KV_RATIO if n in values), None)
    if tokens is None and ratio is None:
        return None
    return (int(tokens) if tokens is not None else None, float(ratio or 0.0))


_CONTEXT_LIMIT = re.compile(r"(?:maximum context length|context (?:window|size)) (?:is|of) (\d+)")
_PROMPT_SIZE = re.compile(r"\((\d+) in your prompt")


def overflow_error(exc: ServerError, body: dict[str, Any]) -> ContextOverflowError | None:
    """The server's "prompt too long" as the engine's own refusal, with its numbers."""
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    if isinstance(error, dict):
        n_ctx, n_prompt = error.get("n_ctx"), error.get("n_prompt_tokens")
        if isinstance(n_ctx, int) and isinstance(n_prompt, int):
            return ContextOverflowError(n_prompt, n_ctx, int(body.get("max_tokens") or 0))
    text = str(exc)
    limit = _CONTEXT_LIMIT.search(text)
    if exc.status == 400 and limit:
        prompt = _PROMPT_SIZE.search(text)
        n_prompt = int(prompt.group(1)) if prompt else len(body.get("prompt") or ())
        return ContextOverflowError(n_prompt, int(limit.group(1)), int(body.get("max_tokens") or 0))
    return None


def describe(info: ServerInfo) -> list[str]:
    """Lines for people: what the server is and where each figure comes from."""
    lines = [
        f"server: {info.url} ({info.kind}), model {info.model}",
        f"context: {info.n_ctx:,} tokens ({info.n_ctx_source})",
        f"token counts: {info.tokenizer}" + ("" if info.exact_counts else " — estimates"),
        f"chat template: {info.chat_template or 'none: prompts are plain text'}",
        f"parallel slots: {info.slots if info.slots else NOT_REPORTED}",
        f"KV figures: {info.kv_figures()}",
    ]
    lines += [f"not available remotely: {reason}" for reason in info.unsupported.values()]
    return lines
