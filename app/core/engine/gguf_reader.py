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
import stat
import struct
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

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


class GGUFError(ValueError):
    """The file is not a GGUF model llama.cpp can safely be given; the message is one sentence."""


@dataclass(frozen=True)
class FileIdentity:
    """Which file a path named when it was read: another file put in its place, or this one
    written to, differs in one of these. Not the change time: a hard link made to the model, a
    chmod or a backup tool's extended attribute changes it, and a model in a folder other tools
    share (a test suite's workers, a cache that de-duplicates by linking) was refused as
    changed."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


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
    # The file this header was read from, as its descriptor said before and after the read.
    identity: FileIdentity | None = field(default=None, repr=False, compare=False)
    # Each metadata key's value type code (llama.cpp asserts the type of some keys it reads).
    types: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def arch_value(self, suffix: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    def value_type(self, key: str) -> str | None:
        """The GGUF type of ``key``'s value ("uint16", "array" ...); None when absent."""
        code = self.types.get(key)
        return None if code is None else _type_name(code)

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
        value: int = _U32.unpack(self.bytes(4, what))[0]
        return value

    def u64(self, what: str) -> int:
        value: int = _U64.unpack(self.bytes(8, what))[0]
        return value

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
            before = FileIdentity.of(os.fstat(fh.fileno()))
            gf = _parse(p, _Reader(fh, before.size), set(keep_arrays), before)
            if FileIdentity.of(os.fstat(fh.fileno())) != before:
                raise GGUFError(f"{p.name} changed while its header was read; try again")
            return gf
        except OSError as exc:
            raise GGUFError(f"cannot read {p}: {exc.strerror or exc}") from None


def _parse(path: Path, r: _Reader, keep_arrays: set[str], identity: FileIdentity) -> GGUFFile:
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
    types: dict[str, int] = {}
    for i in range(n_kv):
        key = r.string(f"metadata key {i}", cap=MAX_KEY_BYTES)
        if not key:
            raise GGUFError(f"metadata key {i} is empty")
        if key in metadata:
            raise GGUFError(f"metadata key {key!r} appears twice")
        vtype = r.u32(f"the type of {key!r}")
        r.hold(NUMBER_OVERHEAD, f"the type of {key!r}")
        types[key] = vtype
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
    return GGUFFile(path, r.size, version, metadata, tuple(tensors), alignment, data_offset,
                    identity=identity, types=types)  # fmt: skip


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
