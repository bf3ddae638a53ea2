"""llama.cpp's tokenizers rebuilt from a GGUF vocabulary on Hugging Face ``tokenizers``.

Counting a long document through llama.cpp is slow for two reasons: its SentencePiece (SPM)
tokenizer scans the whole text once per user-defined token before it starts (Gemma 3 has 165 of
them: 0.03-0.05 MB/s on a 1.6 MB text), and every family runs on one thread. This module rebuilds
the same tokenizer in ``tokenizers`` (Rust, parallel over pieces) and keeps llama.cpp's rules where
they differ from a Hugging Face tokenizer.json:

* **Special tokens first.** llama.cpp splits the text on its special tokens before anything else,
  longest token first over the whole text (``tokenizer_st_partition``); user-defined tokens are
  split even when special tokens are not parsed. :func:`partition` does exactly that.
* **SPM** (Llama 2, Mistral, Gemma 1-3, Phi-3, Baichuan). llama.cpp merges adjacent pieces whose
  concatenation is a vocabulary entry, best score first, leftmost on ties, then falls back to byte
  tokens. That is a BPE whose merge list is every split of every entry into two entries, ranked by
  the entry's score: :func:`spm_merges`. Merges can only join characters that sit side by side in
  some entry, so the text is cut where no entry spans the two characters (before a "▁" that no
  entry has inside it after that character) and the pieces are encoded in parallel.
* **BPE** with llama.cpp's pre-tokenizer for each ``tokenizer.ggml.pre`` (a cascade of regular
  expressions, each splitting the pieces of the one before: ``Split(..., "isolated")``), GPT-2's
  byte map unless the family uses raw UTF-8, and ``ignore_merges`` where llama.cpp sets it.

Exactness is proven, not assumed: :func:`app.core.tokens.exact_counter` checks the result against
llama.cpp's own tokenizer on a probe text before trusting it, and the differential tests run every
family's vocabulary from llama.cpp's tokenizer tests.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tokenizers import Regex, Tokenizer, models, pre_tokenizers

from app.core.engine.gguf import GGUFFile, adds_space_prefix, read_gguf
from app.core.textutil import scrub

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
_SPACE = "\u2581"  # SentencePiece's visible space
_C_SPACE = " \t\n\v\f\r"  # C isspace(): what llama.cpp's lstrip/rstrip remove


class VocabUnsupported(ValueError):
    """This vocabulary has no rebuilt tokenizer here; the message says why."""


# ---------------------------------------------------------------------------------------------
# llama.cpp's BPE pre-tokenizers (src/llama-vocab.cpp), as the cascades it applies

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
_QWEN35 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Written with escapes: the ranges hold look-alikes of ASCII letters (KELVIN SIGN, OHM SIGN).
_DEEPSEEK_LLM_LETTERS = (
    "A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370"
    "-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-"
    "\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd"
    "\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18"
    "-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-"
    "\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-"
    "\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124"
    "\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183"
    "\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21"
    "-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
    "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943"
)
_CJK_HANGUL = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK3 = (
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_PORO = r" ?[^(\s|.,!?…。，、।۔،)]+"
_TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
    r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O = (
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + _CONTRACTIONS + "?"
    r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _CONTRACTIONS + "?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class PreTokenizer:
    """One of llama.cpp's BPE pre-tokenizers."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False
    byte_encode: bool = True  # GPT-2's byte map; False: merges on raw UTF-8
    escape_whitespace: bool = False  # spaces become "▁" first (SPM-style BPE)


def _pre(*regexes: str, **kw: bool) -> PreTokenizer:
    return PreTokenizer(tuple(regexes), **kw)


# Not here: llama.cpp's "default" pre-tokenizer (files without tokenizer.ggml.pre: Falcon, Aquila,
# GPT-NeoX) and "falcon". Both start with "[\p{P}\$\+<=>\^~\|]+", which llama.cpp's own regex
# engine applies to a "collapsed" text (unicode.cpp) and which there keeps "`," as one piece
# where Unicode's \p{P} splits it (seen on Python source). Until that is reproduced, llama.cpp
# counts them.

