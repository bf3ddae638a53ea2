"""Malformed GGUF files for the fuzz tests, one vulnerability class at a time, all deterministic.

llama.cpp's GGUF parser and model loader have had a run of memory-safety bugs (2024-2026) caused by
headers that lie: huge counts and lengths, nested arrays, unknown type codes, odd alignments, more
than four dimensions, shapes that overflow, offsets past the file, duplicate keys and tensor names,
tokenizer arrays of the wrong type, absurd hyperparameters. The validator and the engine host must
turn each such file into one clear error. This module describes the files; the tests build them.

A case is data (which field of which base file gets which value), named after what it breaks. The
bases are the tiny model of ``gguf_cases`` and the real default model; the field positions come
from the ``gguf`` package's own reader, independently of the validator under test. A mutant of the
real model is written as its edited header followed by a sparse hole where the weights were, so a
case costs a 1.8 MB write and no disk space for the 94 MB of tensor data.
"""

from __future__ import annotations

import collections
import itertools
import os
import random
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import gguf
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from app.core.engine.gguf import (
    MAX_ARRAY_ITEMS,
    MAX_KV_COUNT,
    MAX_LAYERS,
    MAX_TEMPLATE_BYTES,
    MAX_TENSOR_COUNT,
    ArrayValue,
    GGUFFile,
    read_gguf,
)
from tests.core import gguf_cases as gc

KINDS: dict[str, str] = {
    "count": "huge metadata and tensor counts",
    "string": "huge or lying string lengths, over-long names",
    "array": "huge array lengths, counts whose byte size overflows",
    "nested": "nested arrays",
    "type": "unknown or mismatched type codes",
    "alignment": "bad general.alignment",
    "dims": "tensors with no or more than four dimensions",
    "shape": "zero, negative or overflowing tensor shapes",
    "offset": "tensor offsets past the file, unaligned or overlapping",
    "duplicate": "duplicate metadata keys and tensor names",
    "tokenizer": "tokenizer arrays of the wrong element type or length, bad token ids",
    "hparams": "absurd block_count, context_length and other hyperparameters",
    "truncated": "files cut inside each section",
    "random": "seeded random overwrites of integer fields",
}

# Values at the limits of the integer types, where C code wraps, truncates or turns negative.
EDGES64 = (
    2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**62,
    2**63 - 1, 2**63, 2**63 + 1, 2**64 - 32, 2**64 - 2, 2**64 - 1,
)  # fmt: skip
EDGES32 = (2**15, 2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 2, 2**32 - 1)
BAD_VALUE_TYPES = (13, 14, 255, 256, 2**16, 2**31, 2**32 - 1)
ALIGN = gc.DEFAULT_ALIGNMENT  # both bases use the default alignment
GGML_MAX_NAME = 64  # llama.cpp's limit on tensor names, including the terminator

TYPE_NAMES = {
    gc.UINT8: "u8", gc.INT8: "i8", gc.UINT16: "u16", gc.INT16: "i16", gc.UINT32: "u32",
    gc.INT32: "i32", gc.FLOAT32: "f32", gc.BOOL: "bool", gc.STRING: "string", gc.ARRAY: "array",
    gc.UINT64: "u64", gc.INT64: "i64", gc.FLOAT64: "f64",
}  # fmt: skip

ITEM_CODES = {  # the validator's names of array element types
    "uint8": gc.UINT8, "int8": gc.INT8, "uint16": gc.UINT16, "int16": gc.INT16,
    "uint32": gc.UINT32, "int32": gc.INT32, "float32": gc.FLOAT32, "bool": gc.BOOL,
    "string": gc.STRING, "uint64": gc.UINT64, "int64": gc.INT64, "float64": gc.FLOAT64,
}  # fmt: skip

Ref = tuple[Any, ...]


