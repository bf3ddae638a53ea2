"""A GGUF reader that does not trust the file.

llama.cpp parses GGUF headers in C; a crafted header (huge counts, huge string lengths, nested
arrays, shapes that overflow) has been the source of a string of memory-safety bugs. This module
reads the same header in pure Python with bounded reads *before* llama.cpp ever sees the file, so a
bad file costs the person one clear sentence instead of a crash.

Every length is checked against the bytes actually left in the file before anything is allocated,
and against caps that no real model comes near. Only the metadata the app needs is kept; big
arrays (the vocabulary, the merges) and long strings are skipped unless a caller asks for them by
key (skipped by seeking past them, never read whole), and what is kept, together with what the
vocabulary check holds, is capped in total, so a header of many long strings is refused before it
costs more than a few hundred megabytes. Past the
format, a few values that are well formed but make llama.cpp abort (found by fuzzing: a vocabulary
listing a token twice, more layers than it supports, tensors off its alignment) are refused too.
"""

from __future__ import annotations

import io
import os
import re
import stat
import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

# Caps far above any real model; they bound the work a hostile file can make us do.
MAX_KEY_BYTES = 64 * 1024
MAX_STRING_BYTES = 16 * 1024 * 1024
# Chat templates are KBs; llama-cpp-python compiles each one while loading (the engine compiles
# them in the chat-template sandbox instead: see child.py), so all of them together are capped too.
MAX_TEMPLATE_BYTES = 128 * 1024
MAX_TEMPLATES_BYTES = 4 * MAX_TEMPLATE_BYTES
TEMPLATE_KEY = "tokenizer.chat_template"
# A string value longer than this is skipped unless asked for by key (names, licences and
# templates are far shorter; a tokenizer.json copied whole into the header is not needed).
MAX_KEPT_STRING_BYTES = 1024 * 1024
# The memory the header may take once read: kept metadata, keys, tensor records and the
# vocabulary's duplicate check, counted as their bytes plus what Python adds per object. The
# largest real tokenizer kept whole (Gemma 4's: 262k tokens, 515k merges, scores and types)
# counts 91 MiB; a header past this cap is refused before it costs more.
MAX_HEADER_MEMORY = 256 * 1024 * 1024
STRING_OVERHEAD = 64  # bytes Python adds to a string kept in a tuple, about
NUMBER_OVERHEAD = 32  # and to a number
TENSOR_OVERHEAD = 512  # a tensor's record, shape and entry in the name check
MAX_ARRAY_ITEMS = 64 * 1024 * 1024  # vocabularies are ~10^5..10^6 entries
MAX_KV_COUNT = 1_000_000
MAX_TENSOR_COUNT = 1_000_000
MAX_TENSOR_ELEMENTS = 2**62  # an element count above this overflows byte sizes in ggml
SMALL_STRING_ARRAY = 64  # string arrays up to this length are kept inline in the metadata
SMALL_NUMBER_ARRAY = 4096  # numeric arrays likewise (per-layer values of deep models fit)
MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS: a larger block_count fails a GGML_ASSERT
MAX_HEADS = 65536
MAX_VOCAB = 1 << 21  # 8x the largest vocabulary in use; bounds the duplicate check's memory
# llama-cpp-python sizes a token buffer by the training context (as a C int) on every tokenize:
# 2**31 turns negative, and anything near it is gigabytes per call.
MAX_CONTEXT_LENGTH = 1 << 28
# llama.cpp maps tensor data straight from the file and asserts that every tensor starts on this
# boundary; a general.alignment below it can place tensors off it.
TENSOR_ALIGNMENT = 32
VOCAB_KEY = "tokenizer.ggml.tokens"

# Value type codes of the GGUF format.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL = range(8)
T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(8, 13)

