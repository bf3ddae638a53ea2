"""Tests of the GGUF header reader (app/core/engine/gguf.py).

The reader exists so that a broken or hostile model file costs the person one clear sentence
instead of a llama.cpp crash. So most of these tests are a corpus of crafted bad headers (built by
``gguf_cases``): each must raise GGUFError and never another exception, answer quickly (every read
is bounded, so nothing should take long), and say what is wrong in a single line. Good files, the
real default model, crafted tiny models and a file written by the ``gguf`` package, must read
back exactly.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from app.core.engine.gguf import (
    ArrayValue,
    GGUFError,
    GGUFFile,
    ModelInfo,
    inspect_model,
    model_info,
    read_gguf,
)
from tests.core import gguf_cases as gc

BAD_CASES = gc.bad_cases()
QUICK_S = 1.0  # generous for a bounded read of a few kilobytes
REAL_MODEL_S = 5.0  # a whole real header: 1.8 MB, ~98,000 vocabulary strings

REAL_MODEL_SIZE = 98_362_432
REAL_DATA_OFFSET = 1_785_664
REAL_FIRST_TENSOR_END = 31_866_688  # token_embd.weight, Q8_0 576 x 49152, at data offset 0

ITEM_TYPE_NAMES = {
    gc.UINT8: "uint8",
    gc.INT8: "int8",
    gc.UINT16: "uint16",
    gc.INT16: "int16",
    gc.UINT32: "uint32",
    gc.INT32: "int32",
    gc.FLOAT32: "float32",
    gc.BOOL: "bool",
    gc.STRING: "string",
    gc.UINT64: "uint64",
    gc.INT64: "int64",
    gc.FLOAT64: "float64",
}


# --- Helpers -----------------------------------------------------------------------------------


def _write(tmp_path: Path, data: bytes, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _error_of(call: Callable[[], Any]) -> tuple[GGUFError, float]:
    """The GGUFError ``call`` raises and the seconds it took; any other exception fails the test."""
    start = time.perf_counter()
    with pytest.raises(GGUFError) as info:
        call()
    return info.value, time.perf_counter() - start


def _inspect_or_error(path: Path) -> tuple[ModelInfo | GGUFError, float]:
    """Either outcome is fine for a damaged file; any other exception fails the test."""
    start = time.perf_counter()
    try:
        result: ModelInfo | GGUFError = inspect_model(path)
    except GGUFError as exc:
        result = exc
    return result, time.perf_counter() - start


def _assert_one_sentence(err: GGUFError) -> None:
    msg = str(err)
    assert msg, "the error message is empty"
    assert msg == msg.strip(), f"stray whitespace around the message: {msg!r}"
    assert "\n" not in msg and "\r" not in msg, f"the message spans lines: {msg!r}"
    assert "Traceback" not in msg, f"the message carries a traceback: {msg!r}"


def _tiny_with(key: str, entry: bytes) -> bytes:
    """The tiny model with the metadata entry ``key`` replaced by ``entry``."""
    kvs = [e for e in gc.tiny_model_kvs(every_type=False) if not e.startswith(gc.gstr(key))]
    return gc.build_gguf([*kvs, entry], gc.tiny_tensors())


def _head(path: Path, n: int) -> bytes:
    with path.open("rb") as fh:
        return fh.read(n)


@pytest.fixture(scope="module")
def real_model_copy(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One writable copy of the real model, which the mutant tests patch and restore."""
    path = tmp_path_factory.mktemp("mutants") / model_path.name
    shutil.copyfile(model_path, path)
    return path


# --- The real default model --------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_info(model_path: Path) -> ModelInfo:
    return inspect_model(model_path)


@pytest.mark.unit
def test_real_model_card(real_info: ModelInfo) -> None:
    info = real_info
    assert info.file_size == REAL_MODEL_SIZE
    assert info.gguf_version == 3
    assert info.architecture == "llama"
    assert info.n_layers == 30
    assert info.n_embd == 576
    assert info.n_head == 9
    assert info.n_head_kv == 3
    assert info.head_dim_k == 64
    assert info.head_dim_v == 64
    assert info.n_ctx_train == 8192
    assert info.vocab_size == 49152
    assert info.tokenizer_model == "gpt2"
    assert info.tokenizer_pre == "smollm"
    assert info.quantization == "Q4_1"
    assert info.has_chat_template
    assert info.parameters > 100_000_000
    assert info.kv_heads_per_layer == (3,) * 30


