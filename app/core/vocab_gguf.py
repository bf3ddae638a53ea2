"""A GGUF's vocabulary as llama.cpp reads it: :class:`Vocab`, its tokens' attributes, the header.

Apart from the tokenizer (``vocab_tokenizer.py``) because it is what every fast tokenizer starts
from (the rebuilt one and the tiktoken forms, ``spm_tiktoken.py`` and ``bpe_tiktoken.py``): the
tokenizer arrays of a GGUF's header, read once per file version, and each token's attributes
derived the way llama.cpp derives them where llama.cpp itself cannot be asked.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.engine.gguf import GGUFFile, adds_space_prefix, read_gguf

_KEYS = (
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
)
# llama.cpp's token attributes (llama_token_attr): what its tokenizer decides by
ATTR_UNKNOWN, ATTR_UNUSED, ATTR_NORMAL, ATTR_CONTROL = 1 << 0, 1 << 1, 1 << 2, 1 << 3
ATTR_USER_DEFINED, ATTR_BYTE, ATTR_LSTRIP, ATTR_RSTRIP = 1 << 4, 1 << 5, 1 << 7, 1 << 8
# GGUF token type -> attribute (llama-vocab.cpp, token_data.attr at load)
_TYPE_ATTR = {2: ATTR_UNKNOWN, 5: ATTR_UNUSED, 1: ATTR_NORMAL, 3: ATTR_CONTROL,
              4: ATTR_USER_DEFINED, 6: ATTR_BYTE}  # fmt: skip
# Texts llama.cpp makes control tokens whatever the file says (end-of-generation and the like).
_CONTROL_TEXTS = frozenset((
    '<|eot_id|>', '<|im_end|>', '<|end|>', '<end_of_turn>', '<|endoftext|>', '<|end_of_text|>',
    '<EOT>', '_<EOT>', '[EOT]', '<｜end▁of▁sentence｜>', '<end_of_utterance>', '<|eom_id|>',
    '<|fim_prefix|>', '<fim-prefix>', '<fim_prefix>', '<｜fim▁begin｜>', '<PRE>', '▁<PRE>',
    '<|code_prefix|>', '<|prefix|>', '<|fim_suffix|>', '<fim-suffix>', '<fim_suffix>',
    '<｜fim▁hole｜>', '<SUF>', '▁<SUF>', '<|code_suffix|>', '<|suffix|>', '<|fim_middle|>',
    '<fim-middle>', '<fim_middle>', '<｜fim▁end｜>', '<MID>', '▁<MID>', '<|code_middle|>',
    '<|middle|>', '<|fim_pad|>', '<fim-pad>', '<fim_pad>', '<PAD>', '[PAD]', '<|fim_repo|>',
    '<|repo_name|>', '<fim-repo>', '<REPO>', '<reponame>', '<|file_sep|>', '<|return|>',
    '<|call|>', '<|flush|>', '<|calls|>', '</s>', '[EOS]', '<eos>', '<turn|>',
    '<|tool_response>', '[e~['
))


class VocabUnsupported(ValueError):
    """This vocabulary has no rebuilt tokenizer here; the message says why."""


@dataclass(frozen=True)
class Vocab:
    """What a GGUF says about its tokenizer, as llama.cpp reads it."""

    model: str  # tokenizer.ggml.model: "llama" (SPM), "gpt2" (BPE), "gemma4", "bert", "t5", ...
    pre: str
    tokens: tuple[str, ...]
    types: tuple[int, ...]
    scores: tuple[float, ...]
    merges: tuple[str, ...]
    add_space_prefix: bool
    model_name: str  # general.name, lower case: llama.cpp sets token attributes by it
    # llama.cpp's attribute of each token: read back from llama.cpp where it is at hand
    # (with_attrs), else derived from the types the way llama.cpp derives them (derived_attrs)
    attrs: tuple[int, ...] = ()

    def with_attrs(self, attrs: Sequence[int]) -> Vocab:
        if len(attrs) != len(self.tokens):
            raise ValueError("llama.cpp reports another vocabulary size than the file")
        return dataclasses.replace(self, attrs=tuple(int(a) for a in attrs))

    @property
    def kind(self) -> str:
        """"spm" or "bpe": which rebuilt tokenizer applies; VocabUnsupported for the others."""
        if self.model == "llama":
            return "spm"
        if self.model in ("gpt2", "gemma4"):
            return "bpe"
        raise VocabUnsupported(f"the {self.model!r} tokenizer has no fast form here")

    def to_id(self) -> dict[str, int]:
        """Text -> id; a text listed twice maps to its last id, as llama.cpp's map does."""
        return {t: i for i, t in enumerate(self.tokens)}

    def fingerprint(self) -> str:
        """A hash of everything the tokens depend on (the same vocabulary in another file gives
        the same hash). Computed once: it hashes every entry."""
        cached = self.__dict__.get("_fingerprint")
        if cached is None:
            cached = self.__dict__["_fingerprint"] = self._hash()
        return cached

    def _hash(self) -> str:
        h = hashlib.sha256(b"vocab-tokenizer-1\0")
        head = [self.model, self.pre, self.add_space_prefix, self.model_name]
        h.update(json.dumps(head).encode())
        for seq in (self.tokens, self.merges):
            for item in seq:
                h.update(item.encode("utf-8", "surrogatepass") + b"\0")
        h.update(json.dumps([list(self.types), list(self.scores), list(self.attrs)]).encode())
        return h.hexdigest()


