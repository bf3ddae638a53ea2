"""Every tokenizer family llama.cpp has: the exact counter equals llama.cpp's own tokenizer.

The vocabularies are llama.cpp's own vocabulary-only test models (``make`` puts them in
models/vocab/, see packaging/fetch-llama-vocabs.sh), plus both test models. Each is loaded in the
engine child with ``vocab_only`` (no weights: these files have none), and the counter
``contextlens-cli count --model`` would use is compared with llama.cpp on varied text, with and
without special tokens parsed.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from app.core import tokens as T
from app.core.engine.host import EngineHost
from app.core.paths import models_dir
from app.core.vocab_tokenizer import VocabCounter
from tests.core.token_corpus import corpus

VOCABS = models_dir() / "vocab"
GEMMA = models_dir() / "gemma-3-270m-q4_k_m.gguf"
# Families with no fast form here: llama.cpp counts them (exactly, slowly), and says so.
# (WordPiece, Unigram, and the BPE pre-tokenizers whose \p{P} llama.cpp applies its own way.)
THROUGH_LLAMA = {"ggml-vocab-bert-bge.gguf", "ggml-vocab-nomic-bert-moe.gguf",
                 "ggml-vocab-falcon.gguf", "ggml-vocab-aquila.gguf", "ggml-vocab-gpt-neox.gguf"}


def _models() -> list[Path]:
    found = sorted(VOCABS.glob("ggml-vocab-*.gguf"))
    return [*found, GEMMA]


@pytest.fixture(scope="module", autouse=True)
def vocab_models_fetched() -> None:
    """Every test here loads llama.cpp's vocabulary-only test models."""
    if len(_models()) < 15 or not GEMMA.is_file():
        pytest.fail("the vocabulary test models are missing: run `make setup`")


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    rng = random.Random(7)
    out = {"probe": T.probe_text()}
    for name, text in corpus(seed=11).items():
        start = rng.randrange(0, max(1, len(text) - 4_000))
        out[name] = text[start : start + 4_000]
    pieces = ["a", "Z", "1", "22", " ", "  ", "   ", "\n", "\n\n", "\t", "'s", "'LL", ".", "中",
              "。", "😀", "\u00a0", "\r\n", "<|im_start|>", "é", "<s>", "</s>", "▁", "<0x41>",
              "<unk>", "> </", "<mask>", "[MASK]", "├───────┼", "<eos>",
              "<start_of_turn>"]  # fmt: skip
    out["tricky"] = "".join(rng.choice(pieces) for _ in range(2_500))
    return out


@pytest.mark.parametrize("model", _models(), ids=lambda p: p.name)
def test_the_exact_counter_equals_llama(
    idle_host: EngineHost, texts: dict[str, str], model: Path
) -> None:
    n_vocab = idle_host.load_vocab(model)  # vocabulary only: no weights are read
    assert n_vocab > 1000
    # the whole text as llama.cpp tokenizes it from its start (`count`); the counts of chunks
    # inside a prompt (the default) differ by a space prefix only: tests/core/test_space_prefix.py
    counter = T.host_counter(model, idle_host, continuation=False)
    if model.name in THROUGH_LLAMA:
        assert isinstance(counter, T.LlamaCounter)
        assert "no fast exact counter" in counter.note
    else:
        assert isinstance(counter, T.TiktokenCounter | VocabCounter), counter.note  # type: ignore[union-attr]
    for name, text in texts.items():
        ref = idle_host.tokenize(text, add_special=False, parse_special=False)
        assert counter.encode(text) == ref, f"{model.name}: ids differ on the {name} text"
        assert counter.count(text) == len(ref)
        if name in ("probe", "tricky"):  # the texts that hold special-looking tokens
            ref_special = idle_host.tokenize(text, add_special=False, parse_special=True)
            assert counter.encode_special(text) == ref_special, f"{model.name}: {name}, special"


def test_gemma_counts_long_text_exactly_in_parallel_pieces(idle_host: EngineHost) -> None:
    # Longer than a piece, so the SentencePiece text is cut (where no entry spans the cut) and
    # encoded on several threads; the ids must be those of the whole. Both fast forms: tiktoken
    # (the one used) and tokenizers (the one used when tiktoken's does not verify).
    idle_host.load_vocab(GEMMA)
    counter = T.host_counter(GEMMA, idle_host)
    assert isinstance(counter, VocabCounter) and counter.family == "spm, tiktoken"
    rebuilt = T.vocab_encoding(GEMMA, idle_host.token_attrs())
    assert rebuilt.family == "spm, tokenizers"
    text = corpus(seed=2)["english"][:80_000] + "> </b> <p>x</p>\n\n\n  end"
    ref = idle_host.tokenize(text, add_special=False)
    assert counter.encode(text) == ref
    assert rebuilt.encode(text) == ref
    key = T.counter_key(counter)  # the planning child builds the same tiktoken form
    assert key is not None and key.startswith("split+tiktoken:")
    again = T.counter_for_key(key)
    assert T.counter_fingerprint(again) == T.counter_fingerprint(counter)
    assert again.encode(text[:5_000]) == counter.encode(text[:5_000])


def test_the_planning_child_rebuilds_the_verified_counter(idle_host: EngineHost) -> None:
    # counter_for_key builds the counter in another process without llama.cpp: it must be the
    # one verified here, with the token attributes llama.cpp reported (kept per vocabulary).
    model = VOCABS / "ggml-vocab-gemma-4.gguf"
    idle_host.load_vocab(model)
    counter = T.host_counter(model, idle_host)
    key = T.counter_key(counter)
    assert key is not None
    T._ATTRS.clear()  # as in a fresh process: the attributes come from the cache folder
    rebuilt = T.counter_for_key(key)
    assert T.counter_fingerprint(rebuilt) == T.counter_fingerprint(counter)
    text = "</s> <eos> <turn|> plain text\n"
    ref = idle_host.tokenize(text, add_special=False, parse_special=True)
    assert rebuilt.encode_special(text) == ref


@pytest.mark.parametrize("name", ["ggml-vocab-gpt-neox.gguf", "ggml-vocab-bert-bge.gguf"])
def test_without_a_fast_form_llama_counts_long_text_in_exact_parallel_pieces(
    idle_host: EngineHost, name: str
) -> None:
    # BPE (llama.cpp's "default" pre-tokenizer) and WordPiece: cut after lone newlines, the
    # pieces tokenized on the child's threads must give the ids of the whole text.
    model = VOCABS / name
    idle_host.load_vocab(model)
    counter = T.host_counter(model, idle_host)
    assert isinstance(counter, T.LlamaCounter) and counter._cut is not None
    parts = corpus(seed=6)
    text = parts["code"][:150_000] + parts["english"][:120_000] + parts["chinese"][:20_000]
    assert len(text) > T.PARALLEL_CHARS
    assert counter.encode(text) == idle_host.tokenize(text, add_special=False)