@pytest.mark.unit
def test_real_model_kv_cache_sizes(real_info: ModelInfo) -> None:
    # 30 layers x 3 KV heads x (64 + 64) elements, 2 bytes each in f16.
    assert real_info.kv_bytes_per_token("f16") == 23_040
    assert real_info.kv_bytes_per_token() == 23_040
    assert real_info.kv_bytes_per_token("f32") == 46_080
    assert real_info.kv_bytes_per_token("q8_0") == 23_040 // 2 * 34 // 32
    with pytest.raises(ValueError, match="unknown KV cache type 'q3_k'"):
        real_info.kv_bytes_per_token("q3_k")


@pytest.mark.unit
def test_real_model_card_is_json_ready(real_info: ModelInfo) -> None:
    card = json.loads(json.dumps(real_info.as_dict()))
    assert card["n_layers"] == 30
    assert card["has_chat_template"] is True
    assert card["kv_bytes_per_token"]["f16"] == 23_040


@pytest.mark.unit
def test_real_model_header(model_path: Path) -> None:
    gf = read_gguf(model_path)
    assert gf.alignment == 32
    assert gf.data_offset == REAL_DATA_OFFSET
    assert len(gf.tensors) == 272
    tokens = gf.get("tokenizer.ggml.tokens")
    assert tokens == ArrayValue("string", 49152)  # large arrays keep no items by default
    first = min(gf.tensors, key=lambda t: t.offset)
    assert (first.name, first.shape, first.n_bytes) == ("token_embd.weight", (576, 49152), 30081024)


@pytest.mark.unit
def test_real_model_keep_arrays(model_path: Path) -> None:
    gf = read_gguf(model_path, keep_arrays=("tokenizer.ggml.merges",))
    merges = gf.get("tokenizer.ggml.merges")
    assert isinstance(merges, ArrayValue)
    assert merges.count == 48_900
    assert merges.items is not None and len(merges.items) == 48_900
    assert all(isinstance(m, str) and " " in m for m in merges.items[:100])
    assert gf.get("tokenizer.ggml.tokens").items is None


# --- Crafted good files ------------------------------------------------------------------------


def _assert_value(actual: Any, vtype: int, expected: Any, item_type: int | None) -> None:
    if vtype == gc.ARRAY:
        assert item_type is not None
        assert actual == ArrayValue(ITEM_TYPE_NAMES[item_type], len(expected), tuple(expected))
    elif vtype == gc.FLOAT32:
        assert actual == pytest.approx(expected, rel=1e-7)
    else:
        assert actual == expected
        assert type(actual) is type(expected)


@pytest.mark.unit
def test_tiny_model_metadata_round_trips(tmp_path: Path) -> None:
    gf = read_gguf(_write(tmp_path, gc.tiny_model()))
    assert gf.version == 3
    assert gf.architecture == "llama"
    for key, (vtype, value, item_type) in gc.EVERY_TYPE.items():
        _assert_value(gf.get(key), vtype, value, item_type)
    assert gf.get("tokenizer.ggml.tokens") == ArrayValue("string", 8, gc.TINY_VOCAB)
    assert gf.get("tokenizer.ggml.add_bos_token") is True
    assert gf.get("llama.rope.freq_base") == 10000.0


@pytest.mark.unit
def test_tiny_model_tensors_round_trip(tmp_path: Path) -> None:
    data = gc.tiny_model()
    gf = read_gguf(_write(tmp_path, data))
    expected = gc.tiny_tensors()
    assert [(t.name, t.shape, t.ggml_type, t.n_bytes) for t in gf.tensors] == [
        (t.name, t.shape, t.ggml_type, t.n_bytes) for t in expected
    ]
    assert gf.alignment == 32
    assert gf.data_offset % 32 == 0
    assert all(t.offset % 32 == 0 for t in gf.tensors)
    last = max(gf.tensors, key=lambda t: t.offset)
    assert gf.data_offset + last.offset + last.n_bytes == gf.file_size == len(data)


