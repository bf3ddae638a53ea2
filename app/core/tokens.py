"""Token counts: exact for the loaded model, and a fast cl100k estimate when no model is loaded.

The exact counter must agree with llama.cpp's own tokenizer on any text, yet counting a long
document through llama-cpp-python runs at about 1.3 MB/s (0.03-0.05 MB/s for Gemma's SentencePiece
vocabulary). Two fast forms are built from the GGUF vocabulary, fastest first:

* for byte-level BPE models whose pre-tokenizer one regular expression can express, a tiktoken
  ``Encoding`` (an order of magnitude faster than llama.cpp);
* for every other SentencePiece and BPE family llama.cpp knows, the same tokenizer rebuilt on
  Hugging Face ``tokenizers`` (:mod:`app.core.vocab_tokenizer`).

Exactness is not assumed: a fast form is checked against llama.cpp on a probe text before it is
trusted. A model with no fast form (WordPiece, Unigram, RWKV) or one that fails the check is
counted through llama.cpp itself, which is slow but exact, and the counter says so
(:attr:`LlamaCounter.note`).

The parts: the counter protocol and the tiktoken counter (:mod:`app.core.token_counter`), a
GGUF's byte-level BPE as tiktoken (:mod:`app.core.bpe_tiktoken`), and here the choice of the
exact counter for a model, its check against llama.cpp, and the keys that let another process
build the same counter; callers import all of it from here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from app.core.bpe_tiktoken import (
    PRE_TOKENIZERS,
    BpeTables,
    bpe_tables,
    gguf_encoding,
    unreachable_tokens,
)
from app.core.engine.gguf import GGUFError
from app.core.paths import cache_dir
from app.core.spm_tiktoken import SpmTiktoken
from app.core.textutil import scrub
from app.core.token_counter import (
    CL100K_NAME,
    PARALLEL_CHARS,
    TiktokenCounter,
    TokenCounter,
    Tokenize,
    TokenizerUnsupported,
    cl100k,
    split_at_safe_points,
)
from app.core.vocab_tokenizer import (
    ATTR_CONTROL,
    ATTR_UNKNOWN,
    ATTR_USER_DEFINED,
    LONE_NEWLINE,
    PieceEncoder,
    Vocab,
    VocabCounter,
    VocabUnsupported,
    cut_text,
    encode_in_chunks,
    read_vocab,
)
from app.core.vocab_tokenizer import unicode_to_byte as _unicode_to_byte  # noqa: F401 (tests)

# What callers import from here: this module's names and those of the modules above.
__all__ = [
    "CL100K_KEY",
    "CL100K_NAME",
    "PARALLEL_CHARS",
    "PRE_TOKENIZERS",
    "BpeTables",
    "FastCounter",
    "LlamaCounter",
    "TiktokenCounter",
    "TiktokenPieces",
    "TokenCounter",
    "Tokenize",
    "TokenizerUnsupported",
    "bpe_tables",
    "cl100k",
    "counter_fingerprint",
    "counter_for_key",
    "counter_key",
    "counter_method",
    "exact_counter",
    "fast_counters",
    "gguf_encoding",
    "host_counter",
    "host_tokenize",
    "llama_cut_points",
    "probe_text",
    "remember_attrs",
    "scrub",
    "split_at_safe_points",
    "unreachable_tokens",
    "verify",
    "vocab_encoding",
]

_TOKENIZER_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")
_CONTROL_ATTRS = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN


# ---------------------------------------------------------------------------------------------
# the exact counter for a GGUF model


class LlamaCounter:
    """Exact by definition: every count is llama.cpp's own tokenization (through the engine).

    ``note`` says why no fast counter is used, for the plan and the CLI to show. With
    ``tokenize_many`` and ``cut`` (where the family allows a cut that changes no token: see
    :func:`llama_cut_points`), a long text is tokenized in pieces on all the engine's cores.
    """

    def __init__(
        self,
        tokenize: Tokenize,
        *,
        name: str,
        note: str = "",
        tokenize_many: Callable[[list[str]], list[list[int]]] | None = None,
        cut: re.Pattern[str] | None = None,
    ) -> None:
        self._tokenize = tokenize
        self._tokenize_many = tokenize_many
        self._cut = cut
        self.name = name
        self.exact = True
        self.splits_at_spaces = False
        self.note = note or "counted by llama.cpp's own tokenizer"

    def encode(self, text: str) -> list[int]:
        text = scrub(text)
        if self._tokenize_many is None or self._cut is None or len(text) < PARALLEL_CHARS:
            return self._tokenize(text, False)
        pieces = cut_text(text, self._cut, max(PARALLEL_CHARS // 4, len(text) // 16))
        return [tid for ids in self._tokenize_many(pieces) for tid in ids]

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def encode_special(self, text: str) -> list[int]:
        return self._tokenize(scrub(text), True)

    def count_special(self, text: str) -> int:
        return len(self.encode_special(text))


def llama_cut_points(model_path: str | os.PathLike[str]) -> re.Pattern[str] | None:
    """Where llama.cpp's tokenizer for this model may cut a text without changing a token, or
    None. BPE: every pre-tokenizer llama.cpp has ends its pieces at a lone newline between
    non-spaces; WordPiece splits words at whitespace. Not when a special token holds a newline
    (it could span the cut), and never for SentencePiece or Unigram, whose merging or
    segmentation runs over the whole text."""
    try:
        vocab = read_vocab(model_path)
    except (VocabUnsupported, GGUFError):
        return None
    if vocab.model not in ("gpt2", "bert"):
        return None
    special = _CONTROL_ATTRS
    if any("\n" in t for t, a in zip(vocab.tokens, vocab.attrs, strict=True) if a & special):
        return None
    return LONE_NEWLINE


def counter_fingerprint(counter: TokenCounter) -> str | None:
    """A stable name for what ``counter`` counts, for caches that outlive the process; None for
    counters whose tokenizer cannot be named (llama.cpp's, through the engine)."""
    return counter.fingerprint if isinstance(counter, TiktokenCounter | VocabCounter) else None


def probe_text() -> str:
    """Text that exercises every pre-tokenizer rule: checked against llama.cpp before trusting."""
    parts = [
        "The quick brown fox jumps over the lazy dog. It's, we'll, they're, I'd, you've, I'M.\n",
        "HELLO World's 'quoted' \"double\" — dashes – and … ellipses; semi: colon!?\n\n",
        "Numbers: 0 7 42 123 4567 89012 3.14159 -17 1e10 0x1F 1,000,000 ½ ² ٣ ४.\n",
        "Whitespace:  two   three    four\tTab\t\tTabs\r\nCRLF \n \n  \n\n\n   trailing   \n",
        "    indented line\n\tindented tab\n  1 2  3   4\n \t 5\n",
        "中文文本：我们今天去公园散步。天气很好！你呢？「引号」、顿号；分号。\n",
        "日本語のテキストです。한국어 텍스트입니다. Ελληνικά κείμενο. Русский текст.\n",
        "العربية. हिन्दी। ภาษาไทย עברית\n",
        "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇨🇳 ❤️ ✨ e\u0301 n\u0303 ﬁ ＡＢＣ１２３\n",
        "def f(x: int) -> int:\n    return x ** 2  # square\n\nif __name__ == '__main__':\n",
        '    print(f(3)); a[i] += b->c && d != e || !g; <tag attr="v">text</tag> {{x}}\n',
        "URLs https://example.com/a?b=1&c=2#frag user@example.org C:\\path\\to\\file.txt\n",
        "Special-looking text: <|im_start|>user <|endoftext|> <s> </s> [INST] <unk>\n",
        "Mixed 3rd 21st 2024-11-29T10:50:08Z v1.2.3-rc4 $5.99 €10 ¥100 100% #1 @2\n",
        "\ufffd replacement, \x00 nul, \x7f del, \u200b zero width,\n",
        "\u00a0nbsp, \u3000ideographic, \u2028 line separator, \x85 next line\n",
    ]
    return "".join(parts) * 3 + "end without newline"


FastCounter = TiktokenCounter | VocabCounter


def _special_texts(counter: FastCounter) -> list[str]:
    if isinstance(counter, TiktokenCounter):
        return sorted(counter.encoding.special_tokens_set)
    return counter.special_texts()


def verify(counter: FastCounter, tokenize: Tokenize) -> str | None:
    """Compare a fast counter with llama.cpp; a description of the first mismatch, or None."""
    text = probe_text()
    for piece in [*text.splitlines(keepends=True), text]:
        mine, ref = counter.encode(piece), tokenize(piece, False)
        if mine != ref:
            return f"on {piece[:40]!r}: fast {mine[:12]} vs llama.cpp {ref[:12]}"
    # Each special token between text, and a sample of them run together (at most 2,000: a
    # vocabulary may hold thousands of unused control tokens).
    names = _special_texts(counter)[:2000]
    specials = "".join(f"{s}text {i}\n" for i, s in enumerate(names)) + "".join(names[:50])
    if counter.encode_special(specials) != tokenize(specials, True):
        return "special tokens are split differently"
    if counter.encode(specials) != tokenize(specials, False):
        return "text that looks like special tokens is split differently"
    if counter.encode_special(text) != tokenize(text, True):
        return "the probe text is split differently when special tokens are parsed"
    return None


def fast_counters(
    model_path: str | os.PathLike[str],
    attrs: Sequence[int] | None = None,
    *,
    continuation: bool = False,
) -> Iterator[FastCounter]:
    """The fast exact forms of a GGUF's tokenizer, fastest first, not yet checked against
    llama.cpp (a form that does not apply is skipped).

    ``attrs`` are llama.cpp's token attributes read back from it (EngineHost.token_attrs); without
    them they are derived from the file as llama.cpp derives them. ``continuation``: count texts
    as they stand inside a prompt (EngineHost.tokenize). Raises :class:`TokenizerUnsupported`
    with the reasons when no form applies.
    """
    reasons: list[str] = []
    tiktoken_form: TiktokenCounter | None = None
    try:
        tiktoken_form = gguf_encoding(model_path)
        yield tiktoken_form
    except TokenizerUnsupported as exc:
        reasons.append(str(exc))
    if tiktoken_form is not None:
        # The same encoding on the fragments llama.cpp's own special-token split leaves (tiktoken
        # splits special tokens its own way, which some vocabularies tell apart).
        form = tiktoken_form
        yield vocab_encoding(model_path, attrs, pieces_for=lambda _vocab: TiktokenPieces(form),
                             continuation=continuation)  # fmt: skip
    else:
        # Not SentencePiece, or no byte tokens: tokenizers below, or no fast form.
        with contextlib.suppress(TokenizerUnsupported):
            yield vocab_encoding(model_path, attrs, pieces_for=SpmTiktoken,
                                 continuation=continuation)  # fmt: skip
    try:
        yield vocab_encoding(model_path, attrs, continuation=continuation)
    except TokenizerUnsupported as exc:
        reasons.append(str(exc))
    if len(reasons) == 2:
        raise TokenizerUnsupported("; ".join(reversed(reasons)))


class TiktokenPieces:
    """A GGUF's tiktoken encoding as a PieceEncoder: fragments in, token ids out, on threads."""

    method = "tiktoken"

    def __init__(self, counter: TiktokenCounter) -> None:
        self._counter = counter

    def encode_many(self, pieces: list[str]) -> list[list[int]]:
        c = self._counter

        def one(piece: str) -> list[int]:
            ranks = np.asarray(c.encoding.encode_ordinary(piece), dtype=np.int64)
            return c._ids(c._kept(ranks) if c._may_drop(piece) else ranks)

        return encode_in_chunks(one, pieces)


def vocab_encoding(
    model_path: str | os.PathLike[str],
    attrs: Sequence[int] | None = None,
    *,
    pieces_for: Callable[[Vocab], PieceEncoder] | None = None,
    continuation: bool = False,
) -> VocabCounter:
    """The GGUF's tokenizer with llama.cpp's special-token split, its fragments encoded by what
    ``pieces_for`` makes of the vocabulary (tiktoken), else by the vocabulary rebuilt on
    ``tokenizers`` (fast_counters says what ``attrs`` and ``continuation`` are)."""
    try:
        vocab = read_vocab(model_path)
        if attrs is not None:
            remember_attrs(vocab.fingerprint(), attrs)
            vocab = vocab.with_attrs(attrs)
        elif (known := _known_attrs(vocab.fingerprint())) is not None:
            vocab = vocab.with_attrs(known)
        continued = continuation and vocab.add_space_prefix
        if continued:
            vocab = replace(vocab, add_space_prefix=False)
        pieces = pieces_for(vocab) if pieces_for is not None else None
        return VocabCounter(vocab, name=Path(model_path).name, continuation=continued,
                            model_path=Path(model_path).resolve(), pieces=pieces)  # fmt: skip
    except (VocabUnsupported, GGUFError) as exc:
        raise TokenizerUnsupported(str(exc)) from None
    except ValueError as exc:  # tokenizers refused the vocabulary
        raise TokenizerUnsupported(f"the vocabulary cannot be rebuilt: {exc}") from None


def exact_counter(
    model_path: str | os.PathLike[str],
    tokenize: Tokenize | None = None,
    *,
    attrs: Sequence[int] | None = None,
    tokenize_many: Callable[[list[str]], list[list[int]]] | None = None,
    continuation: bool = False,
) -> TokenCounter:
    """The exact counter for a model: the fastest form that is verified, else llama.cpp.

    ``tokenize`` is llama.cpp's tokenizer for the same model (usually the engine host's); with it
    each fast form is checked and when none agrees the count falls back to it. Without it, the
    fastest form that can be built is used, and :class:`TokenizerUnsupported` is raised when
    there is none. ``continuation``: count texts as they stand inside a prompt, as the jobs
    tokenize chunks (``tokenize`` must then tokenize so too: :func:`host_tokenize`).
    """
    name = Path(model_path).name
    mismatches: list[str] = []
    try:
        for fast in fast_counters(model_path, attrs, continuation=continuation):
            if tokenize is None:
                return fast
            mismatch = verify(fast, tokenize)
            if mismatch is None:
                return fast
            mismatches.append(f"{counter_method(fast)} differs from llama.cpp {mismatch}")
    except TokenizerUnsupported as exc:
        if tokenize is None:
            raise
        return LlamaCounter(tokenize, name=name, note=f"no fast exact counter: {exc}",
                            tokenize_many=tokenize_many, cut=llama_cut_points(model_path))
    assert tokenize is not None
    return LlamaCounter(tokenize, name=name, note="; ".join(mismatches),
                        tokenize_many=tokenize_many, cut=llama_cut_points(model_path))


def counter_method(counter: TokenCounter) -> str:
    """How ``counter`` counts, in a few words for a person (the CLI and the plan show it)."""
    if isinstance(counter, LlamaCounter):
        return f"llama.cpp, slow: {counter.note}"
    if isinstance(counter, VocabCounter):
        return f"fast exact ({counter.family})"
    if counter.exact:
        return "fast exact (byte-level BPE, tiktoken)"
    return "estimate"


def host_counter(
    model_path: str | os.PathLike[str], host: object, *, continuation: bool = True
) -> TokenCounter:
    """The exact counter for the model (or vocabulary) an engine host has loaded, built with the
    token attributes llama.cpp reports and checked against its tokenizer.

    By default it counts texts as the jobs tokenize document chunks, in the middle of a prompt
    (``continuation``, see EngineHost.tokenize); ``continuation=False`` counts a whole text as
    llama.cpp tokenizes it from its start. Only SentencePiece models that add a space prefix
    (Llama 2, Mistral, ...) tell the two apart, by that one space."""
    attrs = host.token_attrs()  # type: ignore[attr-defined]
    many = functools.partial(host.tokenize_many, continuation=continuation)  # type: ignore[attr-defined]
    return exact_counter(model_path, host_tokenize(host, continuation=continuation), attrs=attrs,
                         tokenize_many=many, continuation=continuation)  # fmt: skip


# llama.cpp's token attributes, kept per vocabulary so that another process (the planning child)
# builds the very counter that was verified here.
_ATTRS: dict[str, tuple[int, ...]] = {}


def remember_attrs(fingerprint: str, attrs: Sequence[int]) -> None:
    attrs = tuple(int(a) for a in attrs)
    if _ATTRS.get(fingerprint) == attrs:
        return
    _ATTRS[fingerprint] = attrs
    path = _attrs_file(fingerprint)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(np.asarray(attrs, dtype=np.uint32).tobytes())
        os.replace(tmp, path)
    except OSError:
        pass  # a cache: without it another process derives the attributes from the file


def _known_attrs(fingerprint: str) -> tuple[int, ...] | None:
    if fingerprint in _ATTRS:
        return _ATTRS[fingerprint]
    try:
        data = _attrs_file(fingerprint).read_bytes()
    except OSError:
        return None
    attrs = tuple(int(a) for a in np.frombuffer(data, dtype=np.uint32))
    _ATTRS[fingerprint] = attrs
    return attrs


def _attrs_file(fingerprint: str) -> Path:
    return cache_dir() / "token-attrs" / f"{fingerprint[:32]}.u32"


CL100K_KEY = "cl100k"


def counter_key(counter: TokenCounter) -> str | None:
    """How another process can build the same counter: ``"cl100k"``, a GGUF path, or None.

    None for counters that need this process (llama.cpp through the engine: :class:`LlamaCounter`).
    """
    if isinstance(counter, VocabCounter) and counter.model_path is not None:
        prefix = _VOCAB_TIKTOKEN_KEY if counter.family.endswith("tiktoken") else _VOCAB_KEY
        if counter.continuation:
            prefix = _CONTINUATION_KEY + prefix
        return prefix + str(counter.model_path)
    if not isinstance(counter, TiktokenCounter):
        return None
    if counter.model_path is not None:
        return str(counter.model_path)
    return CL100K_KEY if counter is cl100k() else None


_VOCAB_KEY = "tokenizers:"
_VOCAB_TIKTOKEN_KEY = "split+tiktoken:"
_CONTINUATION_KEY = "continuation+"  # before either: the counter of texts inside a prompt


def counter_for_key(key: str) -> FastCounter:
    """The counter :func:`counter_key` named (the GGUF's fast form, as ``exact_counter`` trusts
    it once verified against llama.cpp)."""
    if key == CL100K_KEY:
        return cl100k()
    continuation = key.startswith(_CONTINUATION_KEY)
    key = key.removeprefix(_CONTINUATION_KEY)
    if key.startswith(_VOCAB_KEY):
        return _vocab_encoding_cached(key[len(_VOCAB_KEY) :], continuation=continuation)
    if key.startswith(_VOCAB_TIKTOKEN_KEY):
        return _vocab_encoding_cached(key[len(_VOCAB_TIKTOKEN_KEY) :], tiktoken_pieces=True,
                                      continuation=continuation)  # fmt: skip
    return _gguf_encoding_cached(key)


@functools.lru_cache(maxsize=4)
def _gguf_encoding_cached(path: str) -> TiktokenCounter:
    return gguf_encoding(path)


def _vocab_encoding_cached(
    path: str, *, tiktoken_pieces: bool = False, continuation: bool = False
) -> VocabCounter:
    key = (path, tiktoken_pieces, continuation)
    if key not in _VOCAB_CACHE:
        if len(_VOCAB_CACHE) >= 4:
            _VOCAB_CACHE.pop(next(iter(_VOCAB_CACHE)))
        def tiktoken_form(vocab: Vocab) -> PieceEncoder:
            """The GGUF's byte-level tiktoken encoding, or the SPM one."""
            if vocab.kind == "spm":
                return SpmTiktoken(vocab)
            return TiktokenPieces(_gguf_encoding_cached(path))

        _VOCAB_CACHE[key] = vocab_encoding(path, pieces_for=tiktoken_form if tiktoken_pieces
                                           else None, continuation=continuation)  # fmt: skip
    return _VOCAB_CACHE[key]


_VOCAB_CACHE: dict[tuple[str, bool, bool], VocabCounter] = {}


def host_tokenize(host: object, *, continuation: bool = False) -> Tokenize:
    """Adapt an engine host's ``tokenize`` to :data:`Tokenize` (no BOS, special as asked;
    ``continuation`` as EngineHost.tokenize)."""
    tokenize = host.tokenize  # type: ignore[attr-defined]

    def call(text: str, special: bool) -> list[int]:
        return list(tokenize(text, add_special=False, parse_special=special,
                             continuation=continuation))  # fmt: skip

    return call