_SCALARS: dict[int, struct.Struct] = {
    T_UINT8: struct.Struct("<B"),
    T_INT8: struct.Struct("<b"),
    T_UINT16: struct.Struct("<H"),
    T_INT16: struct.Struct("<h"),
    T_UINT32: struct.Struct("<I"),
    T_INT32: struct.Struct("<i"),
    T_FLOAT32: struct.Struct("<f"),
    T_BOOL: struct.Struct("<B"),
    T_UINT64: struct.Struct("<Q"),
    T_INT64: struct.Struct("<q"),
    T_FLOAT64: struct.Struct("<d"),
}
_TYPE_NAMES = {
    T_UINT8: "uint8", T_INT8: "int8", T_UINT16: "uint16", T_INT16: "int16",
    T_UINT32: "uint32", T_INT32: "int32", T_FLOAT32: "float32", T_BOOL: "bool",
    T_STRING: "string", T_ARRAY: "array", T_UINT64: "uint64", T_INT64: "int64",
    T_FLOAT64: "float64",
}  # fmt: skip
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

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
BASE_MODEL_NOTE = "base model: replies continue the text; instructions may be ignored"
_BASE_WORD = re.compile(r"(?<![a-z0-9])base(?![a-z0-9])", re.IGNORECASE)
_TUNED_WORD = re.compile(
    r"(?<![a-z0-9])(instruct|chat|it|sft|dpo|rlhf|assistant|thinking)(?![a-z0-9])", re.IGNORECASE
)


class GGUFError(ValueError):
    """The file is not a GGUF model llama.cpp can safely be given; the message is one sentence."""


@dataclass(frozen=True)
class ArrayValue:
    """A metadata array: its element type and length; items only when small or asked for."""

    item_type: str
    count: int
    items: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class SkippedString:
    """A metadata string longer than :data:`MAX_KEPT_STRING_BYTES` that nobody asked for: only
    its length is known (it was skipped, not read)."""

    n_bytes: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # relative to the start of the tensor data section
    n_bytes: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFFile:
    """What the header says, after every check passed."""

    path: Path
    file_size: int
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int
    _derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def arch_value(self, suffix: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))