@pytest.mark.unit
def test_tiny_model_card(tmp_path: Path) -> None:
    info = inspect_model(_write(tmp_path, gc.tiny_model()))
    assert info.architecture == "llama"
    assert info.name == gc.TINY_NAME
    assert info.n_layers == gc.TINY_N_LAYERS
    assert info.n_embd == gc.TINY_N_EMBD
    assert info.n_head == gc.TINY_N_HEAD
    assert info.n_head_kv == gc.TINY_N_HEAD_KV
    assert info.head_dim_k == info.head_dim_v == gc.TINY_HEAD_DIM
    assert info.n_ctx_train == gc.TINY_N_CTX
    assert info.vocab_size == len(gc.TINY_VOCAB)
    assert (info.tokenizer_model, info.tokenizer_pre) == ("gpt2", "default")
    assert info.chat_template == gc.TINY_CHAT_TEMPLATE
    assert (info.bos_token_id, info.eos_token_id) == (1, 2)
    assert info.quantization == "Q8_0"
    assert info.n_tensors == len(gc.tiny_tensors())
    assert info.parameters == sum(gc.n_elements(t.shape) for t in gc.tiny_tensors())
    per_layer = gc.TINY_N_HEAD_KV * 2 * gc.TINY_HEAD_DIM
    assert info.kv_bytes_per_token("f16") == gc.TINY_N_LAYERS * per_layer * 2


@pytest.mark.unit
def test_version_2_is_accepted(tmp_path: Path) -> None:
    assert read_gguf(_write(tmp_path, gc.tiny_model(version=2))).version == 2


@pytest.mark.unit
def test_custom_alignment(tmp_path: Path) -> None:
    gf = read_gguf(_write(tmp_path, gc.tiny_model(alignment=64)))
    assert gf.alignment == 64
    assert gf.data_offset % 64 == 0
    assert all(t.offset % 64 == 0 for t in gf.tensors)


@pytest.mark.unit
def test_metadata_only_file(tmp_path: Path) -> None:
    gf = read_gguf(_write(tmp_path, gc.build_gguf([gc.ARCH])))
    assert gf.tensors == ()
    info = model_info(gf)
    assert (info.n_tensors, info.parameters, info.quantization) == (0, 0, "unknown")
    assert info.kv_bytes_per_token() is None


@pytest.mark.unit
def test_quantization_without_file_type(tmp_path: Path) -> None:
    # Without general.file_type the type holding the most bytes names the quantization.
    info = inspect_model(_write(tmp_path, gc.tiny_model(file_type=None)))
    assert info.quantization == "Q8_0"


@pytest.mark.unit
def test_per_layer_head_count_kv(tmp_path: Path) -> None:
    info = inspect_model(_write(tmp_path, gc.tiny_model(head_count_kv=[2, 1])))
    assert info.kv_heads_per_layer == (2, 1)
    assert info.n_head_kv == 2
    assert info.kv_bytes_per_token("f16") == (2 + 1) * 2 * gc.TINY_HEAD_DIM * 2


@pytest.mark.unit
def test_per_layer_head_count_kv_beyond_64_layers(tmp_path: Path) -> None:
    info = inspect_model(_write(tmp_path, gc.tiny_model(n_layers=80, head_count_kv=[2] * 80)))
    assert info.kv_heads_per_layer == (2,) * 80
    assert info.kv_bytes_per_token("f16") == 80 * 2 * 2 * gc.TINY_HEAD_DIM * 2


@pytest.mark.unit
def test_keep_arrays(tmp_path: Path) -> None:
    path = _write(tmp_path, gc.tiny_model(n_vocab=100))
    plain = read_gguf(path).get("tokenizer.ggml.tokens")
    assert plain == ArrayValue("string", 100)
    kept = read_gguf(path, keep_arrays=("tokenizer.ggml.tokens",))
    assert kept.get("tokenizer.ggml.tokens") == ArrayValue("string", 100, tuple(gc.tiny_vocab(100)))
    # Numeric arrays up to SMALL_NUMBER_ARRAY items are kept (per-layer values of deep models).
    assert kept.get("tokenizer.ggml.token_type") == ArrayValue("int32", 100, (1,) * 100)
    assert inspect_model(path).vocab_size == 100