def read_vocab(path: str | os.PathLike[str]) -> Vocab:
    """The tokenizer part of a GGUF (header only: a vocabulary-only file is enough)."""
    return vocab_of(tokenizer_header(path))


def tokenizer_header(path: str | os.PathLike[str]) -> GGUFFile:
    """A GGUF's header with its tokenizer arrays, read once per file version: a large vocabulary
    takes seconds to parse, and loading a model asks for it several times."""
    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError:
        return read_gguf(path, keep_arrays=_KEYS)  # says why in one sentence
    return _header(str(p), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=2)
def _header(path: str, _mtime_ns: int, _size: int) -> GGUFFile:
    return read_gguf(path, keep_arrays=_KEYS)


def vocab_of(gf: GGUFFile) -> Vocab:
    def items(key: str) -> tuple[Any, ...]:
        value = gf.get(key)
        return tuple(value.items) if value is not None and value.items is not None else ()

    model = str(gf.get("tokenizer.ggml.model", ""))
    tokens = items("tokenizer.ggml.tokens")
    if not tokens:
        raise VocabUnsupported("the model has no vocabulary")
    types = items("tokenizer.ggml.token_type") or (1,) * len(tokens)
    scores = items("tokenizer.ggml.scores") or (0.0,) * len(tokens)
    if len(types) != len(tokens) or len(scores) != len(tokens):
        raise VocabUnsupported("the vocabulary's types or scores do not match its tokens")
    pre = gf.get("tokenizer.ggml.pre")
    if model == "gemma4" and not pre:
        pre = "gemma4"
    vocab = Vocab(
        model=model,
        pre=str(pre or "default"),
        tokens=tokens,
        types=tuple(int(t) for t in types),
        scores=tuple(float(s) for s in scores),
        merges=items("tokenizer.ggml.merges"),
        add_space_prefix=adds_space_prefix(gf),
        model_name=str(gf.get("general.name", "")).lower(),
    )
    return dataclasses.replace(vocab, attrs=derived_attrs(vocab))


def derived_attrs(vocab: Vocab) -> tuple[int, ...]:
    """Token attributes as llama.cpp derives them from the file: the type, control for the texts
    it treats as end-of-generation or fill-in-the-middle markers, lstrip/rstrip by model name.
    Used only where llama.cpp cannot be asked (:meth:`Vocab.with_attrs` is the truth)."""
    attrs = [_TYPE_ATTR.get(t, 0) for t in vocab.types]
    for tid, text in enumerate(vocab.tokens):
        if text in _CONTROL_TEXTS:
            attrs[tid] |= ATTR_CONTROL
        if text in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
            attrs[tid] = ATTR_USER_DEFINED
    name = vocab.model_name
    if "phi-3" in name or "phi3" in name:
        for tid, text in enumerate(vocab.tokens):
            special = attrs[tid] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)
            if special or text == "</s>":
                attrs[tid] |= ATTR_RSTRIP
            if text in ("<unk>", "<s>", "<|endoftext|>"):
                attrs[tid] &= ~ATTR_RSTRIP
    if "jina-v2" in vocab.pre or "nomic-bert-moe" in name or "modern-bert" in name:
        for tid, text in enumerate(vocab.tokens):
            if text in ("<mask>", "[MASK]"):
                attrs[tid] |= ATTR_LSTRIP
    return tuple(attrs)