class _Reader:
    """Bounded little-endian reads over a file; every read checks the bytes left first."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self._fh = fh
        self.size = size
        self.pos = 0
        self.held = 0  # memory the header read so far takes (see MAX_HEADER_MEMORY)
        self.template_bytes = 0  # of every chat template read so far

    def hold(self, n: int, what: str) -> None:
        """Count ``n`` more bytes of memory for the metadata; refuse a header past the cap."""
        self.held += n
        if self.held > MAX_HEADER_MEMORY:
            raise GGUFError(
                f"the header takes more than {MAX_HEADER_MEMORY // 2**20:,} MiB of memory "
                f"to read (at {what}); no real model's comes near that"
            )

    @property
    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.left:
            raise GGUFError(
                f"file is truncated: {what} needs {n:,} bytes at byte {self.pos:,}, "
                f"but the file has {self.size:,} bytes"
            )

    def bytes(self, n: int, what: str) -> bytes:
        self.need(n, what)
        data = self._fh.read(n)
        if len(data) != n:  # the file shrank while we read it
            raise GGUFError(f"file is truncated: could not read {what} at byte {self.pos:,}")
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self._fh.seek(n, io.SEEK_CUR)
        self.pos += n

    def u32(self, what: str) -> int:
        return _U32.unpack(self.bytes(4, what))[0]

    def u64(self, what: str) -> int:
        return _U64.unpack(self.bytes(8, what))[0]

    def string(self, what: str, cap: int = MAX_STRING_BYTES) -> str:
        """A string that is kept (a key, a tensor name): counted against the memory cap."""
        return _kept_string(self, _string_length(self, what, cap), what)


def _decode(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GGUFError(f"{what} is not valid UTF-8 (byte {exc.start} of the string)") from None


def _type_name(code: int) -> str:
    return _TYPE_NAMES.get(code, f"type {code}")


def _read_value(r: _Reader, vtype: int, key: str, keep_items: bool) -> Any:
    if vtype in _SCALARS:
        s = _SCALARS[vtype]
        (value,) = s.unpack(r.bytes(s.size, f"the value of {key!r}"))
        if vtype == T_BOOL:
            if value > 1:
                raise GGUFError(f"metadata {key!r} is a bool with the invalid value {value}")
            return bool(value)
        return value
    if vtype == T_STRING:
        what = f"the value of {key!r}"
        if key.startswith(TEMPLATE_KEY):
            n = _string_length(r, what, MAX_TEMPLATE_BYTES)
            r.template_bytes += n
            if r.template_bytes > MAX_TEMPLATES_BYTES:
                raise GGUFError(
                    f"the chat templates take more than {MAX_TEMPLATES_BYTES:,} bytes together "
                    f"(at {key!r}); a model carries a few of some KB each"
                )
        else:
            n = _string_length(r, what)
            if n > MAX_KEPT_STRING_BYTES and not keep_items:
                r.skip(n, what)
                return SkippedString(n)
        return _kept_string(r, n, what)
    if vtype == T_ARRAY:
        item_type = r.u32(f"the element type of {key!r}")
        if item_type == T_ARRAY:
            raise GGUFError(f"metadata {key!r} is a nested array, which GGUF does not allow")
        if item_type not in _SCALARS and item_type != T_STRING:
            raise GGUFError(f"metadata {key!r} is an array of unknown type code {item_type}")
        count = r.u64(f"the length of {key!r}")
        min_item = 8 if item_type == T_STRING else _SCALARS[item_type].size
        if count > MAX_ARRAY_ITEMS or count * min_item > r.left:
            raise GGUFError(
                f"metadata {key!r} claims {count:,} elements, more than the file can hold"
            )
        small = SMALL_STRING_ARRAY if item_type == T_STRING else SMALL_NUMBER_ARRAY
        keep = keep_items or count <= small
        if key == VOCAB_KEY and item_type == T_STRING:
            return _read_vocab(r, count, keep)
        if item_type == T_STRING:
            return _string_array(r, key, count, keep, keep_items)
        s = _SCALARS[item_type]
        if not keep:
            r.skip(count * s.size, f"the elements of {key!r}")
            return ArrayValue(_type_name(item_type), count)
        r.need(count * s.size, f"the elements of {key!r}")
        r.hold(count * (s.size + NUMBER_OVERHEAD), f"the elements of {key!r}")
        raw = r.bytes(count * s.size, f"the elements of {key!r}")
        items: tuple[Any, ...] = tuple(v for (v,) in s.iter_unpack(raw))
        if item_type == T_BOOL:
            if any(v > 1 for v in items):
                raise GGUFError(f"metadata {key!r} holds a bool that is neither 0 nor 1")
            items = tuple(bool(v) for v in items)
        return ArrayValue(_type_name(item_type), count, items)
    raise GGUFError(f"metadata {key!r} has unknown value type code {vtype}")


def _string_length(r: _Reader, what: str, cap: int = MAX_STRING_BYTES) -> int:
    n = r.u64(f"the length of {what}")
    if n > cap:
        raise GGUFError(f"{what} claims {n:,} bytes, more than the limit of {cap:,}")
    return n


def _kept_string(r: _Reader, n: int, what: str) -> str:
    """The next ``n`` bytes as a kept string: counted against the metadata's memory first."""
    r.need(n, what)
    r.hold(n + STRING_OVERHEAD, what)
    return _decode(r.bytes(n, what), what)


def _string_array(r: _Reader, key: str, count: int, keep: bool, asked: bool) -> ArrayValue:
    """A string array: its items when ``keep``, unless (not ``asked`` for) one of them is too
    long to keep; then the rest are skipped too."""
    items: list[str] = []
    for i in range(count):
        what = f"element {i} of {key!r}"
        n = _string_length(r, what)
        if keep and n > MAX_KEPT_STRING_BYTES and not asked:
            keep, items = False, []
        if keep:
            items.append(_kept_string(r, n, what))
        else:
            r.skip(n, what)
    return ArrayValue("string", count, tuple(items) if keep else None)


def _read_vocab(r: _Reader, count: int, keep: bool) -> ArrayValue:
    """The token list, read whole: llama.cpp aborts on a vocabulary that lists a token twice.
    The check holds every token's bytes, so they count against the metadata's memory."""
    if count > MAX_VOCAB:
        raise GGUFError(
            f"the vocabulary claims {count:,} tokens, more than the limit of {MAX_VOCAB:,}"
        )
    seen: set[bytes] = set()
    items: list[str] = []
    for i in range(count):
        what = f"element {i} of {VOCAB_KEY!r}"
        n = _string_length(r, what)
        r.need(n, what)
        r.hold((n + STRING_OVERHEAD) * (2 if keep else 1), what)
        raw = r.bytes(n, what)
        if raw in seen:
            text = raw.decode("utf-8", "replace")[:40]
            raise GGUFError(f"the vocabulary lists {text!r} twice (the second time as token {i})")
        seen.add(raw)
        if keep:
            items.append(_decode(raw, what))
    return ArrayValue("string", count, tuple(items) if keep else None)