def wraps(item_size: int) -> tuple[int, ...]:
    """Counts whose size in bytes overflows 64, 63 and 32 bits (and so wraps to a small number)."""
    counts = (2**64 // item_size + 1, 2**63 // item_size + 1, 2**32 // item_size + 1)
    return tuple(n for n in counts if n < 2**64)


def show(n: int) -> str:
    """An integer as a person reads it in a case name: 2**64-1 rather than 18446744073709551615."""
    if n >= 2**15:
        for k in (n.bit_length(), n.bit_length() - 1):
            d = n - 2**k
            if abs(d) <= 64:
                return f"2**{k}{d:+d}" if d else f"2**{k}"
    return str(n)


# --- Cases -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetField:
    """Overwrite one field: an integer packed to the field's own width, or bytes of any length."""

    ref: Ref
    value: int | bytes


@dataclass(frozen=True)
class PutEntry:
    """Replace a metadata entry, remove it (``entry`` None), or add one (a new key, or ``append``
    for a second entry under a key the file already has); the metadata count follows."""

    key: str
    entry: bytes | None
    append: bool = False


Edit = SetField | PutEntry


@dataclass(frozen=True)
class FuzzCase:
    """One malformed file: a base and edits to its header, or a cut ``cut[1]`` bytes into a part."""

    name: str
    kind: str
    base: str  # "tiny" or "real"
    edits: tuple[Edit, ...] = ()
    cut: tuple[Ref, int] | None = None
    fast: bool = False  # part of the normal run; the others run with SLOW=1


# --- Where the fields are ----------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Byte positions of every part of a valid GGUF header, as the ``gguf`` package reads it.

    ``kvs`` maps a key to its type codes and the start of each part (key length, key, type, then
    the value's parts) plus the end; ``tensors`` likewise for name length, name, n_dims, dims, type
    and offset.
    """

    kvs: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]
    tensors: tuple[tuple[int, ...], ...]
    kv_end: int
    infos_end: int
    data_offset: int
    file_size: int

    def span(self, ref: Ref) -> tuple[int, int]:
        what, *args = ref
        fixed = {"magic": (0, 4), "version": (4, 8), "n_tensors": (8, 16), "n_kv": (16, 24)}
        if what in fixed:
            return fixed[what]
        if what == "kv_end":
            return self.kv_end, self.kv_end
        if what == "pad":
            return self.infos_end, self.data_offset
        if what == "data":
            return self.data_offset, self.file_size
        parts = {"name_len": 0, "name": 1, "n_dims": 2, "ggml_type": 4, "offset": 5}
        if what in parts or what in ("tensor", "namestr", "dim"):
            starts = self.tensors[args[0]]
            if what == "tensor":
                return starts[0], starts[-1]
            if what == "namestr":
                return starts[0], starts[2]
            if what == "dim":
                return starts[3] + 8 * args[1], starts[3] + 8 * args[1] + 8
            return starts[parts[what]], starts[parts[what] + 1]
        types, starts = self.kvs[args[0]]
        vtype = types[0]
        if what == "entry":
            return starts[0], starts[-1]
        if what == "keystr":
            return starts[0], starts[2]
        index = {"key_len": 0, "key": 1, "type": 2, "str_len": 3, "item_type": 3, "count": 4}
        if what in index:
            return starts[index[what]], starts[index[what] + 1]
        if what == "value":  # the whole value: a scalar, or a string's length and bytes
            return starts[3], starts[-1]
        if vtype != gc.ARRAY:
            raise KeyError(f"{ref} needs an array")
        i = args[1]
        if types[1] == gc.STRING:
            part = 5 + 2 * i
            if what == "elem_len":
                return starts[part], starts[part + 1]
            return starts[part], starts[part + 2]  # "elem": length and bytes
        return starts[5 + i], starts[6 + i]


def layout_of(path: Path) -> Layout:
    reader = gguf.GGUFReader(path)
    kvs = {}
    for name, fld in reader.fields.items():
        if name.startswith("GGUF."):  # the fixed header, which the reader lists as fields
            continue
        starts = tuple(itertools.accumulate((int(p.nbytes) for p in fld.parts), initial=fld.offset))
        kvs[name] = (tuple(int(t) for t in fld.types), starts)
    tensors = tuple(
        tuple(itertools.accumulate((int(p.nbytes) for p in t.field.parts), initial=t.field.offset))
        for t in reader.tensors
    )
    kv_end = max(starts[-1] for _, starts in kvs.values())
    infos_end = tensors[-1][-1] if tensors else kv_end
    return Layout(kvs, tensors, kv_end, infos_end, reader.data_offset, os.path.getsize(path))


@dataclass(frozen=True)
class FileImage:
    """What to write: ``head``, then zeros up to ``size`` as a sparse hole (or cut at ``size``)."""

    head: bytes
    size: int

    def write(self, path: Path) -> None:
        with path.open("wb") as fh:
            fh.write(self.head[: self.size])
            if self.size > len(self.head):
                fh.truncate(self.size)


@dataclass(frozen=True)
class Base:
    """A valid file to break: its header up to the end of the tensor infos, and its data."""

    name: str
    head: bytes
    data: bytes | None  # None: the data section is written as a sparse hole
    data_size: int
    layout: Layout

    def image(self, case: FuzzCase) -> FileImage:
        if case.cut is not None:
            ref, inside = case.cut
            whole = self.head + bytes(self.layout.data_offset - len(self.head)) + (self.data or b"")
            return FileImage(whole, self.layout.span(ref)[0] + inside)
        head = self._edited(case.edits)
        head += bytes(-len(head) % ALIGN)
        return FileImage(head + (self.data or b""), len(head) + self.data_size)

    def _edited(self, edits: Iterable[Edit]) -> bytes:
        splices: list[tuple[int, int, bytes]] = []
        n_kv = len(self.layout.kvs)
        count_set = False
        for e in edits:
            if isinstance(e, PutEntry):
                new = e.entry or b""
                if e.key in self.layout.kvs and not e.append:
                    splices.append((*self.layout.span(("entry", e.key)), new))
                    n_kv -= e.entry is None
                else:
                    splices.append((self.layout.kv_end, self.layout.kv_end, new))
                    n_kv += 1
                continue
            start, end = self.layout.span(e.ref)
            count_set |= e.ref == ("n_kv",)
            if isinstance(e.value, bytes):
                splices.append((start, end, e.value))
            else:
                splices.append((start, end, e.value.to_bytes(end - start, "little")))
        if not count_set and n_kv != len(self.layout.kvs):
            splices.append((16, 24, gc.u64(n_kv)))
        out = bytearray(self.head)
        last = len(out) + 1
        for start, end, new in sorted(splices, key=lambda s: (s[0], s[1]), reverse=True):
            if end > last:
                raise ValueError("a case's edits overlap")
            out[start:end] = new
            last = start
        return bytes(out)


def _base(name: str, path: Path, *, sparse: bool) -> Base:
    layout = layout_of(path)
    with path.open("rb") as fh:
        head = fh.read(layout.infos_end)
        fh.seek(layout.data_offset)
        data = None if sparse else fh.read()
    return Base(name, head, data, layout.file_size - layout.data_offset, layout)


@cache
def tiny() -> tuple[Base, GGUFFile]:
    """The tiny model of ``gguf_cases`` as a base, and its header as the validator reads it."""
    with tempfile.TemporaryDirectory(prefix="gguf-fuzz-") as folder:
        path = Path(folder) / "tiny.gguf"
        path.write_bytes(gc.tiny_model())
        return _base("tiny", path, sparse=False), read_gguf(path)


@cache
def real_base(path: Path) -> Base:
    """The real model's header (a few seconds: the ``gguf`` reader maps every vocabulary entry)."""
    return _base("real", path, sparse=True)


# --- The cases, class by class -----------------------------------------------------------------


class _Maker:
    """Builds the cases of one class on one base, named ``base/kind/detail``."""

    def __init__(self, base: str, kind: str) -> None:
        self.base, self.kind = base, kind
        self.cases: list[FuzzCase] = []
        self._names: set[str] = set()

    def __call__(self, detail: str, *edits: Edit, cut: tuple[Ref, int] | None = None) -> None:
        name = f"{self.base}/{self.kind}/{detail}"
        if name not in self._names:  # one value can come up twice (n + 1 == 2**k); keep one case
            self._names.add(name)
            self.cases.append(FuzzCase(name, self.kind, self.base, tuple(edits), cut))


def _keys_of(gf: GGUFFile, want: type | None = None) -> list[str]:
    return [k for k, v in gf.metadata.items() if want is None or isinstance(v, want)]


def _spread(items: list[Any], n: int) -> list[Any]:
    """``n`` items spread over the list: the first, the last and evenly between."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def _tensor_picks(gf: GGUFFile) -> list[int]:
    """The first tensor, a 2-D one in the middle, and the last."""
    two_d = [i for i, t in enumerate(gf.tensors) if len(t.shape) == 2]
    return sorted({0, two_d[len(two_d) // 2] if two_d else 0, len(gf.tensors) - 1})


def _counts(m: _Maker, gf: GGUFFile) -> None:
    n_kv, n_t = len(gf.metadata), len(gf.tensors)
    near = (0, n_kv - 1, n_kv + 1, n_kv * 2, MAX_KV_COUNT, MAX_KV_COUNT + 1)
    for v in (*near, *EDGES64, *wraps(13)):
        m(f"n_kv={show(v)}", SetField(("n_kv",), v))
    for v in (0, n_t - 1, n_t + 1, n_t * 2, MAX_TENSOR_COUNT + 1, *EDGES64, *wraps(32)):
        m(f"n_tensors={show(v)}", SetField(("n_tensors",), v))
    m("both counts 2**64-1", SetField(("n_kv",), 2**64 - 1), SetField(("n_tensors",), 2**64 - 1))


def _strings(m: _Maker, gf: GGUFFile) -> None:
    file_size = gf.file_size
    keys = _spread(_keys_of(gf), 3)
    for key in keys:
        n = len(key.encode())
        for v in (0, n + 1, gc.MAX_KEY_BYTES + 1, file_size, *EDGES64[::2]):
            m(f"{key}:key_len={show(v)}", SetField(("key_len", key), v))
    strings = [k for k in _keys_of(gf, str) if k != "general.architecture"]
    for key in ["general.architecture", *_spread(strings, 3)]:
        n = len(gf.metadata[key].encode())
        for v in (n + 1, gc.MAX_STRING_BYTES + 1, file_size, *EDGES64):
            m(f"{key}:str_len={show(v)}", SetField(("str_len", key), v))
    vocab = gf.metadata["tokenizer.ggml.tokens"]
    for i in sorted({0, vocab.count // 2, vocab.count - 1}):
        for v in (gc.MAX_STRING_BYTES + 1, 2**32, 2**63, 2**64 - 1):
            m(f"token {i}:len={show(v)}", SetField(("elem_len", "tokenizer.ggml.tokens", i), v))
    for t in _tensor_picks(gf):
        for v in (0, gc.MAX_KEY_BYTES + 1, 2**32, 2**63, 2**64 - 1):
            m(f"tensor {t}:name_len={show(v)}", SetField(("name_len", t), v))
        for n in (GGML_MAX_NAME - 1, GGML_MAX_NAME, 1000):
            m(f"tensor {t}:name of {n} chars", SetField(("namestr", t), gc.gstr("w" * n)))
    big = "x" * (1 << 20)
    m("general.name of 1 MiB", PutEntry("general.name", gc.kv("general.name", gc.STRING, big)))
    m("key of 60 KiB", PutEntry("k" * 60_000, gc.kv("k" * 60_000, gc.UINT32, 1)))
    bad_key = gc.kv(b"general.\xc3(", gc.UINT32, 1)  # a new entry whose key is not UTF-8
    m("invalid UTF-8 key", PutEntry("(not UTF-8)", bad_key, append=True))


def _arrays(m: _Maker, gf: GGUFFile) -> None:
    sizes = {"string": 8, "uint8": 1, "int8": 1, "bool": 1, "uint16": 2, "int16": 2}
    for key in _keys_of(gf, ArrayValue):
        arr: ArrayValue = gf.metadata[key]
        size = sizes.get(arr.item_type, 8 if "64" in arr.item_type else 4)
        values = (arr.count + 1, MAX_ARRAY_ITEMS + 1, *wraps(size), 2**63, 2**64 - 1, 2**32 - 1)
        for v in values:
            m(f"{key}:count={show(v)}", SetField(("count", key), v))


def _nested_entry(key: str, depth: int, count: int) -> bytes:
    """An array of arrays, ``depth`` deep, claiming ``count`` elements at every level."""
    inner = gc.u32(gc.UINT8) + gc.u64(1) + b"\x01"
    for _ in range(depth - 1):
        inner = gc.u32(gc.ARRAY) + gc.u64(count) + inner * min(count, 2)
    return gc.raw_kv(key, gc.ARRAY, inner)


def _nested(m: _Maker, gf: GGUFFile) -> None:
    for key in _keys_of(gf, ArrayValue):
        m(f"{key}:item_type=array", SetField(("item_type", key), gc.ARRAY))
    arch = gf.architecture
    for key in ("tokenizer.ggml.tokens", f"{arch}.attention.head_count_kv", "fuzz.nested"):
        for depth, count in ((2, 0), (2, 1), (2, 2), (3, 2), (16, 1), (2, 2**64 - 1)):
            entry = _nested_entry(key, depth, count)
            m(f"{key} nested {depth} deep x{show(count)}", PutEntry(key, entry))


def _other_types(value: Any) -> tuple[int, ...]:
    """Valid type codes surely not the value's own (the header does not say which int type)."""
    if isinstance(value, bool):
        return gc.UINT32, gc.STRING, gc.UINT64, gc.FLOAT64
    if isinstance(value, int):
        return gc.STRING, gc.FLOAT32, gc.FLOAT64, gc.BOOL
    if isinstance(value, float):
        return gc.UINT32, gc.STRING, gc.UINT64, gc.BOOL
    return gc.UINT8, gc.UINT32, gc.FLOAT32, gc.UINT64, gc.FLOAT64, gc.BOOL  # strings, arrays


def _types(m: _Maker, gf: GGUFFile) -> None:
    keys = _spread(_keys_of(gf), 6)
    for key in keys:
        for code in BAD_VALUE_TYPES:
            m(f"{key}:type={show(code)}", SetField(("type", key), code))
    for key in _spread(keys, 3):
        for code in _other_types(gf.metadata[key]):
            m(f"{key}:type={TYPE_NAMES[code]}", SetField(("type", key), code))
    for key in _keys_of(gf, ArrayValue):
        own = ITEM_CODES[gf.metadata[key].item_type]
        for code in (*BAD_VALUE_TYPES[:3], 2**32 - 1, gc.UINT8, gc.STRING, gc.UINT64):
            if code != own:
                label = TYPE_NAMES.get(code, show(code))
                m(f"{key}:item_type={label}", SetField(("item_type", key), code))
    for key in [k for k, v in gf.metadata.items() if isinstance(v, bool)][:2]:
        for v in (2, 255):
            m(f"{key}:bool={v}", SetField(("value", key), v))
    known = {int(t) for t in GGMLQuantizationType}
    unknown = [c for c in range(64) if c not in known][:6]
    for t in _tensor_picks(gf):
        for code in (*unknown, 2**31, 2**32 - 1):
            m(f"tensor {t}:ggml_type={show(code)}", SetField(("ggml_type", t), code))
        for qt in (GGMLQuantizationType.F32, GGMLQuantizationType.I8, GGMLQuantizationType.Q8_0):
            if int(qt) != gf.tensors[t].ggml_type:
                m(f"tensor {t}:ggml_type={qt.name}", SetField(("ggml_type", t), int(qt)))


def _alignments(m: _Maker) -> None:
    key = "general.alignment"
    entries: list[tuple[str, bytes]] = [
        (f"u32 {show(v)}", gc.kv(key, gc.UINT32, v))
        for v in (0, 1, 2, 3, 16, 24, 31, 33, 64, 4096, 2**31, 2**32 - 1)
    ]
    entries += [(f"u64 {show(v)}", gc.kv(key, gc.UINT64, v)) for v in (32, 2**40, 2**63, 2**64 - 1)]
    entries += [
        ("i32 -32", gc.kv(key, gc.INT32, -32)),
        ("i32 32", gc.kv(key, gc.INT32, 32)),
        ("u8 32", gc.kv(key, gc.UINT8, 32)),
        ("u16 32", gc.kv(key, gc.UINT16, 32)),
        ("f32 32", gc.kv(key, gc.FLOAT32, 32.0)),
        ("string 32", gc.kv(key, gc.STRING, "32")),
        ("bool", gc.kv(key, gc.BOOL, True)),
        ("array of u32", gc.kv(key, gc.ARRAY, [32], gc.UINT32)),
    ]
    for detail, entry in entries:
        m(detail, PutEntry(key, entry))
    m("given twice", PutEntry(key, gc.kv(key, gc.UINT32, 32)),
      PutEntry(key, gc.kv(key, gc.UINT32, 64), append=True))  # fmt: skip


def _dims(m: _Maker, gf: GGUFFile) -> None:
    for t in _tensor_picks(gf):
        info = gf.tensors[t]
        for v in (0, 5, 8, 2**16, 2**31, 2**32 - 1):
            m(f"tensor {t}:n_dims={show(v)}", SetField(("n_dims", t), v))
        for extra in (1, 2, 4):
            shape = info.shape + (1,) * (4 - len(info.shape) + extra)
            body = gc.tensor_info(info.name, shape, info.ggml_type, info.offset)
            m(f"tensor {t} with {len(shape)} dims", SetField(("tensor", t), body))


def _shapes(m: _Maker, gf: GGUFFile) -> None:
    for t in _tensor_picks(gf):
        info = gf.tensors[t]
        block = GGML_QUANT_SIZES[GGMLQuantizationType(info.ggml_type)][0]
        for j, d in enumerate(info.shape):
            values = (0, 2**63, 2**63 + 1, 2**64 - 1, 2**64 - block, 2**32, 2**62, d * 2, d + block)
            for v in values:
                m(f"tensor {t}:dim {j}={show(v)}", SetField(("dim", t, j), v))
        if len(info.shape) >= 2:
            for a, b in ((2**32, 2**32), (2**31, 2**33), (2**62, 4), (2**64 - block, 2)):
                m(f"tensor {t}:dims {show(a)} x {show(b)}",
                  SetField(("dim", t, 0), a), SetField(("dim", t, 1), b))  # fmt: skip


def _offsets(m: _Maker, gf: GGUFFile, data_size: int) -> None:
    tensors = gf.tensors
    for t in _tensor_picks(gf):
        off = tensors[t].offset
        other = tensors[(t + 1) % len(tensors)].offset
        values = (data_size, data_size + ALIGN, gf.file_size, 2**63, 2**64 - ALIGN, 2**64 - 1,
                  off + 1, off + ALIGN // 2, off + ALIGN, other)  # fmt: skip
        for v in dict.fromkeys(values):
            if v != off:
                m(f"tensor {t}:offset={show(v)}", SetField(("offset", t), v))


def _duplicates(m: _Maker, gf: GGUFFile) -> None:
    keys = _keys_of(gf)
    arch = gf.architecture
    pairs = [(keys[1], keys[0]), ("tokenizer.ggml.token_type", "tokenizer.ggml.tokens"),
             (f"{arch}.context_length", f"{arch}.block_count"), (keys[-1], keys[-2])]  # fmt: skip
    for renamed, existing in pairs:
        m(f"{renamed} renamed {existing}", SetField(("keystr", renamed), gc.gstr(existing)))
    seconds = [
        ("general.architecture", "gpt2", gc.STRING, "gpt2", None),
        (f"{arch}.block_count", "1", gc.UINT32, 1, None),
        (f"{arch}.block_count", "2**32-1", gc.UINT32, 2**32 - 1, None),
        ("tokenizer.ggml.tokens", "of 2", gc.ARRAY, ["a", "b"], gc.STRING),
        ("tokenizer.ggml.bos_token_id", "2**32-1", gc.UINT32, 2**32 - 1, None),
    ]
    for key, detail, vtype, value, item in seconds:
        m(f"second {key} {detail}", PutEntry(key, gc.kv(key, vtype, value, item), append=True))
    n = len(gf.tensors)
    for renamed, existing in ((1, 0), (n - 1, 0), (n // 2, n // 2 - 1), (n - 1, n - 2)):
        name = gf.tensors[existing].name
        m(f"tensor {renamed} renamed {name}", SetField(("namestr", renamed), gc.gstr(name)))


def _tokenizer(m: _Maker, gf: GGUFFile) -> None:
    n = gf.metadata["tokenizer.ggml.tokens"].count
    vocab = gc.tiny_vocab(n)

    def put(detail: str, key: str, vtype: int, value: Any, item: int | None = None) -> None:
        m(detail, PutEntry(key, gc.kv(key, vtype, value, item)))

    tokens, types = "tokenizer.ggml.tokens", "tokenizer.ggml.token_type"
    scores = "tokenizer.ggml.scores"
    wrong = ((gc.INT32, 0), (gc.UINT8, 0), (gc.FLOAT32, 0.0), (gc.UINT32, 1), (gc.BOOL, False),
             (gc.INT64, -1), (gc.FLOAT64, 0.5))  # fmt: skip
    for item, value in wrong:
        name = TYPE_NAMES[item]
        put(f"tokens as {name} array", tokens, gc.ARRAY, [value] * n, item)
        put(f"token_type as {name} array", types, gc.ARRAY, [value] * n, item)
        put(f"scores as {name} array", scores, gc.ARRAY, [value] * n, item)
    put("tokens as a string", tokens, gc.STRING, "abc")
    put("tokens as a u32", tokens, gc.UINT32, n)
    put("token_type as strings", types, gc.ARRAY, vocab, gc.STRING)
    put("scores as strings", scores, gc.ARRAY, vocab, gc.STRING)
    for count in (0, 1, n - 1, n + 1):
        put(f"tokens x{count} made up", tokens, gc.ARRAY, gc.tiny_vocab(count), gc.STRING)
        put(f"token_type x{count}", types, gc.ARRAY, [1] * count, gc.INT32)
        put(f"scores x{count}", scores, gc.ARRAY, [0.0] * count, gc.FLOAT32)
    for v in (-1, 0, 7, 2**31 - 1, -(2**31)):
        put(f"token_type all {v}", types, gc.ARRAY, [v] * n, gc.INT32)
    put("scores all NaN", scores, gc.ARRAY, [float("nan")] * n, gc.FLOAT32)
    put("tokens all empty", tokens, gc.ARRAY, [""] * n, gc.STRING)
    put("tokens all the same", tokens, gc.ARRAY, ["a"] * n, gc.STRING)
    merges = "tokenizer.ggml.merges"
    put("merges as int32 array", merges, gc.ARRAY, [1, 2, 3], gc.INT32)
    put("merges without a space", merges, gc.ARRAY, ["ab", "cd"], gc.STRING)
    put("merges of unknown tokens", merges, gc.ARRAY, ["zz qq", "\x00 \x00"], gc.STRING)
    put("merges empty", merges, gc.ARRAY, [], gc.STRING)
    put("merges as a string", merges, gc.STRING, "a b")
    for key in ("bos", "eos", "unknown", "padding"):
        k = f"tokenizer.ggml.{key}_token_id"
        for v in (n, n + 1, 2**31, 2**32 - 1):
            put(f"{key} id {show(v)}", k, gc.UINT32, v)
        put(f"{key} id -1 as int32", k, gc.INT32, -1)
        put(f"{key} id 2**63 as u64", k, gc.UINT64, 2**63)
        put(f"{key} id as a string", k, gc.STRING, "1")
    for model in ("", "llama", "bert", "t5", "rwkv", "plamo2", "no such tokenizer", "x" * 5000):
        put(f"model {model[:20]!r}", "tokenizer.ggml.model", gc.STRING, model)
    for pre in ("", "no such pre-tokenizer", "llama3", "qwen2"):
        put(f"pre {pre!r}", "tokenizer.ggml.pre", gc.STRING, pre)
    put("model as u32", "tokenizer.ggml.model", gc.UINT32, 1)
    put("add_bos_token as u32", "tokenizer.ggml.add_bos_token", gc.UINT32, 2)
    put("chat template as u32", "tokenizer.chat_template", gc.UINT32, 1)
    template = "tokenizer.chat_template"
    put("chat template broken", template, gc.STRING, "{% for %}{{")
    put("chat template at the cap", template, gc.STRING, "{{ x }}" * (MAX_TEMPLATE_BYTES // 7))
    put("chat template over the cap", template, gc.STRING, "x" * (MAX_TEMPLATE_BYTES + 1))
    put("chat template of 1 MiB", template, gc.STRING, "{{ x }}" * 150_000)
    put("chat template nested 5000 deep", template, gc.STRING,
        "{% if x %}" * 5000 + "{% endif %}" * 5000)  # fmt: skip
    put(
        "chat template of deep brackets",
        template,
        gc.STRING,
        "{{" + "(" * 20_000 + ")" * 20_000 + "}}",
    )
    put("named chat template of 1 MiB", f"{template}.tool_use", gc.STRING, "{{ x }}" * 150_000)


def _hparams(m: _Maker, gf: GGUFFile) -> None:
    arch = gf.architecture

    def put(detail: str, suffix: str, vtype: int, value: Any, item: int | None = None) -> None:
        key = f"{arch}.{suffix}"
        m(f"{suffix}={detail}", PutEntry(key, gc.kv(key, vtype, value, item)))

    n_layers = gf.arch_value("block_count")
    for v in (0, 1, n_layers - 1, n_layers + 1, MAX_LAYERS, MAX_LAYERS + 1, 4096, *EDGES32):
        put(f"{show(v)}", "block_count", gc.UINT32, v)
    for v in (2**63, 2**64 - 1):
        put(f"u64 {show(v)}", "block_count", gc.UINT64, v)
    put("i32 -1", "block_count", gc.INT32, -1)
    put("f32", "block_count", gc.FLOAT32, float(n_layers))
    put("string", "block_count", gc.STRING, str(n_layers))
    for v in (0, 1, 15, 2**31 - 1, 2**31, 2**32 - 1):
        put(f"{show(v)}", "context_length", gc.UINT32, v)
    for v in (2**32, 2**63, 2**64 - 1):
        put(f"u64 {show(v)}", "context_length", gc.UINT64, v)
    put("i32 -1", "context_length", gc.INT32, -1)
    put("f64 inf", "context_length", gc.FLOAT64, float("inf"))
    for suffix in ("embedding_length", "feed_forward_length", "attention.head_count",
                   "attention.head_count_kv", "rope.dimension_count", "vocab_size"):  # fmt: skip
        for v in (0, 7, 2**31, 2**32 - 1):
            put(f"{show(v)}", suffix, gc.UINT32, v)
    for suffix in ("attention.head_count", "attention.head_count_kv"):
        put("array too short", suffix, gc.ARRAY, [1], gc.INT32)
        put("array too long", suffix, gc.ARRAY, [1] * (n_layers + 1), gc.INT32)
        put("array of zeros", suffix, gc.ARRAY, [0] * n_layers, gc.INT32)
        put("array of -1", suffix, gc.ARRAY, [-1] * n_layers, gc.INT32)
        put("array of u64 max", suffix, gc.ARRAY, [2**64 - 1] * n_layers, gc.UINT64)
    for suffix in ("rope.freq_base", "attention.layer_norm_rms_epsilon"):
        for v in (0.0, -1.0, float("nan"), float("inf"), 1e38):
            put(f"{v}", suffix, gc.FLOAT32, v)
    for v in (9999, 2**32 - 1):
        m(
            f"file_type={show(v)}",
            PutEntry("general.file_type", gc.kv("general.file_type", gc.UINT32, v)),
        )
    for name in ("no-such-arch", "", "gpt2", "bert"):
        entry = gc.kv("general.architecture", gc.STRING, name)
        m(f"architecture {name!r}", PutEntry("general.architecture", entry))
    m("architecture removed", PutEntry("general.architecture", None))
    m("block_count removed", PutEntry(f"{arch}.block_count", None))


def _cuts(m: _Maker, gf: GGUFFile, layout_free_keys: list[str]) -> None:
    for pos in (0, 1, 3, 5, 8, 12, 16, 20, 23):
        m(f"cut at byte {pos}", cut=(("magic",), pos))
    for key in layout_free_keys:
        m(f"cut in {key} length", cut=(("key_len", key), 3))
        m(f"cut in {key} key", cut=(("key", key), 1))
        m(f"cut in {key} type", cut=(("type", key), 2))
        m(f"cut in {key} value", cut=(("value", key), 1))
    arr = "tokenizer.ggml.tokens"
    count = gf.metadata[arr].count
    for i in sorted({0, count // 2, count - 1}):
        m(f"cut in token {i} length", cut=(("elem_len", arr, i), 4))
        m(f"cut in token {i}", cut=(("elem", arr, i), 9))
    for t in _tensor_picks(gf):
        for part, inside in (("name_len", 1), ("name", 1), ("n_dims", 2), ("dim", 5),
                             ("ggml_type", 1), ("offset", 7)):  # fmt: skip
            ref = ("dim", t, 0) if part == "dim" else (part, t)
            m(f"cut in tensor {t} {part}", cut=(ref, inside))
    m("cut in the padding", cut=(("pad",), 1))
    m("cut at the data", cut=(("data",), 0))
    m("cut 1 byte into the data", cut=(("data",), 1))
    m("cut half way through the data", cut=(("data",), (gf.file_size - gf.data_offset) // 2))
    m("cut 1 byte before the end", cut=(("data",), gf.file_size - gf.data_offset - 1))


def _random(m: _Maker, gf: GGUFFile, seed: int, count: int) -> None:
    """Seeded overwrites of 1 to 3 integer fields with values at type limits or near the old one.

    Fields whose old value the header does not tell (the type code of a number) are left to the
    ``type`` class, so that no overwrite can leave the file as it was.
    """
    rng = random.Random(seed)
    fields: list[tuple[Ref, int, int]] = [
        (("n_kv",), 8, len(gf.metadata)),
        (("n_tensors",), 8, len(gf.tensors)),
        (("version",), 4, gf.version),
    ]
    for key, value in gf.metadata.items():
        fields.append((("key_len", key), 8, len(key.encode())))
        if isinstance(value, bool):
            fields.append((("type", key), 4, gc.BOOL))
        elif isinstance(value, str):
            fields += [(("type", key), 4, gc.STRING), (("str_len", key), 8, len(value.encode()))]
        elif isinstance(value, ArrayValue):
            fields += [
                (("type", key), 4, gc.ARRAY),
                (("item_type", key), 4, ITEM_CODES[value.item_type]),
                (("count", key), 8, value.count),
            ]
            if value.item_type == "string" and value.items:
                i = rng.randrange(value.count)
                fields.append((("elem_len", key, i), 8, len(value.items[i].encode())))
    for t, info in enumerate(gf.tensors):
        fields += [
            (("name_len", t), 8, len(info.name.encode())),
            (("n_dims", t), 4, len(info.shape)),
            (("ggml_type", t), 4, info.ggml_type),
            (("offset", t), 8, info.offset),
        ]
        fields += [(("dim", t, j), 8, d) for j, d in enumerate(info.shape)]
    for i in range(count):
        chosen = rng.sample(fields, rng.randint(1, 3))
        edits = []
        for ref, width, old in chosen:
            limit = 2 ** (8 * width)
            value = old
            while value == old:
                pool = [
                    rng.choice(EDGES64 if width == 8 else EDGES32),
                    old ^ (1 << rng.randrange(8 * width)),
                    old + rng.randint(-3, 3),
                    rng.randrange(limit),
                    rng.randrange(64),
                ]
                value = rng.choice(pool) % limit
            edits.append(SetField(ref, value))
        detail = ", ".join(f"{':'.join(map(str, ref))}" for ref, _, _ in chosen)
        values = ", ".join(show(e.value) for e in edits if isinstance(e.value, int))
        m(f"{i:03d} {detail}={values}", *edits)


def _mark_fast(cases: list[FuzzCase], n: int) -> list[FuzzCase]:
    picked = {id(c) for c in _spread(cases, n)}
    return [replace(c, fast=id(c) in picked) for c in cases]


# Cases per class in the normal run, for the tiny base and the real model.
FAST_TINY = 14
FAST_REAL = 7


def _builders(gf: GGUFFile, seed: int, random_count: int) -> dict[str, Callable[[_Maker], None]]:
    data_size = gf.file_size - gf.data_offset
    return {
        "count": lambda m: _counts(m, gf),
        "string": lambda m: _strings(m, gf),
        "array": lambda m: _arrays(m, gf),
        "nested": lambda m: _nested(m, gf),
        "type": lambda m: _types(m, gf),
        "alignment": _alignments,
        "dims": lambda m: _dims(m, gf),
        "shape": lambda m: _shapes(m, gf),
        "offset": lambda m: _offsets(m, gf, data_size),
        "duplicate": lambda m: _duplicates(m, gf),
        "tokenizer": lambda m: _tokenizer(m, gf),
        "hparams": lambda m: _hparams(m, gf),
        "truncated": lambda m: _cuts(m, gf, _spread(_keys_of(gf), 6)),
        "random": lambda m: _random(m, gf, seed, random_count),
    }


def fuzz_cases(tiny: GGUFFile, real: GGUFFile | None, *, random_count: int = 150) -> list[FuzzCase]:
    """Every case, for the tiny model and (when its header is given) the real default model."""
    cases: list[FuzzCase] = []
    for base, gf, seed in (("tiny", tiny, 7), ("real", real, 11)):
        if gf is None:
            continue
        for kind, build in _builders(gf, seed, random_count).items():
            maker = _Maker(base, kind)
            build(maker)
            cases += _mark_fast(maker.cases, FAST_TINY if base == "tiny" else FAST_REAL)
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise AssertionError(f"fuzz case names must be unique: {dupes[:5]}")
    return cases


class Tally:
    """Cases tried, by class and outcome, so that a run says what it covered."""

    def __init__(self) -> None:
        self.counts: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )

    def add(self, kind: str, outcome: str) -> None:
        self.counts[kind][outcome] += 1

    def report(self) -> str:
        total = sum(sum(c.values()) for c in self.counts.values())
        lines = [f"{total} GGUF cases tried"]
        for kind, counts in sorted(self.counts.items()):
            parts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
            lines.append(f"  {kind:<10} {sum(counts.values()):>5}: {parts}")
        return "\n".join(lines)


TALLY_KEY = pytest.StashKey[Tally]()
