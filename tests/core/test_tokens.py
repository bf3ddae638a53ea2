"""Token counters: the fast exact encoding must equal llama.cpp's tokenizer on any text."""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import tokens as T
from app.core.textutil import scrub
from app.core.vocab_tokenizer import workers
from tests.core.token_corpus import corpus, utf8_size


@pytest.fixture(scope="module")
def fast(model_path: Path) -> T.TiktokenCounter:
    return T.gguf_encoding(model_path)


@pytest.fixture(scope="module")
def llama(engine: object) -> T.Tokenize:
    return T.host_tokenize(engine)


def test_differential_corpus_over_5_mb(fast: T.TiktokenCounter, llama: T.Tokenize) -> None:
    parts = corpus(seed=3)
    assert utf8_size(parts) > 5_000_000
    for name, text in parts.items():
        ref = llama(text, False)
        assert fast.encode(text) == ref, f"token ids differ on the {name} part"
        assert fast.count(text) == len(ref), f"count differs on the {name} part"


def test_long_texts_are_split_only_where_tokens_cannot_change(
    fast: T.TiktokenCounter, llama: T.Tokenize
) -> None:
    parts = corpus(seed=5)
    text = parts["english"][:400_000] + parts["chinese"][:100_000] + parts["code"][:400_000]
    for spaces in (True, False):
        pieces = T.split_at_safe_points(text, spaces)
        assert "".join(pieces) == text
        assert len(pieces) > 1 or workers() < 2
    ref = llama(text, False)
    assert fast.encode(text) == ref and fast.count(text) == len(ref)
    cl = T.cl100k()
    assert cl.encode(text) == cl.encoding.encode_ordinary(text)  # the newline rule, for cl100k


_FIXTURES_OK = [HealthCheck.function_scoped_fixture]


@settings(max_examples=150, deadline=None, suppress_health_check=_FIXTURES_OK)
@given(st.text(alphabet=st.characters(codec=None), max_size=300))
def test_random_text_matches_llama(fast: T.TiktokenCounter, llama: T.Tokenize, text: str) -> None:
    assert fast.encode(text) == llama(text, False)


@settings(max_examples=60, deadline=None, suppress_health_check=_FIXTURES_OK)
@given(
    st.lists(
        st.sampled_from(["a", "Z", "1", "22", " ", "  ", "\n", "\n\n", "\t", "'s", "'LL", ".",
                         "中", "。", "😀", "\u00a0", "\r\n", "<|im_start|>", "\ud800", "é"]),
        max_size=60,
    ).map("".join)
)  # fmt: skip
def test_tricky_joins_match_llama(fast: T.TiktokenCounter, llama: T.Tokenize, text: str) -> None:
    assert fast.encode(text) == llama(text, False)
    assert fast.count(text) == len(llama(text, False))


def test_special_tokens_parsed_only_when_asked(fast: T.TiktokenCounter, llama: T.Tokenize) -> None:
    text = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    assert fast.encode_special(text) == llama(text, True)
    assert fast.encode(text) == llama(text, False)
    assert fast.count_special(text) < fast.count(text)


def test_bytes_missing_from_the_vocabulary_are_dropped_like_llama(
    fast: T.TiktokenCounter, llama: T.Tokenize
) -> None:
    # SmolLM2 has no token for bytes such as 0x04 or 0xF1 (the lead byte of U+40000-U+7FFFF);
    # llama.cpp emits nothing for them.
    for text in ("a\x04b\x06c", "x\U00040000y", "\U0004ffff", "plain é 中 😀", "\x1d\x1d"):
        assert fast.encode(text) == llama(text, False), repr(text)
        assert fast.count(text) == len(llama(text, False)), repr(text)


@pytest.mark.unit
def test_count_many_equals_count(fast: T.TiktokenCounter) -> None:
    texts = [f"Paragraph {i}: " + "word " * i for i in range(40)]
    assert fast.count_many(texts) == [fast.count(t) for t in texts]


def test_verify_passes_for_the_right_pattern_and_catches_a_wrong_one(
    fast: T.TiktokenCounter, llama: T.Tokenize
) -> None:
    assert T.verify(fast, llama) is None
    wrong = T.TiktokenCounter(
        tiktoken.Encoding(
            name="wrong-pre-tokenizer",
            pat_str=T.PRE_TOKENIZERS["gpt2"][0],  # GPT-2 without SmolLM's digit split
            mergeable_ranks=fast.encoding._mergeable_ranks,
            special_tokens=fast.encoding._special_tokens,
        ),
        name="wrong",
        exact=True,
        rank_to_id=fast._rank_to_id,
    )
    assert T.verify(wrong, llama) is not None


@pytest.mark.unit
def test_exact_counter_falls_back_to_llama_when_verification_fails(model_path: Path) -> None:
    calls: list[str] = []

    def lying(text: str, special: bool) -> list[int]:
        calls.append(text)
        return [1, 2, 3]

    counter = T.exact_counter(model_path, lying)
    assert isinstance(counter, T.LlamaCounter) and counter.exact
    assert counter.count("anything at all") == 3 and calls