# tokenizer.ggml.pre -> llama.cpp's pre-tokenizer (names as llama-vocab.cpp reads them)
BPE_PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
         "lfm2", "jina-v5-nano"),
        _pre(_LLAMA3, ignore_merges=True),
    ),
    **dict.fromkeys(("dbrx", "smaug-bpe"), _pre(_LLAMA3)),
    "deepseek-llm": _pre(
        "[\r\n]", rf"\s?[{_DEEPSEEK_LLM_LETTERS}]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        r"\s+$", _CJK_HANGUL, r"\p{N}+",
    ),
    "deepseek-coder": _pre("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_HANGUL, r"\p{N}"),
    **dict.fromkeys(
        ("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"),
        _pre(r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", _DEEPSEEK3),
    ),
    **dict.fromkeys(
        ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
         "mellum2"),
        _pre(r"\p{N}", _GPT2),
    ),
    **dict.fromkeys(
        ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
         "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling",
         "exaone4", "jina-v1-en", "jina-v2-code", "roberta-bpe"),
        _pre(_GPT2),
    ),
    **dict.fromkeys(
        ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open",
         "megrez", "grok-2"),
        _pre(_QWEN2),
    ),
    "qwen35": _pre(_QWEN35),
    "chatglm-bpe": _pre(_LLAMA3),
    **dict.fromkeys(("glm4", "glm5"), _pre(_LLAMA3, ignore_merges=True)),
    **dict.fromkeys(("poro-chat", "bloom", "gpt3-finnish"), _pre(_PORO)),
    "viking": _pre(_PORO, r"\p{N}"),
    "tekken": _pre(_TEKKEN, ignore_merges=True),
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), _pre(_GPT4O)),
    **dict.fromkeys(
        ("gemma4", "granite-embed-multi-311m"),
        _pre(r"[^\n]+|[\n]+", byte_encode=False, escape_whitespace=True),
    ),
}


# ---------------------------------------------------------------------------------------------
# the vocabulary


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


# ---------------------------------------------------------------------------------------------
# special tokens: llama.cpp's tokenizer_st_partition


@dataclass(frozen=True)
class Special:
    text: str
    id: int
    lstrip: bool = False
    rstrip: bool = False


def specials_of(vocab: Vocab, parse_special: bool) -> list[Special]:
    """The tokens llama.cpp splits the text on, in its order (longest UTF-8 first).

    User-defined tokens always; control and unknown ones only when special tokens are parsed.
    llama.cpp sorts with an unstable sort, so equal lengths are ordered by id here; they differ
    only where two such tokens overlap in a text.
    """
    skip = 0 if parse_special else ATTR_CONTROL | ATTR_UNKNOWN
    found: list[Special] = []
    for tid, (text, attr) in enumerate(zip(vocab.tokens, vocab.attrs, strict=True)):
        if not attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) or attr & skip or not text:
            continue
        found.append(Special(text, tid, bool(attr & ATTR_LSTRIP), bool(attr & ATTR_RSTRIP)))
    found.sort(key=lambda s: (-len(s.text.encode("utf-8", "surrogatepass")), s.id))
    return found


Fragment = str | int  # raw text, or a special token's id


def partition(text: str, specials: Sequence[Special]) -> list[Fragment]:
    """Split ``text`` on ``specials`` exactly as llama.cpp does.

    Each token, longest first, claims its leftmost non-overlapping occurrences that lie wholly in
    text no longer token claimed; lstrip/rstrip tokens also swallow the whitespace beside them.
    When the tokens present cannot overlap one another (runs of one character aside, where
    both orders agree), one regular expression that tries the longest first at each position
    splits the same way; else occurrences are found once per present token, so the cost grows
    with the matches, not with the number of special tokens times the length of the text.
    """
    present = tuple(sp for sp in specials if sp.text in text)
    if not present:
        return [text] if text else []
    splitter = _simple_splitter(present)
    if splitter is not None:
        pattern, ids = splitter
        parts = pattern.split(text)
        out: list[Fragment] = []
        for i, part in enumerate(parts):
            if i % 2:
                out.append(ids[part])
            elif part:
                out.append(part)
        return out
    return _partition_exact(text, present)


