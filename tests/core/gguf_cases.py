"""Crafted GGUF files for the header-reader tests.

Real models are big and always well formed, so they cannot show how the reader copes with a hostile
header. These helpers pack GGUF bytes by hand (magic, version, counts, metadata of every value type,
tensor infos, alignment padding, tensor data) so a test can build a tiny valid file and then break
exactly one thing in it. The layout is written from the GGUF specification, independently of the
reader under test and of the ``gguf`` package, so the two cannot share a mistake.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value type codes.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL = range(8)
STRING, ARRAY, UINT64, INT64, FLOAT64 = range(8, 13)

_SCALAR_FORMATS: dict[int, str] = {
    UINT8: "<B",
    INT8: "<b",
    UINT16: "<H",
    INT16: "<h",
    UINT32: "<I",
    INT32: "<i",
    FLOAT32: "<f",
    BOOL: "<B",
    UINT64: "<Q",
    INT64: "<q",
    FLOAT64: "<d",
}

# ggml tensor type codes used here, with (elements per block, bytes per block).
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1, GGML_Q8_0 = 0, 1, 2, 3, 8
GGML_SIZES: dict[int, tuple[int, int]] = {
    GGML_F32: (1, 4),
    GGML_F16: (1, 2),
    GGML_Q4_0: (32, 18),
    GGML_Q4_1: (32, 20),
    GGML_Q8_0: (32, 34),
}

# Caps of the reader, restated so the bad corpus can sit just past them.
MAX_KEY_BYTES = 64 * 1024
MAX_STRING_BYTES = 16 * 1024 * 1024
SMALL_ARRAY_ITEMS = 64

NEAR_2_63 = 2**63 - 1
U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1


# --- Low-level packing -------------------------------------------------------------------------


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def gstr(s: str | bytes) -> bytes:
    """A GGUF string: u64 byte length, then the bytes (no terminator)."""
    raw = s.encode("utf-8") if isinstance(s, str) else s
    return u64(len(raw)) + raw


def scalar(vtype: int, value: Any) -> bytes:
    """The payload of a scalar or string value (without its type code)."""
    if vtype == STRING:
        return gstr(value)
    return struct.pack(_SCALAR_FORMATS[vtype], value)


def array(item_type: int, items: Sequence[Any]) -> bytes:
    """The payload of an array value: element type, count, elements."""
    return u32(item_type) + u64(len(items)) + b"".join(scalar(item_type, v) for v in items)


def raw_kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    """A metadata entry with any type code and any payload (for malformed entries)."""
    return gstr(key) + u32(vtype) + payload


def kv(key: str | bytes, vtype: int, value: Any, item_type: int | None = None) -> bytes:
    """A well-formed metadata entry; arrays need ``item_type``."""
    if vtype == ARRAY:
        if item_type is None:
            raise ValueError("an array entry needs item_type")
        return raw_kv(key, vtype, array(item_type, value))
    return raw_kv(key, vtype, scalar(vtype, value))


def header(n_tensors: int, n_kv: int, *, version: int = 3, magic: bytes = MAGIC) -> bytes:
    return magic + u32(version) + u64(n_tensors) + u64(n_kv)


def tensor_info(
    name: str | bytes, shape: Sequence[int], ggml_type: int, offset: int, n_dims: int | None = None
) -> bytes:
    """One tensor info; ``n_dims`` can be set to disagree with ``shape``."""
    dims = len(shape) if n_dims is None else n_dims
    return gstr(name) + u32(dims) + b"".join(u64(d) for d in shape) + u32(ggml_type) + u64(offset)


def align(n: int, alignment: int) -> int:
    return n + (-n % alignment)


def tensor_nbytes(shape: Sequence[int], ggml_type: int) -> int:
    block, size = GGML_SIZES[ggml_type]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


def n_elements(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class Tensor:
    """A tensor to lay out; offset None places it after the previous one, aligned."""

    name: str | bytes
    shape: tuple[int, ...]
    ggml_type: int = GGML_F32
    offset: int | None = None
    n_dims: int | None = None

    @property
    def n_bytes(self) -> int:
        return tensor_nbytes(self.shape, self.ggml_type)


def build_gguf(
    kvs: Sequence[bytes],
    tensors: Sequence[Tensor] = (),
    *,
    version: int = 3,
    magic: bytes = MAGIC,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    alignment: int = DEFAULT_ALIGNMENT,
) -> bytes:
    """A whole GGUF file; the counts default to the real ones and can be set to lie.

    ``alignment`` only lays the data out; a file with a non-default alignment must also carry a
    ``general.alignment`` entry in ``kvs``. The data section ends exactly at the end of the
    tensor that ends last (no trailing padding), and tensor bytes follow a fixed pattern.
    """
    infos: list[bytes] = []
    end = 0
    data_end = 0
    for t in tensors:
        offset = align(end, alignment) if t.offset is None else t.offset
        infos.append(tensor_info(t.name, t.shape, t.ggml_type, offset, t.n_dims))
        end = offset + t.n_bytes
        data_end = max(data_end, end)
    head = (
        header(
            len(tensors) if n_tensors is None else n_tensors,
            len(kvs) if n_kv is None else n_kv,
            version=version,
            magic=magic,
        )
        + b"".join(kvs)
        + b"".join(infos)
    )
    if not tensors:
        return head
    head += bytes(-len(head) % alignment)
    return head + bytes(i % 251 for i in range(data_end))


# --- A valid tiny model ------------------------------------------------------------------------


TINY_N_LAYERS = 2
TINY_N_EMBD = 64
TINY_N_HEAD = 4
TINY_N_HEAD_KV = 2
TINY_N_CTX = 256
TINY_N_FF = 128
TINY_HEAD_DIM = TINY_N_EMBD // TINY_N_HEAD
TINY_VOCAB: tuple[str, ...] = ("<unk>", "<s>", "</s>", "a", "b", "ab", "é", "日本")
TINY_CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
TINY_NAME = "Tiny Test Model"
LLAMA_FTYPE_Q8_0 = 7

# One entry of every value type, with the value the reader must give back.
EVERY_TYPE: dict[str, tuple[int, Any, int | None]] = {
    "test.u8": (UINT8, 200, None),
    "test.i8": (INT8, -100, None),
    "test.u16": (UINT16, 60_000, None),
    "test.i16": (INT16, -30_000, None),
    "test.u32": (UINT32, U32_MAX, None),
    "test.i32": (INT32, -(2**31), None),
    "test.f32": (FLOAT32, 1.5, None),
    "test.bool": (BOOL, True, None),
    "test.str": (STRING, "héllo, wörld", None),
    "test.u64": (UINT64, U64_MAX, None),
    "test.i64": (INT64, -(2**63), None),
    "test.f64": (FLOAT64, 0.1, None),
    "test.empty_str": (STRING, "", None),
    "test.arr_u8": (ARRAY, [0, 1, 255], UINT8),
    "test.arr_i16": (ARRAY, [-1, 2], INT16),
    "test.arr_f32": (ARRAY, [0.5, -2.0], FLOAT32),
    "test.arr_f64": (ARRAY, [1e300], FLOAT64),
    "test.arr_bool": (ARRAY, [True, False], BOOL),
    "test.arr_u64": (ARRAY, [U64_MAX], UINT64),
    "test.arr_str": (ARRAY, ["x", "", "ü"], STRING),
    "test.arr_empty": (ARRAY, [], INT32),
}


def tiny_vocab(n: int) -> list[str]:
    """TINY_VOCAB, extended with made-up tokens up to ``n`` entries."""
    return list(TINY_VOCAB[:n]) + [f"tok{i}" for i in range(len(TINY_VOCAB), n)]


def tiny_tensors(n_layers: int = TINY_N_LAYERS, n_vocab: int = len(TINY_VOCAB)) -> list[Tensor]:
    """A handful of F32, F16 and Q8_0 tensors shaped like a llama model (ggml order: ne0 first)."""
    tensors = [
        Tensor("token_embd.weight", (TINY_N_EMBD, n_vocab), GGML_F16),
        Tensor("output_norm.weight", (TINY_N_EMBD,), GGML_F32),
    ]
    kv_width = TINY_N_HEAD_KV * TINY_HEAD_DIM
    for i in range(n_layers):
        tensors += [
            Tensor(f"blk.{i}.attn_norm.weight", (TINY_N_EMBD,), GGML_F32),
            Tensor(f"blk.{i}.attn_q.weight", (TINY_N_EMBD, TINY_N_EMBD), GGML_Q8_0),
            Tensor(f"blk.{i}.attn_k.weight", (TINY_N_EMBD, kv_width), GGML_Q8_0),
            Tensor(f"blk.{i}.attn_v.weight", (TINY_N_EMBD, kv_width), GGML_F16),
        ]
    return tensors


def tiny_model_kvs(
    *,
    n_layers: int = TINY_N_LAYERS,
    head_count_kv: int | Sequence[int] = TINY_N_HEAD_KV,
    n_vocab: int = len(TINY_VOCAB),
    alignment: int | None = None,
    file_type: int | None = LLAMA_FTYPE_Q8_0,
    every_type: bool = True,
) -> list[bytes]:
    kvs = [
        kv("general.architecture", STRING, "llama"),
        kv("general.name", STRING, TINY_NAME),
        kv("llama.block_count", UINT32, n_layers),
        kv("llama.context_length", UINT32, TINY_N_CTX),
        kv("llama.embedding_length", UINT32, TINY_N_EMBD),
        kv("llama.feed_forward_length", UINT32, TINY_N_FF),
        kv("llama.attention.head_count", UINT32, TINY_N_HEAD),
        kv("llama.rope.freq_base", FLOAT32, 10000.0),
        kv("llama.attention.layer_norm_rms_epsilon", FLOAT32, 1e-5),
        kv("tokenizer.ggml.model", STRING, "gpt2"),
        kv("tokenizer.ggml.pre", STRING, "default"),
        kv("tokenizer.ggml.tokens", ARRAY, tiny_vocab(n_vocab), STRING),
        kv("tokenizer.ggml.token_type", ARRAY, [1] * n_vocab, INT32),
        kv("tokenizer.ggml.bos_token_id", UINT32, 1),
        kv("tokenizer.ggml.eos_token_id", UINT32, 2),
        kv("tokenizer.ggml.add_bos_token", BOOL, True),
        kv("tokenizer.chat_template", STRING, TINY_CHAT_TEMPLATE),
    ]
    if isinstance(head_count_kv, int):
        kvs.append(kv("llama.attention.head_count_kv", UINT32, head_count_kv))
    else:
        kvs.append(kv("llama.attention.head_count_kv", ARRAY, list(head_count_kv), INT32))
    if alignment is not None:
        kvs.append(kv("general.alignment", UINT32, alignment))
    if file_type is not None:
        kvs.append(kv("general.file_type", UINT32, file_type))
    if every_type:
        kvs += [kv(k, t, v, it) for k, (t, v, it) in EVERY_TYPE.items()]
    return kvs


def tiny_model(
    *,
    version: int = 3,
    n_layers: int = TINY_N_LAYERS,
    head_count_kv: int | Sequence[int] = TINY_N_HEAD_KV,
    n_vocab: int = len(TINY_VOCAB),
    alignment: int = DEFAULT_ALIGNMENT,
    file_type: int | None = LLAMA_FTYPE_Q8_0,
    extra_kvs: Iterable[bytes] = (),
) -> bytes:
    """A valid, model-like GGUF file of a few kilobytes."""
    kvs = tiny_model_kvs(
        n_layers=n_layers,
        head_count_kv=head_count_kv,
        n_vocab=n_vocab,
        alignment=None if alignment == DEFAULT_ALIGNMENT else alignment,
        file_type=file_type,
    )
    kvs += list(extra_kvs)
    return build_gguf(kvs, tiny_tensors(n_layers, n_vocab), version=version, alignment=alignment)


# --- The bad corpus ----------------------------------------------------------------------------


class BadCase(NamedTuple):
    name: str
    data: bytes
    expected: str  # a phrase the GGUFError message must contain


ARCH = kv("general.architecture", STRING, "llama")


def _one_kv(entry: bytes) -> bytes:
    """A file whose only metadata is ``entry`` (and no tensors)."""
    return build_gguf([entry])


def _one_tensor(t: Tensor, *extra: Tensor, kvs: Sequence[bytes] = (ARCH,)) -> bytes:
    return build_gguf(list(kvs), [t, *extra])


def _header_cases() -> list[BadCase]:
    valid = tiny_model()
    return [
        BadCase("empty file", b"", "not a GGUF file: it is only 0 bytes long"),
        BadCase("3-byte file", b"GGU", "not a GGUF file: it is only 3 bytes long"),
        BadCase("wrong magic", b"GGML" + valid[4:], "the first four bytes are not 'GGUF'"),
        BadCase("lowercase magic", b"gguf" + valid[4:], "the first four bytes are not 'GGUF'"),
        BadCase("version 1", header(0, 0, version=1) + bytes(64), "GGUF version 1 is obsolete"),
        BadCase("version 99", header(0, 0, version=99), "unsupported GGUF version 99"),
        BadCase("version 0", header(0, 0, version=0), "unsupported GGUF version 0"),
        BadCase(
            "big-endian version",
            MAGIC + struct.pack(">I", 3) + bytes(16),
            "unsupported GGUF version 50331648",
        ),
        BadCase("cut after magic", MAGIC, "file is truncated: it ends before the GGUF version"),
        BadCase("cut in the version", MAGIC + b"\x03\x00", "ends before the GGUF version"),
        BadCase(
            "cut in the tensor count",
            valid[:12],
            "file is truncated: the tensor count needs 8 bytes at byte 8",
        ),
        BadCase(
            "cut in the metadata count",
            valid[:19],
            "file is truncated: the metadata count needs 8 bytes at byte 16",
        ),
        BadCase(
            "kv count near 2**63",
            header(0, NEAR_2_63) + ARCH,
            f"header claims {NEAR_2_63:,} metadata entries, more than the file can hold",
        ),
        BadCase(
            "kv count 2**64-1",
            header(0, U64_MAX) + ARCH,
            f"header claims {U64_MAX:,} metadata entries, more than the file can hold",
        ),
        BadCase(
            "kv count past the file",
            header(0, 1000) + ARCH,
            "header claims 1,000 metadata entries, more than the file can hold",
        ),
        BadCase(
            "tensor count near 2**63",
            header(NEAR_2_63, 1) + ARCH,
            f"header claims {NEAR_2_63:,} tensors, more than the file can hold",
        ),
        BadCase(
            "tensor count 2**64-1",
            header(U64_MAX, 1) + ARCH,
            f"header claims {U64_MAX:,} tensors, more than the file can hold",
        ),
    ]


def _string_cases() -> list[BadCase]:
    name_key = gstr("general.name") + u32(STRING)
    return [
        BadCase(
            "key length near 2**63",
            header(0, 1) + u64(NEAR_2_63) + b"general.architecture",
            f"metadata key 0 claims {NEAR_2_63:,} bytes, more than the limit of 65,536",
        ),
        BadCase(
            "key length just over the cap",
            header(0, 1) + u64(MAX_KEY_BYTES + 1) + b"k" * 64,
            "metadata key 0 claims 65,537 bytes, more than the limit of 65,536",
        ),
        BadCase(
            "value length near 2**63",
            header(0, 1) + name_key + u64(NEAR_2_63) + b"tiny",
            f"the value of 'general.name' claims {NEAR_2_63:,} bytes, more than the limit",
        ),
        BadCase(
            "value length 2**64-1",
            header(0, 1) + name_key + u64(U64_MAX) + b"tiny",
            f"claims {U64_MAX:,} bytes, more than the limit of 16,777,216",
        ),
        BadCase(
            "value length just over the cap",
            header(0, 1) + name_key + u64(MAX_STRING_BYTES + 1) + b"tiny",
            "the value of 'general.name' claims 16,777,217 bytes, "
            "more than the limit of 16,777,216",
        ),
        BadCase(
            "value length past the file",
            header(0, 1) + name_key + u64(1000) + b"tiny",
            "file is truncated: the value of 'general.name' needs 1,000 bytes at byte",
        ),
        BadCase(
            "key cut short",
            header(0, 1) + u64(20) + b"general",
            "file is truncated: metadata key 0 needs 20 bytes at byte 32",
        ),
        BadCase(
            "value type missing",
            header(0, 1) + gstr("general.name"),
            "file is truncated: the type of 'general.name' needs 4 bytes",
        ),
        BadCase(
            "scalar value cut short",
            header(0, 1) + gstr("llama.block_count") + u32(UINT32) + b"\x01\x00",
            "file is truncated: the value of 'llama.block_count' needs 4 bytes",
        ),
        BadCase(
            "empty key",
            build_gguf([ARCH, kv("", UINT32, 1)]),
            "metadata key 1 is empty",
        ),
        BadCase(
            "invalid UTF-8 key",
            _one_kv(kv(b"general.\xff\xfename", STRING, "x")),
            "metadata key 0 is not valid UTF-8 (byte 8 of the string)",
        ),
        BadCase(
            "invalid UTF-8 value",
            _one_kv(kv("general.name", STRING, b"ab\xc3")),
            "the value of 'general.name' is not valid UTF-8 (byte 2 of the string)",
        ),
        BadCase(
            "invalid UTF-8 tensor name",
            _one_tensor(Tensor(b"w\x80", (32,))),
            "the name of tensor 0 is not valid UTF-8",
        ),
        BadCase(
            "duplicate metadata key",
            build_gguf(
                [ARCH, kv("llama.block_count", UINT32, 2), kv("llama.block_count", UINT32, 3)]
            ),
            "metadata key 'llama.block_count' appears twice",
        ),
    ]


def _value_cases() -> list[BadCase]:
    def arr(item_type: int, count: int, body: bytes = b"") -> bytes:
        return raw_kv("test.arr", ARRAY, u32(item_type) + u64(count) + body)

    many = [gstr(f"t{i}") for i in range(SMALL_ARRAY_ITEMS + 6)]
    many[3] = u64(NEAR_2_63) + b"t3"
    return [
        BadCase(
            "bool value 2",
            _one_kv(kv("test.flag", BOOL, 2)),
            "'test.flag' is a bool with the invalid value 2",
        ),
        BadCase("bool value 255", _one_kv(kv("test.flag", BOOL, 255)), "invalid value 255"),
        BadCase(
            "value type 13",
            _one_kv(raw_kv("test.x", 13, u32(1))),
            "'test.x' has unknown value type code 13",
        ),
        BadCase(
            "value type 0xFFFFFFFF",
            _one_kv(raw_kv("test.x", U32_MAX, u32(1))),
            "'test.x' has unknown value type code 4294967295",
        ),
        BadCase(
            "array count near 2**63",
            _one_kv(arr(UINT8, NEAR_2_63, bytes(16))),
            f"metadata 'test.arr' claims {NEAR_2_63:,} elements, more than the file can hold",
        ),
        BadCase(
            "array count 2**64-1 of strings",
            _one_kv(arr(STRING, U64_MAX, gstr("a"))),
            f"claims {U64_MAX:,} elements, more than the file can hold",
        ),
        BadCase(
            "array count past the file",
            _one_kv(arr(UINT32, 100, bytes(16))),
            "metadata 'test.arr' claims 100 elements, more than the file can hold",
        ),
        BadCase(
            "array of arrays",
            _one_kv(arr(ARRAY, 1, u32(UINT8) + u64(1) + b"\x01")),
            "metadata 'test.arr' is a nested array, which GGUF does not allow",
        ),
        BadCase(
            "array element type 13",
            _one_kv(arr(13, 1, b"\x00" * 8)),
            "metadata 'test.arr' is an array of unknown type code 13",
        ),
        BadCase(
            "array element type 0xFFFFFFFF",
            _one_kv(arr(U32_MAX, 1, b"\x00" * 8)),
            "is an array of unknown type code 4294967295",
        ),
        BadCase(
            "huge string inside a small kept array",
            _one_kv(arr(STRING, 2, gstr("ok") + u64(NEAR_2_63) + b"x" * 8)),
            f"element 1 of 'test.arr' claims {NEAR_2_63:,} bytes, more than the limit",
        ),
        BadCase(
            "huge string inside a large skipped array",
            _one_kv(arr(STRING, len(many), b"".join(many))),
            f"element 3 of 'test.arr' claims {NEAR_2_63:,} bytes, more than the limit",
        ),
        BadCase(
            "string array cut short",
            _one_kv(arr(STRING, 3, gstr("a") + gstr("b") + u64(5) + b"c")),
            "file is truncated: element 2 of 'test.arr' needs 5 bytes",
        ),
        BadCase(
            "alignment 0",
            build_gguf([ARCH, kv("general.alignment", UINT32, 0)]),
            "general.alignment is 0, not a power of two",
        ),
        BadCase(
            "alignment 3",
            build_gguf([ARCH, kv("general.alignment", UINT32, 3)]),
            "general.alignment is 3, not a power of two",
        ),
        BadCase(
            "alignment negative",
            build_gguf([ARCH, kv("general.alignment", INT32, -32)]),
            "general.alignment is -32, not a power of two",
        ),
        BadCase(
            "alignment a string",
            build_gguf([ARCH, kv("general.alignment", STRING, "32")]),
            "general.alignment is '32', not a power of two",
        ),
        BadCase(
            "alignment a float",
            build_gguf([ARCH, kv("general.alignment", FLOAT32, 32.0)]),
            "general.alignment is 32.0, not a power of two",
        ),
        BadCase(
            "alignment a bool",
            build_gguf([ARCH, kv("general.alignment", BOOL, 1)]),
            "general.alignment is True, not a power of two",
        ),
    ]


def _tensor_cases() -> list[BadCase]:
    valid = tiny_model()
    cut = 10
    q8 = Tensor("w", (64, 2), GGML_Q8_0)  # 136 bytes
    return [
        BadCase(
            "tensor n_dims 0",
            _one_tensor(Tensor("w", (), n_dims=0)),
            "'w' has 0 dimensions (allowed: 1 to 4)",
        ),
        BadCase(
            "tensor n_dims 5",
            _one_tensor(Tensor("w", (32, 1, 1, 1, 1))),
            "tensor 'w' has 5 dimensions (allowed: 1 to 4)",
        ),
        BadCase(
            "tensor n_dims 0xFFFFFFFF",
            _one_tensor(Tensor("w", (32,), n_dims=U32_MAX)),
            "tensor 'w' has 4294967295 dimensions",
        ),
        BadCase(
            "tensor dim 0",
            _one_tensor(Tensor("w", (32, 0))),
            "tensor 'w' has an invalid shape [32, 0]",
        ),
        BadCase(
            "tensor dim 2**63",
            header(1, 1) + ARCH + tensor_info("w", (2**63, 1), GGML_F32, 0) + bytes(64),
            f"tensor 'w' has an invalid shape [{2**63}, 1]",
        ),
        BadCase(
            "tensor dims overflow",
            header(1, 1) + ARCH + tensor_info("w", (2**32, 2**32), GGML_F32, 0) + bytes(64),
            f"tensor 'w' has a shape [{2**32}, {2**32}] whose size overflows",
        ),
        BadCase(
            "tensor dims overflow across four dims",
            header(1, 1) + ARCH + tensor_info("w", (2**16,) * 4, GGML_F16, 0) + bytes(64),
            "whose size overflows",
        ),
        BadCase(
            "tensor dims cut short",
            header(1, 1) + ARCH + gstr("w") + u32(2) + u64(32),
            "file is truncated: dimension 1 of 'w' needs 8 bytes",
        ),
        BadCase(
            "ggml type 4 (removed Q4_2)",
            header(1, 1) + ARCH + tensor_info("w", (32,), 4, 0) + bytes(64),
            "tensor 'w' has unknown data type code 4",
        ),
        BadCase(
            "ggml type 0xFFFFFFFF",
            header(1, 1) + ARCH + tensor_info("w", (32,), U32_MAX, 0) + bytes(64),
            "tensor 'w' has unknown data type code 4294967295",
        ),
        BadCase(
            "Q8_0 first dim not a multiple of 32",
            header(1, 1) + ARCH + tensor_info("w", (33, 2), GGML_Q8_0, 0) + bytes(128),
            "tensor 'w' has a first dimension of 33, not a multiple of the Q8_0 block size 32",
        ),
        BadCase(
            "tensor offset not aligned",
            _one_tensor(Tensor("w", (32,), offset=4)),
            "tensor 'w' starts at offset 4, not a multiple of the alignment 32",
        ),
        BadCase(
            "tensor offset near 2**64",
            header(1, 1) + ARCH + tensor_info("w", (8,), GGML_F32, 2**64 - 32) + bytes(64),
            f"file is truncated: tensor data ends at byte {2**64 + 128:,}, file has 166",
        ),
        BadCase(
            "tensor data past end of file",
            valid[:-cut],
            f"file is truncated: tensor data ends at byte {len(valid):,}, "
            f"file has {len(valid) - cut:,}",
        ),
        BadCase(
            "tensor data start past end of file",
            header(1, 1) + ARCH + tensor_info("w", (8,), GGML_F32, 0) + b"\x00",
            "file is truncated: tensor data should start at byte 128, file has 103",
        ),
        BadCase(
            "huge power-of-two alignment",
            _one_tensor(Tensor("w", (8,)), kvs=[ARCH, kv("general.alignment", UINT64, 2**40)]),
            f"tensor data should start at byte {2**40:,}",
        ),
        BadCase(
            "overlapping tensors (same offset)",
            _one_tensor(q8, Tensor("v", (64, 2), GGML_Q8_0, offset=0)),
            "tensor 'v' overlaps the tensor before it",
        ),
        BadCase(
            "overlapping tensors (partial)",
            _one_tensor(q8, Tensor("v", (32,), offset=128)),
            "overlaps the tensor before it",
        ),
        BadCase(
            "duplicate tensor names",
            _one_tensor(Tensor("w", (32,)), Tensor("w", (32,))),
            "tensor name 'w' appears twice",
        ),
        BadCase(
            "tensor count larger than the infos",
            header(2, 1) + ARCH + tensor_info("w", (8,), GGML_F32, 0),
            "file is truncated: the length of the name of tensor 1 needs 8 bytes at byte 102",
        ),
    ]


def bad_cases() -> list[BadCase]:
    """Every malformed file of the corpus: (name, bytes, expected phrase of the error)."""
    cases = _header_cases() + _string_cases() + _value_cases() + _tensor_cases()
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise AssertionError("bad case names must be unique")
    return cases


# --- Mutants of a real file --------------------------------------------------------------------


def byte_flips(seed: int, count: int, span: int, max_flips: int = 4) -> list[list[tuple[int, int]]]:
    """``count`` mutants, each a few (position, XOR mask) pairs with positions below ``span``.

    The same seed always gives the same mutants; a mask is never zero, so every flip changes a byte.
    """
    rng = random.Random(seed)
    mutants = []
    for _ in range(count):
        n = rng.randint(1, max_flips)
        mutants.append([(rng.randrange(span), rng.randrange(1, 256)) for _ in range(n)])
    return mutants