def _tensor_bytes(name: str, shape: tuple[int, ...], ggml_type: int) -> int:
    try:
        qtype = GGMLQuantizationType(ggml_type)
        block, type_size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise GGUFError(f"tensor {name!r} has unknown data type code {ggml_type}") from None
    if shape[0] % block:
        raise GGUFError(
            f"tensor {name!r} has a first dimension of {shape[0]}, "
            f"not a multiple of the {qtype.name} block size {block}"
        )
    n = 1
    for d in shape:
        n *= d
    if n > MAX_TENSOR_ELEMENTS:
        raise GGUFError(f"tensor {name!r} has a shape {list(shape)} whose size overflows")
    return n // block * type_size


def read_gguf(path: str | os.PathLike[str], *, keep_arrays: Collection[str] = ()) -> GGUFFile:
    """Read and check a GGUF header; raise GGUFError with one clear sentence if anything is off.

    ``keep_arrays`` names metadata arrays whose items should be returned even when large (for
    example ``tokenizer.ggml.merges``); other large arrays keep only their type and length.
    """
    p = Path(path)
    try:
        # A FIFO or device would block or never end: only regular files are read.
        if p.exists() and not p.is_dir() and not stat.S_ISREG(p.stat().st_mode):
            raise GGUFError(f"{p} is not a regular file")
    except OSError as exc:
        raise GGUFError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        # A 1 MiB buffer keeps reading tens of thousands of vocabulary strings cheap.
        fh = p.open("rb", buffering=1 << 20)
    except FileNotFoundError:
        raise GGUFError(f"model file not found: {p}") from None
    except IsADirectoryError:
        raise GGUFError(f"{p} is a folder, not a model file") from None
    except PermissionError:
        raise GGUFError(f"cannot read {p}: permission denied") from None
    except OSError as exc:
        raise GGUFError(f"cannot open {p}: {exc.strerror or exc}") from None
    with fh:
        try:
            size = os.fstat(fh.fileno()).st_size
            return _parse(p, _Reader(fh, size), set(keep_arrays))
        except OSError as exc:
            raise GGUFError(f"cannot read {p}: {exc.strerror or exc}") from None