def test_exact_counter_uses_the_fast_path_when_verified(
    model_path: Path, llama: T.Tokenize
) -> None:
    counter = T.exact_counter(model_path, llama)
    assert isinstance(counter, T.TiktokenCounter) and counter.exact


@pytest.mark.unit
def test_cl100k_is_offline_and_an_estimate() -> None:
    counter = T.cl100k()
    assert not counter.exact and counter.name == "cl100k_base"
    # Known cl100k_base ids (the same as tiktoken's published encoding).
    assert counter.encode("hello world") == [15339, 1917]
    assert counter.count("<|endoftext|>") > 1  # special text counts as ordinary text


@pytest.mark.unit
def test_scrub_replaces_lone_surrogates_only() -> None:
    assert scrub("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    same = "plain 😀 text"
    assert scrub(same) is same


# -- models whose vocabulary the fast encoding cannot express --------------------------------


def _write_gguf(path: Path, *, model: str, pre: str, tokens: list[str], merges: list[str]) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types([1] * len(tokens))
    writer.add_tensor("token_embd.weight", __import__("numpy").zeros((4, 4), dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _byte_tokens() -> list[str]:
    table = T._unicode_to_byte()
    by_byte = {b: c for c, b in table.items()}
    return [by_byte[b] for b in range(256)]


@pytest.mark.unit
def test_duplicate_merge_results_take_the_first_rank_like_true_bpe(tmp_path: Path) -> None:
    # Llama 3 builds "ĠĠĠĠ" by two merges; tiktoken ranks by result, so the first one's rank is
    # kept. On these texts that is what a merge-ranked BPE (tokenizers) gives as well.
    path = tmp_path / "dup.gguf"
    _write_gguf(path, model="gpt2", pre="gpt-2", tokens=[*_byte_tokens(), "ab", "bc", "abc"],
                merges=["a b", "b c", "ab c", "a bc"])  # fmt: skip
    fast, true_bpe = T.gguf_encoding(path), T.vocab_encoding(path)
    for text in ("abc", "abcabc", "bcab", "aabbcc", "abcbc", "cab ab bc"):
        assert fast.encode(text) == true_bpe.encode(text), text


@pytest.mark.unit
def test_unknown_pre_tokenizer_is_refused_and_llama_is_used(tmp_path: Path) -> None:
    path = tmp_path / "pre.gguf"
    _write_gguf(path, model="gpt2", pre="brand-new", tokens=[*_byte_tokens(), "ab"],
                merges=["a b"])  # fmt: skip
    with pytest.raises(T.TokenizerUnsupported, match="pre-tokenizer"):
        T.exact_counter(path)
    counter = T.exact_counter(path, lambda text, special: list(struct.pack("<I", len(text))))
    assert isinstance(counter, T.LlamaCounter)
    assert "no fast exact counter" in counter.note and "brand-new" in counter.note


@pytest.mark.unit
def test_a_fast_form_that_disagrees_with_llama_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "spm.gguf"
    _write_gguf(path, model="llama", pre="default", tokens=["<unk>", "▁a", "▁", "a"], merges=[])
    assert isinstance(T.exact_counter(path), T.VocabCounter)  # unchecked: the fastest form
    counter = T.exact_counter(path, lambda text, special: [0] * len(text))
    assert isinstance(counter, T.LlamaCounter) and "differs from llama.cpp" in counter.note


@pytest.mark.unit
def test_tokens_its_merges_never_build_are_detected() -> None:
    ranks = {bytes([b]): b for b in range(256)}
    pairs = {}
    for i, (left, right) in enumerate([(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")]):
        ranks[left + right] = 256 + i
        pairs[(left, right)] = 256 + i
    # BPE on "abc" merges b+c first and then has no (a, bc) merge: "abc" is never built.
    assert T.unreachable_tokens(ranks, pairs) == [b"abc"]


@pytest.mark.unit
def test_the_fingerprint_names_the_vocabulary_not_the_file(
    fast: T.TiktokenCounter, model_path: Path, tmp_path: Path
) -> None:
    link = tmp_path / "renamed.gguf"
    link.symlink_to(model_path)
    assert T.counter_fingerprint(T.gguf_encoding(link)) == T.counter_fingerprint(fast) is not None
    one, other = tmp_path / "one.gguf", tmp_path / "other.gguf"
    _write_gguf(one, model="gpt2", pre="gpt2", tokens=[*_byte_tokens(), "ab"], merges=["a b"])
    _write_gguf(other, model="gpt2", pre="gpt2", tokens=[*_byte_tokens(), "bc"], merges=["b c"])
    prints = {T.counter_fingerprint(T.gguf_encoding(p)) for p in (one, other, model_path)}
    prints.add(T.counter_fingerprint(T.cl100k()))
    assert len(prints) == 4, "another vocabulary is another fingerprint"
    assert T.counter_fingerprint(T.LlamaCounter(lambda text, special: [], name="x")) is None