@pytest.mark.unit
def test_file_written_by_gguf_writer(tmp_path: Path) -> None:
    path = tmp_path / "writer.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("writer")
    writer.add_block_count(2)
    writer.add_context_length(128)
    writer.add_embedding_length(32)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"t{i}" for i in range(100)])
    writer.add_chat_template("{{ messages }}")
    writer.add_tensor("token_embd.weight", np.zeros((100, 32), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    gf = read_gguf(path)
    assert [(t.name, t.shape) for t in gf.tensors] == [
        ("token_embd.weight", (32, 100)),
        ("output_norm.weight", (32,)),
    ]
    info = model_info(gf)
    assert (info.architecture, info.name, info.n_layers) == ("llama", "writer", 2)
    assert (info.n_head, info.n_head_kv, info.head_dim_k) == (4, 2, 8)
    assert info.vocab_size == 100
    assert info.has_chat_template
    assert info.parameters == 100 * 32 + 32


@pytest.mark.unit
def test_crafted_file_agrees_with_gguf_reader(tmp_path: Path) -> None:
    """The hand-packed builder must write what the reference reader reads: a check on gguf_cases."""
    path = _write(tmp_path, gc.tiny_model())
    ref = gguf.GGUFReader(path)
    ours: GGUFFile = read_gguf(path)
    assert [t.name for t in ref.tensors] == [t.name for t in ours.tensors]
    for r, o in zip(ref.tensors, ours.tensors, strict=True):
        assert tuple(int(d) for d in r.shape) == o.shape
        assert int(r.tensor_type) == o.ggml_type
        assert int(r.n_bytes) == o.n_bytes
        assert int(r.data_offset) == ours.data_offset + o.offset
    assert ref.fields["llama.block_count"].contents() == gc.TINY_N_LAYERS
    assert ref.fields["test.str"].contents() == ours.get("test.str")
    assert ref.fields["tokenizer.ggml.tokens"].contents() == list(gc.TINY_VOCAB)


# --- The bad corpus ----------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", BAD_CASES, ids=[c.name for c in BAD_CASES])
def test_bad_file_gives_one_clear_sentence(tmp_path: Path, case: gc.BadCase) -> None:
    path = _write(tmp_path, case.data)
    err, seconds = _error_of(lambda: read_gguf(path))
    _assert_one_sentence(err)
    assert case.expected in str(err)
    assert seconds < QUICK_S, f"{case.name} took {seconds:.2f} s"


@pytest.mark.unit
@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", BAD_CASES, ids=[c.name for c in BAD_CASES])
def test_inspect_model_gives_the_same_error(tmp_path: Path, case: gc.BadCase) -> None:
    path = _write(tmp_path, case.data)
    read_err, _ = _error_of(lambda: read_gguf(path))
    inspect_err, seconds = _error_of(lambda: inspect_model(path))
    assert str(inspect_err) == str(read_err)
    assert seconds < QUICK_S


@pytest.mark.unit
def test_bad_corpus_cases_differ_from_valid_files() -> None:
    """A case must break the file, not just restate a valid one (guards the corpus itself)."""
    valid = {gc.tiny_model(), gc.build_gguf([gc.ARCH])}
    assert not valid & {c.data for c in BAD_CASES}
    assert len(BAD_CASES) >= 60


# --- model_info on odd but well-formed headers -------------------------------------------------

# Headers that pass every structural check but carry values model_info cannot use. Either a
# model card or a GGUFError is acceptable; any other exception is a bug.
ODD_VALUES: list[tuple[str, str, bytes]] = [
    ("block count a float", "llama.block_count", gc.kv("llama.block_count", gc.FLOAT32, 2.0)),
    ("block count negative", "llama.block_count", gc.kv("llama.block_count", gc.INT32, -2)),
    ("block count zero", "llama.block_count", gc.kv("llama.block_count", gc.UINT32, 0)),
    (
        "head count an empty array",
        "llama.attention.head_count",
        gc.kv("llama.attention.head_count", gc.ARRAY, [], gc.INT32),
    ),
    (
        "head count zero",
        "llama.attention.head_count",
        gc.kv("llama.attention.head_count", gc.UINT32, 0),
    ),
    ("architecture a number", "general.architecture", gc.kv("general.architecture", gc.UINT32, 5)),
    ("name a number", "general.name", gc.kv("general.name", gc.UINT32, 5)),
    ("file type unknown", "general.file_type", gc.kv("general.file_type", gc.UINT32, 9999)),
    (
        "token list not an array",
        "tokenizer.ggml.tokens",
        gc.kv("tokenizer.ggml.tokens", gc.STRING, "abc"),
    ),
]

ODD_VALUES_ABSURD = [
    pytest.param(
        "llama.block_count",
        gc.kv("llama.block_count", gc.UINT64, 2**62),
        id="block count 2**62",
    ),
    pytest.param(
        "llama.block_count",
        gc.kv("llama.block_count", gc.UINT64, gc.U64_MAX),
        id="block count 2**64-1",
    ),
    pytest.param(
        "llama.attention.head_count",
        gc.kv("llama.attention.head_count", gc.ARRAY, ["x", "y"], gc.STRING),
        id="head count an array of strings",
    ),
    pytest.param(
        "llama.attention.head_count_kv",
        gc.kv("llama.attention.head_count_kv", gc.ARRAY, [math.nan, math.nan], gc.FLOAT32),
        id="head count kv an array of NaN",
    ),
    pytest.param(
        "llama.attention.head_count",
        gc.kv("llama.attention.head_count", gc.ARRAY, [math.inf, 1.0], gc.FLOAT32),
        id="head count an array with infinity",
    ),
]


@pytest.mark.unit
@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("key", "entry"),
    [pytest.param(key, entry, id=name) for name, key, entry in ODD_VALUES] + ODD_VALUES_ABSURD,
)
def test_odd_values_give_a_card_or_one_sentence(tmp_path: Path, key: str, entry: bytes) -> None:
    result, seconds = _inspect_or_error(_write(tmp_path, _tiny_with(key, entry)))
    if isinstance(result, GGUFError):
        _assert_one_sentence(result)
    else:
        json.dumps(result.as_dict())
    assert seconds < QUICK_S


# --- Damaged copies of the real model ----------------------------------------------------------

# (bytes kept, expected phrase): cuts in the fixed header, the metadata, the tensor infos, the data.
REAL_CUTS: list[tuple[int, str]] = [
    (4, "file is truncated: it ends before the GGUF version"),
    (8, "file is truncated: the tensor count needs 8 bytes at byte 8"),
    (20, "file is truncated: the metadata count needs 8 bytes at byte 16"),
    (24, "header claims 33 metadata entries, more than the file can hold"),
    (100, "header claims 33 metadata entries, more than the file can hold"),
    (5000, "header claims 272 tensors, more than the file can hold"),
    (1_000_000, "'tokenizer.ggml.merges' claims 48,900 elements, more than the file can hold"),
    (REAL_DATA_OFFSET - 1, "file is truncated: the data offset of 'output_norm.weight' needs 8"),
    (
        REAL_DATA_OFFSET,
        f"file is truncated: tensor data ends at byte {REAL_FIRST_TENSOR_END:,}, "
        f"file has {REAL_DATA_OFFSET:,}",
    ),
    (
        REAL_DATA_OFFSET + 1000,
        f"file is truncated: tensor data ends at byte {REAL_FIRST_TENSOR_END:,}, "
        f"file has {REAL_DATA_OFFSET + 1000:,}",
    ),
]


@pytest.mark.unit
@pytest.mark.timeout(30)
@pytest.mark.parametrize(("keep", "expected"), REAL_CUTS, ids=[str(k) for k, _ in REAL_CUTS])
def test_truncated_real_model(tmp_path: Path, model_path: Path, keep: int, expected: str) -> None:
    path = _write(tmp_path, _head(model_path, keep))
    err, seconds = _error_of(lambda: inspect_model(path))
    _assert_one_sentence(err)
    assert expected in str(err)
    assert seconds < REAL_MODEL_S


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_real_model_missing_its_last_byte(tmp_path: Path, model_path: Path) -> None:
    path = tmp_path / model_path.name
    shutil.copyfile(model_path, path)
    os.truncate(path, REAL_MODEL_SIZE - 1)
    err, _ = _error_of(lambda: read_gguf(path))
    assert str(err) == (
        f"file is truncated: tensor data ends at byte {REAL_MODEL_SIZE:,}, "
        f"file has {REAL_MODEL_SIZE - 1:,}"
    )


# Half the mutants anywhere in the first 2 MB (mostly the vocabulary), half in the first KB,
# where the counts, keys, value types and model scalars live.
MUTANTS = gc.byte_flips(seed=1, count=15, span=2 * 1024 * 1024) + gc.byte_flips(
    seed=2, count=15, span=1024
)


@pytest.fixture
def mutated(real_model_copy: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The copy of the real model with one mutant's bytes flipped, restored afterwards."""
    flips: list[tuple[int, int]] = request.param
    with real_model_copy.open("r+b") as fh:
        original = []
        for pos, mask in flips:
            fh.seek(pos)
            byte = fh.read(1)[0]
            original.append((pos, byte))
            fh.seek(pos)
            fh.write(bytes([byte ^ mask]))
    try:
        yield real_model_copy
    finally:
        with real_model_copy.open("r+b") as fh:
            for pos, byte in reversed(original):
                fh.seek(pos)
                fh.write(bytes([byte]))


@pytest.mark.unit
@pytest.mark.timeout(30)
@pytest.mark.parametrize("mutated", MUTANTS, ids=[f"mutant{i}" for i in range(30)], indirect=True)
def test_byte_flipped_real_model(mutated: Path) -> None:
    result, seconds = _inspect_or_error(mutated)
    if isinstance(result, GGUFError):
        _assert_one_sentence(result)
    assert seconds < REAL_MODEL_S


@pytest.mark.unit
def test_mutants_are_restored(model_path: Path, real_model_copy: Path) -> None:
    """Runs after the mutants: the shared copy must be byte-identical again."""
    assert _head(real_model_copy, 2 * 1024 * 1024) == _head(model_path, 2 * 1024 * 1024)


# --- Paths that are not readable model files ---------------------------------------------------


@pytest.mark.unit
def test_missing_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.gguf"
    err, _ = _error_of(lambda: inspect_model(path))
    _assert_one_sentence(err)
    assert str(err) == f"model file not found: {path}"


@pytest.mark.unit
def test_directory(tmp_path: Path) -> None:
    err, _ = _error_of(lambda: read_gguf(tmp_path))
    _assert_one_sentence(err)
    assert str(err) == f"{tmp_path} is a folder, not a model file"


def test_unreadable_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod cannot take read permission away")
    path = _write(tmp_path, gc.tiny_model())
    path.chmod(0)
    try:
        err, _ = _error_of(lambda: read_gguf(path))
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    _assert_one_sentence(err)
    assert str(err) == f"cannot read {path}: permission denied"


@pytest.mark.unit
def test_device_file_is_not_a_model() -> None:
    err, seconds = _error_of(lambda: read_gguf("/dev/zero"))
    assert "not a regular file" in str(err)
    assert seconds < QUICK_S


@pytest.mark.unit
@pytest.mark.timeout(30)
def test_named_pipe_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)

    def unblock() -> None:
        """Opens the write end after a while, so a read blocked in open() ends."""
        time.sleep(2 * QUICK_S)
        with contextlib.suppress(OSError):  # no reader waiting: read_gguf did not block
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    rescuer = threading.Thread(target=unblock, daemon=True)
    rescuer.start()
    try:
        err, seconds = _error_of(lambda: read_gguf(fifo))
    finally:
        rescuer.join()
    _assert_one_sentence(err)
    assert seconds < QUICK_S, f"read_gguf blocked on a named pipe for {seconds:.1f} s"
