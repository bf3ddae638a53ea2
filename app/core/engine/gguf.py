"""What a GGUF file says about its model: the model card, derived from a checked header.

The header itself is read by :mod:`app.core.engine.gguf_reader`, which trusts nothing in the
file; this module turns what passed its checks into a :class:`ModelInfo` (size, attention
layout, KV cache cost per token, whether it is a base model), refusing values no real model has.
Callers import both from here: the reader's names are re-exported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gguf.constants import GGMLQuantizationType, LlamaFileType

from app.core.engine.gguf_reader import (
    MAX_ARRAY_ITEMS,
    MAX_CONTEXT_LENGTH,
    MAX_HEADER_MEMORY,
    MAX_HEADS,
    MAX_KV_COUNT,
    MAX_LAYERS,
    MAX_TEMPLATE_BYTES,
    MAX_TEMPLATES_BYTES,
    MAX_TENSOR_COUNT,
    MAX_VOCAB,
    TEMPLATE_KEY,
    ArrayValue,
    FileIdentity,
    GGUFError,
    GGUFFile,
    SkippedString,
    TensorInfo,
    read_gguf,
)

# The reader's names that callers import from here, with this module's own.
__all__ = [
    "BASE_MODEL_NOTE",
    "KV_CACHE_TYPES",
    "KV_CELL_PAD",
    "MAX_ARRAY_ITEMS",
    "MAX_HEADER_MEMORY",
    "MAX_HEAD_DIM",
    "MAX_KV_COUNT",
    "MAX_LAYERS",
    "MAX_SPLIT_COUNT",
    "MAX_TEMPLATES_BYTES",
    "MAX_TEMPLATE_BYTES",
    "MAX_TENSOR_COUNT",
    "MAX_WIDTH",
    "SWA_ARCHITECTURES",
    "TEMPLATE_KEY",
    "ArrayValue",
    "CheckedFile",
    "CheckedModel",
    "FileIdentity",
    "GGUFError",
    "GGUFFile",
    "ModelInfo",
    "SkippedString",
    "TensorInfo",
    "adds_space_prefix",
    "base_model_reason",
    "check_parts",
    "inspect_model",
    "model_info",
    "read_gguf",
]

# Bytes one element of each KV cache type takes (block types: bytes per block / block size).
KV_CACHE_TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q5_1": (32, 24),
    "q5_0": (32, 22),
    "q4_1": (32, 20),
    "q4_0": (32, 18),
    "iq4_nl": (32, 18),
}


# Sliding-window attention as llama.cpp (the one llama-cpp-python 0.3.36 vendors) reads it, per
# architecture: the period n of its default layer pattern (layer i uses the window when
# i % n < n - 1, or with ``dense_first`` when i % n != 0; 0: every layer), the window it assumes
# when the file gives none (None: no window, full attention), and the kind of window. A
# ``<arch>.attention.sliding_window_pattern`` key overrides the pattern: one bool per layer, or
# the period. Architectures not listed run with full attention in llama.cpp even when their GGUF
# names a window (Phi-3 and Mistral-as-llama, for example); the card says so.
SWA_ARCHITECTURES: dict[str, tuple[int, bool, int | None, str]] = {
    "gemma2": (2, False, 4096, "standard"),
    "gemma3": (6, False, None, "standard"),
    "gemma3n": (5, False, None, "standard"),
    "gemma4": (0, False, None, "standard"),  # its files carry the per-layer pattern
    "gemma4-assistant": (0, False, None, "standard"),
    "gemma-embedding": (6, False, None, "symmetric"),
    "cohere2": (4, False, None, "standard"),
    "cohere2moe": (4, True, None, "standard"),
    "exaone4": (4, False, None, "standard"),
    "exaone-moe": (4, False, None, "standard"),
    "gpt-oss": (2, False, None, "standard"),
    "llama4": (4, False, None, "chunked"),
    "olmo2": (4, False, None, "standard"),
    "afmoe": (4, False, None, "standard"),
    "plamo3": (8, False, None, "standard"),
    "smallthinker": (4, True, None, "standard"),
    "mellum": (4, False, None, "standard"),
    "muse-glimmer": (4, False, None, "standard"),
    "laguna": (4, True, None, "standard"),
    "modern-bert": (3, True, None, "symmetric"),
    # Mistral-style: the window on every layer
    "deepseek4": (0, False, None, "standard"),
    "dflash": (0, False, None, "standard"),
}
KV_CELL_PAD = 256  # llama.cpp allocates KV cells in multiples of this (GGML_PAD in llama_context)
# Bounds of the sizes the memory estimate multiplies, far above any real model's (an embedding
# of 16,384 and a feed-forward layer of 53,248 in Llama 3.1 405B; heads of 576 in DeepSeek's).
MAX_WIDTH = 1 << 20
MAX_HEAD_DIM = 1 << 16
MAX_SPLIT_COUNT = 65535  # llama.cpp reads split.count as a uint16
BASE_MODEL_NOTE = "base model: replies continue the text; instructions may be ignored"
_BASE_WORD = re.compile(r"(?<![a-z0-9])base(?![a-z0-9])", re.IGNORECASE)
_TUNED_WORD = re.compile(
    r"(?<![a-z0-9])(instruct|chat|it|sft|dpo|rlhf|assistant|thinking)(?![a-z0-9])", re.IGNORECASE
)


@dataclass(frozen=True)
class ModelInfo:
    """The model card: what a person needs to know before loading a GGUF file."""

    path: str
    file_size: int
    gguf_version: int
    architecture: str
    name: str | None
    parameters: int
    quantization: str
    n_layers: int | None
    n_embd: int | None
    n_head: int | None
    n_head_kv: int | None
    head_dim_k: int | None
    head_dim_v: int | None
    n_ctx_train: int | None
    vocab_size: int | None
    tokenizer_model: str | None
    tokenizer_pre: str | None
    chat_template: str | None
    bos_token_id: int | None
    eos_token_id: int | None
    n_tensors: int
    kv_heads_per_layer: tuple[int, ...] = ()
    # Attention: the window in tokens where llama.cpp applies one (None: full attention on every
    # layer), the layers that use it (indices), its kind ("standard", "chunked", "symmetric"),
    # the head sizes of those layers when they differ, and a note where the file names a window
    # llama.cpp does not apply.
    sliding_window: int | None = None
    swa_layers: tuple[int, ...] = ()
    swa_type: str | None = None
    head_dim_k_swa: int | None = None
    head_dim_v_swa: int | None = None
    attention_note: str | None = None
    # Why replies continue the text rather than follow instructions (None: a chat/instruct
    # model): no chat template, or the GGUF's own name for it says "base".
    base_model_reason: str | None = None
    # For the memory estimate: the bytes of tensor data (the weights llama.cpp maps; 0: not
    # known, the file's size stands in) and the feed-forward width (None: not in the file).
    tensor_bytes: int = 0
    n_ff: int | None = None

    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template)

    @property
    def is_base_model(self) -> bool:
        """True for a model that continues text (no chat template, or named a base model):
        prompts are framed for completion, and people are told at load."""
        return self.base_model_reason is not None

    @property
    def n_swa_layers(self) -> int:
        return len(self.swa_layers)

    def describe_attention(self) -> str:
        """One line for the model card: "sliding window of 512 tokens on 15 of 18 layers (5 of
        every 6); full attention on 3" or "full attention on all 30 layers"."""
        n = self.n_layers or len(self.kv_heads_per_layer)
        if not self.swa_layers or self.sliding_window is None:
            text = f"full attention on all {n} layers" if n else "full attention"
            return f"{text} ({self.attention_note})" if self.attention_note else text
        kind = "" if self.swa_type in (None, "standard") else f"{self.swa_type} "
        if len(self.swa_layers) == n:
            return f"{kind}sliding window of {self.sliding_window:,} tokens on all {n} layers"
        period = _period(self.swa_layers, n)
        every = f" ({period - 1} of every {period})" if period else ""
        return (
            f"{kind}sliding window of {self.sliding_window:,} tokens on "
            f"{len(self.swa_layers)} of {n} layers{every}; full attention on "
            f"{n - len(self.swa_layers)}"
        )

    def _layer_bytes(self, cache_type: str) -> tuple[int, int] | None:
        """Bytes one KV cell takes on the full-attention layers and on the windowed layers."""
        if cache_type not in KV_CACHE_TYPES:
            raise ValueError(
                f"unknown KV cache type {cache_type!r} (known: {', '.join(KV_CACHE_TYPES)})"
            )
        if not self.kv_heads_per_layer or self.head_dim_k is None or self.head_dim_v is None:
            return None
        block, size = KV_CACHE_TYPES[cache_type]
        windowed = set(self.swa_layers)
        k_swa = self.head_dim_k_swa or self.head_dim_k
        v_swa = self.head_dim_v_swa or self.head_dim_v
        full = swa = 0
        for layer, heads in enumerate(self.kv_heads_per_layer):
            if layer in windowed:
                swa += heads * (k_swa + v_swa)
            else:
                full += heads * (self.head_dim_k + self.head_dim_v)
        return full * size // block, swa * size // block

    def kv_bytes_per_token(self, cache_type: str = "f16") -> int | None:
        """Bytes of K and V cache llama.cpp allocates per context token, summed over layers;
        None if unknown.

        The engine keeps llama.cpp's full-size cache for the windowed layers (``swa_full``, the
        default of llama-cpp-python 0.3.36, set explicitly at load): the app's ring, prefix reuse
        and rollback need every position of every layer. So every layer costs its K and V per
        token, windowed or not, and this times n_ctx is what llama.cpp allocates (tested against
        its own figure); :meth:`kv_cache_bytes` gives the smaller cache of ``swa_full=False``."""
        split = self._layer_bytes(cache_type)
        return None if split is None else split[0] + split[1]

    def kv_cache_bytes(
        self, n_ctx: int, cache_type: str = "f16", *, swa_full: bool = True, n_ubatch: int = 512,
        n_seq: int = 1,
    ) -> int | None:  # fmt: skip
        """The KV cache llama.cpp allocates for a context of ``n_ctx`` tokens; None if unknown.
        llama.cpp rounds the context up to a multiple of 256 cells (llama_context); without
        ``swa_full`` the windowed layers get only ``n_swa * n_seq + n_ubatch`` cells, rounded
        the same way (llama_kv_cache_iswa)."""
        split = self._layer_bytes(cache_type)
        if split is None:
            return None
        full, swa = split
        cells = _pad(n_ctx, KV_CELL_PAD)
        swa_cells = cells
        if not swa_full and self.swa_layers and self.sliding_window:
            swa_cells = min(cells, _pad(self.sliding_window * n_seq + n_ubatch, KV_CELL_PAD))
        return full * cells + swa * swa_cells

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (the chat template is reported by presence and length only)."""
        return {
            "path": self.path,
            "file_size": self.file_size,
            "gguf_version": self.gguf_version,
            "architecture": self.architecture,
            "name": self.name,
            "parameters": self.parameters,
            "quantization": self.quantization,
            "n_layers": self.n_layers,
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_head_kv": self.n_head_kv,
            "head_dim_k": self.head_dim_k,
            "head_dim_v": self.head_dim_v,
            "n_ctx_train": self.n_ctx_train,
            "vocab_size": self.vocab_size,
            "tokenizer_model": self.tokenizer_model,
            "tokenizer_pre": self.tokenizer_pre,
            "has_chat_template": self.has_chat_template,
            "chat_template_chars": len(self.chat_template or ""),
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "n_tensors": self.n_tensors,
            "tensor_bytes": self.tensor_bytes,
            "n_ff": self.n_ff,
            "kv_bytes_per_token": {t: self.kv_bytes_per_token(t) for t in KV_CACHE_TYPES},
            "attention": self.describe_attention(),
            "sliding_window": self.sliding_window,
            "swa_layers": list(self.swa_layers),
            "swa_type": self.swa_type,
            "is_base_model": self.is_base_model,
            "base_model_reason": self.base_model_reason,
        }


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _quantization_name(gf: GGUFFile) -> str:
    ftype = gf.get("general.file_type")
    if isinstance(ftype, int):
        try:
            return LlamaFileType(ftype).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            return f"file type {ftype}"
    # Older converters omit file_type: name the most common tensor type by bytes.
    by_type: dict[int, int] = {}
    for t in gf.tensors:
        by_type[t.ggml_type] = by_type.get(t.ggml_type, 0) + t.n_bytes
    if not by_type:
        return "unknown"
    return GGMLQuantizationType(max(by_type, key=by_type.__getitem__)).name


def _arch_count(gf: GGUFFile, suffix: str, limit: int, bounds: str) -> int | None:
    """``<arch>.<suffix>`` as an integer from 1 to ``limit``; None when absent. Otherwise one
    sentence, which ``bounds`` ends by saying what a real model has."""
    value = gf.arch_value(suffix)
    if value is None:
        return None
    n = _int_or_none(value)
    if n is None or not 1 <= n <= limit:
        raise GGUFError(f"{gf.architecture}.{suffix} is {value!r}; {bounds}")
    return n


def _arch_size(gf: GGUFFile, suffix: str, limit: int, what: str) -> int | None:
    """``<arch>.<suffix>``, a size the memory estimate multiplies, from 1 to ``limit``; None when
    absent or not an integer (the estimate then assumes a default)."""
    value = gf.arch_value(suffix)
    if _int_or_none(value) is None:
        return None
    return _arch_count(gf, suffix, limit, f"{what} is 1 to {limit:,} in a real model")


def _head_size(gf: GGUFFile, suffix: str) -> int | None:
    return _arch_size(gf, suffix, MAX_HEAD_DIM, "a head size")


def _layer_count(gf: GGUFFile) -> int | None:
    return _arch_count(gf, "block_count", MAX_LAYERS, f"a model has 1 to {MAX_LAYERS} layers")


def _context_length(gf: GGUFFile) -> int | None:
    bounds = f"a model is trained on 1 to {MAX_CONTEXT_LENGTH:,} tokens of context"
    return _arch_count(gf, "context_length", MAX_CONTEXT_LENGTH, bounds)


def _per_layer(gf: GGUFFile, suffix: str, value: Any, n_layers: int | None) -> tuple[int, ...]:
    """A head count given once for all layers or as one value per layer, checked either way."""
    key = f"{gf.architecture}.{suffix}"
    if value is None:
        return ()
    if isinstance(value, ArrayValue):
        if value.items is None or (n_layers is not None and value.count != n_layers):
            raise GGUFError(f"{key} lists {value.count:,} values for {n_layers} layers")
        items = value.items
    else:
        items = (value,) * (n_layers or 0)
    for v in items:
        if _int_or_none(v) is None or not 0 <= v <= MAX_HEADS:
            raise GGUFError(f"{key} holds {v!r}, not a head count")
    return tuple(items)


def _period(layers: tuple[int, ...], n: int) -> int | None:
    """The n of "n - 1 of every n layers" when ``layers`` follow such a pattern, else None."""
    chosen = set(layers)
    for period in range(2, n + 1):
        late = {i for i in range(n) if i % period < period - 1}
        early = {i for i in range(n) if i % period != 0}
        if chosen in (late, early):
            return period
    return None


def _attention(gf: GGUFFile, n_layers: int | None) -> dict[str, Any]:
    """Which layers attend through a sliding window, and how wide, as llama.cpp decides it
    (see :data:`SWA_ARCHITECTURES`); the ModelInfo fields, by name."""
    arch = gf.architecture
    key = f"{arch}.attention.sliding_window"
    window = gf.get(key)
    if window is not None and (_int_or_none(window) is None
                               or not 0 <= window <= MAX_CONTEXT_LENGTH):  # fmt: skip
        raise GGUFError(f"{key} is {window!r}, not a number of tokens")
    rule = SWA_ARCHITECTURES.get(arch)
    if rule is None:
        if window:
            return {"attention_note": f"the file gives a window of {window:,} tokens, which "
                                      f"llama.cpp does not apply to {arch}"}  # fmt: skip
        return {}
    period, dense_first, default_window, kind = rule
    window = default_window if window is None else window
    if not window:
        return {}
    n = n_layers or 0
    pattern = gf.arch_value("attention.sliding_window_pattern")
    if isinstance(pattern, ArrayValue):
        if pattern.items is None or pattern.count != n:
            raise GGUFError(
                f"{arch}.attention.sliding_window_pattern lists {pattern.count:,} values for "
                f"{n} layers"
            )
        layers = tuple(i for i, v in enumerate(pattern.items) if v)
    else:
        if pattern is not None:
            given = _int_or_none(pattern)
            if given is None or not 0 <= given <= MAX_LAYERS:
                raise GGUFError(f"{arch}.attention.sliding_window_pattern is {pattern!r}")
            period = given
        layers = tuple(
            i for i in range(n)
            if period == 0 or (i % period != 0 if dense_first else i % period < period - 1)
        )  # fmt: skip
    return {
        "sliding_window": window,
        "swa_layers": layers,
        "swa_type": kind,
        "head_dim_k_swa": _head_size(gf, "attention.key_length_swa"),
        "head_dim_v_swa": _head_size(gf, "attention.value_length_swa"),
    }


def adds_space_prefix(gf: GGUFFile) -> bool:
    """Whether llama.cpp puts a space before a text it tokenizes from the start: SentencePiece
    does unless the file says otherwise (Llama 2, Mistral; not Gemma); BPE never does."""
    value = gf.get("tokenizer.ggml.add_space_prefix")
    return gf.get("tokenizer.ggml.model") == "llama" and bool(True if value is None else value)


def base_model_reason(metadata: Mapping[str, Any]) -> str | None:
    """Why a model would continue text rather than follow instructions, or None.

    ``metadata`` is a GGUF's (this reader's, or llama-cpp-python's ``Llama.metadata``, whose
    values are strings). A model with no chat template never learned a chat frame; a template
    alone does not make a chat model, though (base models of Qwen and others ship one), so a
    ``general.finetune`` or ``general.name`` that says "base" (and not "instruct", "chat", "it"…)
    counts too. ``general.base_model.*`` names what a model was derived *from*: a fine-tune."""
    template = metadata.get(TEMPLATE_KEY)
    if not isinstance(template, str) or not template.strip():
        return "it has no chat template"
    for key in ("general.finetune", "general.name"):
        value = metadata.get(key)
        if isinstance(value, str) and _BASE_WORD.search(value) and not _TUNED_WORD.search(value):
            return f"its GGUF names it a base model ({key} is {value!r})"
    return None


def _ff_width(gf: GGUFFile, n_layers: int | None) -> int | None:
    """The widest feed-forward layer (some models give one width per layer; 0: a layer without
    one), each width bounded before the estimate multiplies it."""
    key = f"{gf.architecture}.feed_forward_length"
    value = gf.get(key)
    items = (value.items or ())[: n_layers or None] if isinstance(value, ArrayValue) else (value,)
    widths = [w for w in items if _int_or_none(w) is not None]
    for w in widths:
        if not 0 <= w <= MAX_WIDTH:
            raise GGUFError(f"{key} holds {w!r}; a feed-forward width is 0 to {MAX_WIDTH:,}")
    return max(widths) if widths else None


def model_info(gf: GGUFFile) -> ModelInfo:
    """Derive the model card from a checked header; implausible values raise GGUFError."""
    n_layers = _layer_count(gf)
    n_embd = _arch_size(gf, "embedding_length", MAX_WIDTH, "an embedding width")
    n_head_raw = gf.arch_value("attention.head_count")
    n_head_kv_raw = gf.arch_value("attention.head_count_kv", n_head_raw)
    heads = _per_layer(gf, "attention.head_count", n_head_raw, n_layers)
    kv_heads = _per_layer(gf, "attention.head_count_kv", n_head_kv_raw, n_layers)
    n_head = max(heads) if heads else None
    head_k = _head_size(gf, "attention.key_length")
    head_v = _head_size(gf, "attention.value_length")
    if head_k is None and n_embd and n_head:
        head_k = n_embd // n_head
    if head_v is None:
        head_v = head_k

    tokens = gf.get("tokenizer.ggml.tokens")
    vocab = tokens.count if isinstance(tokens, ArrayValue) else None
    if vocab is None:
        vocab = _arch_size(gf, "vocab_size", MAX_VOCAB, "a vocabulary size")
    template = gf.get("tokenizer.chat_template")
    name = gf.get("general.name")
    return ModelInfo(
        path=str(gf.path),
        file_size=gf.file_size,
        gguf_version=gf.version,
        architecture=gf.architecture,
        name=str(name) if isinstance(name, str) else None,
        parameters=sum(t.n_elements for t in gf.tensors),
        quantization=_quantization_name(gf),
        n_layers=n_layers,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=max(kv_heads) if kv_heads else None,
        head_dim_k=head_k,
        head_dim_v=head_v,
        n_ctx_train=_context_length(gf),
        vocab_size=vocab,
        tokenizer_model=_str_or_none(gf.get("tokenizer.ggml.model")),
        tokenizer_pre=_str_or_none(gf.get("tokenizer.ggml.pre")),
        chat_template=template if isinstance(template, str) else None,
        bos_token_id=_int_or_none(gf.get("tokenizer.ggml.bos_token_id")),
        eos_token_id=_int_or_none(gf.get("tokenizer.ggml.eos_token_id")),
        n_tensors=len(gf.tensors),
        kv_heads_per_layer=kv_heads,
        base_model_reason=base_model_reason(gf.metadata),
        tensor_bytes=_tensor_bytes(gf),
        n_ff=_ff_width(gf, n_layers),
        **_attention(gf, n_layers),
    )


def inspect_model(path: str | os.PathLike[str]) -> ModelInfo:
    """Check a GGUF file and return its model card; raise GGUFError with one clear sentence."""
    return model_info(read_gguf(path))


def _tensor_bytes(gf: GGUFFile) -> int:
    return max(0, gf.file_size - gf.data_offset) if gf.tensors else 0


@dataclass(frozen=True)
class CheckedFile:
    """One file llama.cpp will open for a model, as it was when its header passed the checks."""

    path: str  # absolute, links not resolved: llama.cpp finds a split's parts by their names
    identity: FileIdentity


@dataclass(frozen=True)
class CheckedModel:
    """A model's card (its size and weights summed over a split's parts) and every file that
    llama.cpp will open for it, in the order it opens them."""

    info: ModelInfo
    files: tuple[CheckedFile, ...]


def check_parts(path: str | os.PathLike[str]) -> CheckedModel:
    """Check every file llama.cpp opens for ``path``: the model's header and, for a split model,
    each other part's header too (llama.cpp's own parser reads them all), before any of them
    reaches it; raise GGUFError with one clear sentence otherwise."""
    first = Path(os.path.abspath(path))
    gf = read_gguf(first)
    info = model_info(gf)
    names = _part_paths(first, gf)
    parts = [gf]
    for number, name in enumerate(names[1:], start=2):
        parts.append(_read_part(name, number, len(names)))
    files = tuple(CheckedFile(str(n), _identity(p)) for n, p in zip(names, parts, strict=True))
    if len(parts) > 1:
        info = replace(
            info,
            file_size=sum(p.file_size for p in parts),
            parameters=sum(t.n_elements for p in parts for t in p.tensors),
            n_tensors=sum(len(p.tensors) for p in parts),
            tensor_bytes=sum(_tensor_bytes(p) for p in parts),
        )
    return CheckedModel(info, files)


def _identity(gf: GGUFFile) -> FileIdentity:
    assert gf.identity is not None  # read_gguf sets it
    return gf.identity


def _split_count(gf: GGUFFile) -> int:
    """How many files the model is split into, as llama.cpp reads ``split.count`` (1: whole)."""
    raw = gf.get("split.count")
    if raw is None:
        return 1
    value = _int_or_none(raw)
    if value is None or not 0 <= value <= MAX_SPLIT_COUNT:
        raise GGUFError(f"split.count is {raw!r}; a split model has 2 to {MAX_SPLIT_COUNT:,} "
                        "parts")  # fmt: skip
    return max(1, value)


def _part_paths(first: Path, gf: GGUFFile) -> list[Path]:
    """The files llama.cpp opens for the model whose first file is ``first``: the parts of a
    split are named as llama_split_path names them, beside the first."""
    count = _split_count(gf)
    if count == 1:
        return [first]
    number = gf.get("split.no")
    if number != 0:
        shown = f"part {number + 1}" if _int_or_none(number) is not None else f"split.no {number!r}"
        raise GGUFError(f"{first.name} is {shown} of a model split into {count:,} files; "
                        "load its first part")  # fmt: skip
    suffix = f"-00001-of-{count:05d}.gguf"
    if not first.name.endswith(suffix):
        raise GGUFError(f"{first.name} is the first of {count:,} parts, but its name does not "
                        f"end in {suffix}, so llama.cpp cannot find the others")  # fmt: skip
    prefix = str(first)[: -len(suffix)]
    return [Path(f"{prefix}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def _read_part(path: Path, number: int, count: int) -> GGUFFile:
    """Part ``number`` (from 1) of a split, checked as llama.cpp reads it: a header the reader
    accepts, and ``split.no`` a uint16 naming this part (llama.cpp asserts that type)."""
    where = f"part {number} of {count:,} ({path.name})"
    try:
        gf = read_gguf(path)
    except GGUFError as exc:
        raise GGUFError(f"{where}: {exc}") from None
    kind, value = gf.value_type("split.no"), gf.get("split.no")
    if kind != "uint16" or value != number - 1:
        said = f"{value!r} as {kind}" if kind else "absent"
        raise GGUFError(f"{where} does not say it is that part (its split.no is {said})")
    return gf