@functools.lru_cache(maxsize=64)
def _simple_splitter(present: tuple[Special, ...]) -> tuple[re.Pattern[str], dict[str, int]] | None:
    """One alternation, longest first, when it splits as llama.cpp does (see partition)."""
    if len(present) > 64 or any(sp.lstrip or sp.rstrip for sp in present):
        return None  # many tokens (a chat transcript): the pairwise check costs more than it saves
    texts = [sp.text for sp in present]
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            if _same_char_runs(a, b):
                continue
            if a in b or b in a or _overlaps(a, b) or _overlaps(b, a):
                return None
    ordered = sorted(present, key=lambda sp: (-len(sp.text), sp.id))
    pattern = re.compile("(" + "|".join(re.escape(sp.text) for sp in ordered) + ")")
    return pattern, {sp.text: sp.id for sp in present}


def _same_char_runs(a: str, b: str) -> bool:
    return len(set(a)) == 1 and set(a) == set(b)


def _overlaps(a: str, b: str) -> bool:
    """Some end of ``a`` is a beginning of ``b``."""
    return any(a.endswith(b[:k]) for k in range(1, min(len(a), len(b))))


def _partition_exact(text: str, specials: Sequence[Special]) -> list[Fragment]:
    """partition, token by token as llama.cpp does (for tokens that may overlap)."""
    starts: list[int] = []  # claimed intervals, disjoint, sorted: [start, end) and what they hold
    ends: list[int] = []
    what: list[int | None] = []  # a token id, or None for stripped whitespace
    for sp in specials:
        size = len(sp.text)
        new: list[tuple[int, int, int | None]] = []
        last_end = 0
        p = text.find(sp.text)
        while p >= 0:
            i = bisect.bisect_left(starts, p + size) - 1
            if p >= last_end and not (i >= 0 and ends[i] > p):  # not inside an earlier claim
                lo, hi = p, p + size
                if sp.lstrip:
                    floor = max(last_end, ends[i] if i >= 0 else 0)
                    while lo > floor and text[lo - 1] in _C_SPACE:
                        lo -= 1
                if sp.rstrip:
                    j = bisect.bisect_left(starts, hi)
                    ceiling = starts[j] if j < len(starts) else len(text)
                    while hi < ceiling and text[hi] in _C_SPACE:
                        hi += 1
                if lo < p:
                    new.append((lo, p, None))
                new.append((p, p + size, sp.id))
                if hi > p + size:
                    new.append((p + size, hi, None))
                last_end = hi
            p = text.find(sp.text, p + 1)
        for lo, hi, w in new:  # each claim slots in between the claims of longer tokens
            k = bisect.bisect_left(starts, lo)
            starts.insert(k, lo)
            ends.insert(k, hi)
            what.insert(k, w)
    out: list[Fragment] = []
    pos = 0
    for s, e, w in zip(starts, ends, what, strict=True):
        if s > pos:
            out.append(text[pos:s])
        if w is not None:
            out.append(w)
        pos = e
    if pos < len(text):
        out.append(text[pos:])
    return out


# ---------------------------------------------------------------------------------------------
# building the tokenizers


def spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Every split of every entry into two entries, best score first (ties: lower id, then the
    split further left). llama.cpp merges any two neighbours whose text is an entry, by that
    entry's score; two splits of one entry never compete for the same characters."""
    to_id = vocab.to_id()
    scored: list[tuple[float, int, int, str, str]] = []
    for tid, text in enumerate(vocab.tokens):
        if len(text) < 2 or to_id.get(text) != tid:
            continue
        score = vocab.scores[tid]
        for k in range(1, len(text)):
            left, right = text[:k], text[k:]
            if left in to_id and right in to_id:
                scored.append((-score, tid, k, left, right))
    scored.sort(key=lambda c: (c[0], c[1], c[2]))
    return [(left, right) for *_, left, right in scored]


def _spm_cut_pattern(vocab: Vocab) -> str:
    """Where SPM text may be cut: before a "▁" that no entry holds after the character before it.
    (Characters are merged only when an entry holds them side by side.)"""
    before = {t[k - 1] for t in vocab.tokens for k in range(1, len(t)) if t[k] == _SPACE}
    before.add(_SPACE)
    return f"(?<![{''.join(re.escape(c) for c in sorted(before))}]){_SPACE}"


def build_spm(vocab: Vocab) -> Tokenizer:
    model = models.BPE(vocab=vocab.to_id(), merges=spm_merges(vocab), byte_fallback=True)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_spm_cut_pattern(vocab)), "merged_with_next")
    return tok