def _parse(path: Path, r: _Reader, keep_arrays: set[str]) -> GGUFFile:
    if r.size < 4:
        raise GGUFError(f"not a GGUF file: it is only {r.size} bytes long")
    magic = r.bytes(4, "the magic number")
    if magic != GGUF_MAGIC:
        raise GGUFError("not a GGUF file (the first four bytes are not 'GGUF')")
    if r.left < 4:
        raise GGUFError("file is truncated: it ends before the GGUF version")
    version = r.u32("the version")
    if version not in SUPPORTED_VERSIONS:
        if version == 1:
            raise GGUFError("GGUF version 1 is obsolete and not supported; convert the model again")
        raise GGUFError(f"unsupported GGUF version {version} (supported: 2 and 3)")
    n_tensors = r.u64("the tensor count")
    n_kv = r.u64("the metadata count")
    # Smallest possible entries: a metadata pair is an empty key (8) + type (4) + one byte;
    # a tensor entry is an empty name (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
    if n_kv > MAX_KV_COUNT or n_kv * 13 > r.left:
        raise GGUFError(f"header claims {n_kv:,} metadata entries, more than the file can hold")
    if n_tensors > MAX_TENSOR_COUNT or n_tensors * 32 > r.left:
        raise GGUFError(f"header claims {n_tensors:,} tensors, more than the file can hold")

    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = r.string(f"metadata key {i}", cap=MAX_KEY_BYTES)
        if not key:
            raise GGUFError(f"metadata key {i} is empty")
        if key in metadata:
            raise GGUFError(f"metadata key {key!r} appears twice")
        vtype = r.u32(f"the type of {key!r}")
        metadata[key] = _read_value(r, vtype, key, key in keep_arrays)

    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (
        not isinstance(alignment, int)
        or isinstance(alignment, bool)
        or alignment <= 0
        or alignment & (alignment - 1)
    ):
        raise GGUFError(f"general.alignment is {alignment!r}, not a power of two")

    tensors: list[TensorInfo] = []
    names: set[str] = set()
    for i in range(n_tensors):
        name = r.string(f"the name of tensor {i}", cap=MAX_KEY_BYTES)
        if name in names:
            raise GGUFError(f"tensor name {name!r} appears twice")
        names.add(name)
        n_dims = r.u32(f"the dimension count of {name!r}")
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise GGUFError(
                f"tensor {name!r} has {n_dims} dimensions (allowed: 1 to {GGML_MAX_DIMS})"
            )
        shape = tuple(r.u64(f"dimension {d} of {name!r}") for d in range(n_dims))
        if any(d == 0 or d >= 2**63 for d in shape):
            raise GGUFError(f"tensor {name!r} has an invalid shape {list(shape)}")
        ggml_type = r.u32(f"the data type of {name!r}")
        offset = r.u64(f"the data offset of {name!r}")
        n_bytes = _tensor_bytes(name, shape, ggml_type)
        if offset % alignment:
            raise GGUFError(
                f"tensor {name!r} starts at offset {offset:,}, "
                f"not a multiple of the alignment {alignment}"
            )
        r.hold(TENSOR_OVERHEAD, f"tensor {i}")
        tensors.append(TensorInfo(name, shape, ggml_type, offset, n_bytes))

    data_offset = r.pos + (-r.pos % alignment)
    if data_offset > r.size and tensors:
        raise GGUFError(
            f"file is truncated: tensor data should start at byte {data_offset:,}, "
            f"file has {r.size:,}"
        )
    _check_tensor_layout(tensors, data_offset, r.size)
    return GGUFFile(path, r.size, version, metadata, tuple(tensors), alignment, data_offset)


def _check_tensor_layout(tensors: list[TensorInfo], data_offset: int, file_size: int) -> None:
    end = data_offset
    for t in sorted(tensors, key=lambda t: t.offset):
        start = data_offset + t.offset
        if start < end:
            raise GGUFError(f"tensor {t.name!r} overlaps the tensor before it")
        if start % TENSOR_ALIGNMENT:
            raise GGUFError(
                f"tensor {t.name!r} starts at byte {start:,} of the file, off the "
                f"{TENSOR_ALIGNMENT}-byte boundary llama.cpp needs"
            )
        end = start + t.n_bytes
        if end > file_size:
            raise GGUFError(
                f"file is truncated: tensor data ends at byte {end:,}, file has {file_size:,}"
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
    if window is not None and _int_or_none(window) is None:
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
        "head_dim_k_swa": _int_or_none(gf.arch_value("attention.key_length_swa")),
        "head_dim_v_swa": _int_or_none(gf.arch_value("attention.value_length_swa")),
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


def model_info(gf: GGUFFile) -> ModelInfo:
    """Derive the model card from a checked header; implausible values raise GGUFError."""
    n_layers = _layer_count(gf)
    n_embd = _int_or_none(gf.arch_value("embedding_length"))
    n_head_raw = gf.arch_value("attention.head_count")
    n_head_kv_raw = gf.arch_value("attention.head_count_kv", n_head_raw)
    heads = _per_layer(gf, "attention.head_count", n_head_raw, n_layers)
    kv_heads = _per_layer(gf, "attention.head_count_kv", n_head_kv_raw, n_layers)
    n_head = max(heads) if heads else None
    head_k = _int_or_none(gf.arch_value("attention.key_length"))
    head_v = _int_or_none(gf.arch_value("attention.value_length"))
    if head_k is None and n_embd and n_head:
        head_k = n_embd // n_head
    if head_v is None:
        head_v = head_k

    tokens = gf.get("tokenizer.ggml.tokens")
    vocab = tokens.count if isinstance(tokens, ArrayValue) else None
    if vocab is None:
        vocab = _int_or_none(gf.arch_value("vocab_size"))
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
        **_attention(gf, n_layers),
    )


def inspect_model(path: str | os.PathLike[str]) -> ModelInfo:
    """Check a GGUF file and return its model card; raise GGUFError with one clear sentence."""
    return model_info(read_gguf(path))