def build_bpe(vocab: Vocab) -> Tokenizer:
    pre = BPE_PRE_TOKENIZERS.get(vocab.pre)
    if pre is None:
        raise VocabUnsupported(f"pre-tokenizer {vocab.pre!r} has no fast form here")
    merges: list[tuple[str, str]] = []
    for merge in vocab.merges:
        left, sep, right = merge.partition(" ")
        if not sep or not left or not right:
            raise VocabUnsupported(f"malformed merge {merge!r}")
        merges.append((left, right))
    # Raw-UTF-8 families fall back to <0xXX> byte tokens for a character the vocabulary lacks;
    # byte-level ones drop such a byte, as tokenizers does without byte_fallback.
    model = models.BPE(vocab=vocab.to_id(), merges=merges, ignore_merges=pre.ignore_merges,
                       byte_fallback=not pre.byte_encode)  # fmt: skip
    tok = Tokenizer(model)
    steps: list[pre_tokenizers.PreTokenizer] = [
        pre_tokenizers.Split(Regex(r), "isolated") for r in pre.regexes
    ]
    if pre.byte_encode:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    return tok


# ---------------------------------------------------------------------------------------------
# the counter


def encode_in_chunks(
    encode_one: Callable[[str], list[int]], pieces: list[str]
) -> list[list[int]]:
    """``encode_one`` over ``pieces`` on a few threads (the encoders release the GIL), the pieces
    grouped in chunks of similar size so that thousands of short lines cost few hand-offs."""
    total = sum(map(len, pieces))
    n_workers = workers()
    if n_workers < 2 or total < _PIECE_CHARS:
        return [encode_one(p) for p in pieces]
    target = max(_PIECE_CHARS // 4, total // (n_workers * 4))
    chunks: list[list[str]] = [[]]
    size = 0
    for piece in pieces:
        if size >= target:
            chunks.append([])
            size = 0
        chunks[-1].append(piece)
        size += len(piece)
    done = pool().map(lambda chunk: [encode_one(p) for p in chunk], chunks)
    return [ids for chunk in done for ids in chunk]


@functools.cache
def workers() -> int:
    """Threads for encoding: the cores, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


@functools.cache
def pool() -> ThreadPoolExecutor:
    """One pool for every counter's threads (the encoders release the GIL)."""
    return ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="tokens")


class PieceEncoder(Protocol):
    """Encodes raw fragments, each on its own, to token ids (another engine for the same BPE)."""

    method: str  # what it is, for a person: "tiktoken"

    def encode_many(self, pieces: list[str]) -> list[list[int]]: ...


_PIECE_CHARS = 1 << 16  # long raw fragments are cut into pieces of about this size, in parallel


class VocabCounter:
    """An exact counter for a GGUF vocabulary (implements ``app.core.tokens.TokenCounter``)."""

    exact = True
    splits_at_spaces = False  # counts of texts cut at spaces need not add up (SPM: "▁" merges)

    def __init__(
        self,
        vocab: Vocab,
        *,
        name: str,
        model_path: Path | None = None,
        pieces: PieceEncoder | None = None,
        continuation: bool = False,
    ) -> None:
        """``pieces`` encodes raw text fragments (after the special-token partition) when given,
        for example a tiktoken encoding of the same BPE; else the vocabulary is rebuilt on
        ``tokenizers``. ``continuation``: ``vocab`` is the file's with its space prefix switched
        off, so texts count as they stand inside a prompt (see EngineHost.tokenize)."""
        self.name = name
        self.model_path = model_path
        self.continuation = continuation
        self.kind = vocab.kind
        family = f"{vocab.model}/{vocab.pre}" if self.kind == "bpe" else "spm"
        self.family = f"{family}, {pieces.method if pieces else 'tokenizers'}"
        self.fingerprint = vocab.fingerprint() + (f":{pieces.method}" if pieces else "")
        self._vocab = vocab
        self._pieces_encoder = pieces
        self._tok = None
        if pieces is None:
            self._tok = build_spm(vocab) if self.kind == "spm" else build_bpe(vocab)
        self._specials = specials_of(vocab, False)
        self._all_specials = specials_of(vocab, True)
        self._pre = BPE_PRE_TOKENIZERS.get(vocab.pre) if self.kind == "bpe" else None
        self._cut = re.compile(_spm_cut_pattern(vocab)) if self.kind == "spm" else LONE_NEWLINE

    # -- TokenCounter

    def encode(self, text: str) -> list[int]:
        return self._encode(text, self._specials)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def encode_special(self, text: str) -> list[int]:
        return self._encode(text, self._all_specials)

    def count_special(self, text: str) -> int:
        return len(self.encode_special(text))

    def special_texts(self) -> list[str]:
        """The texts of the tokens parsed as special (control, user-defined, unknown)."""
        return [sp.text for sp in self._all_specials]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (special tokens as their text); ValueError for an unknown id."""
        out: list[bytes] = []
        tokens = self._vocab.tokens
        for tid in ids:
            if not 0 <= tid < len(tokens):
                raise ValueError("a token id is outside the vocabulary")
            out.append(self._piece(tokens[tid]))
        return b"".join(out).decode("utf-8", "replace")

    # -- internals

    def _piece(self, token: str) -> bytes:
        if self.kind == "spm" or (self._pre is not None and not self._pre.byte_encode):
            m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token)
            if m and self.kind == "spm":
                return bytes([int(m.group(1), 16)])
            return token.replace(_SPACE, " ").encode("utf-8", "surrogatepass")
        table = unicode_to_byte()
        try:
            return bytes(table[c] for c in token)
        except KeyError:
            return token.encode("utf-8", "surrogatepass")

    def _encode(self, text: str, specials: Sequence[Special]) -> list[int]:
        frags = partition(scrub(text), specials)
        jobs: list[str] = []  # raw pieces, in order; a fragment may become several pieces
        layout: list[int | tuple[int, int]] = []  # token id, or (first piece, piece count)
        prev_special = True
        for frag in frags:
            if isinstance(frag, int):
                layout.append(frag)
                prev_special = True
                continue
            pieces = self._pieces(frag, prev_special)
            layout.append((len(jobs), len(pieces)))
            jobs.extend(pieces)
            prev_special = False
        if not jobs:
            encoded: list[list[int]] = []
        elif self._pieces_encoder is not None:
            encoded = self._pieces_encoder.encode_many(jobs)
        else:
            assert self._tok is not None  # built whenever no piece encoder was given
            if len(jobs) == 1:
                encoded = [self._tok.encode(jobs[0], add_special_tokens=False).ids]
            else:
                encoded = [e.ids for e in self._tok.encode_batch(jobs, add_special_tokens=False)]
        out: list[int] = []
        for item in layout:
            if isinstance(item, int):
                out.append(item)
            else:
                first, n = item
                for ids in encoded[first : first + n]:
                    out.extend(ids)
        return out

    def _pieces(self, frag: str, prev_special: bool) -> list[str]:
        if self.kind == "spm":
            text = frag.replace(" ", _SPACE)
            if self._vocab.add_space_prefix and prev_special:
                text = _SPACE + text
            return cut_text(text, self._cut) if len(text) > _PIECE_CHARS else [text]
        if self._pre is not None and self._pre.escape_whitespace:
            frag = frag.replace(" ", _SPACE)
        return cut_text(frag, self._cut) if len(frag) > _PIECE_CHARS else [frag]


# A lone newline between two non-space characters: no pre-tokenizer above lets a pre-token span
# it (they isolate newlines, end a run of letters, digits or punctuation before it, or take it as
# a whitespace run that the next non-space character ends), so BPE text may be cut just after it.
LONE_NEWLINE = re.compile(r"(?<=[^\s]\n)(?=[^\s])")


def cut_text(text: str, at: re.Pattern[str] | None, size: int = _PIECE_CHARS) -> list[str]:
    """``text`` in pieces of about ``size`` characters, cut only at matches of ``at`` (a cut
    before the match's start); whole when ``at`` is None."""
    if at is None:
        return [text]
    pieces: list[str] = []
    start = 0
    while len(text) - start > size:
        m = at.search(text, start + size)
        if m is None:
            break
        pieces.append(text[start : m.start()])
        start = m.start()
    pieces.append(text[start:])
    return pieces


@functools.cache
def unicode_to_byte() -> dict[str, int]:
    """GPT-2's reversible byte <-> printable character map, as character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}
