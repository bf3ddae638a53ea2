"""A model file that changes or lies on its way to llama.cpp (issue 47, rows 5, 6 and 9).

Row 5: the parent checked the header, then a watcher swapped the file during the child's start
and llama.cpp got one the checker refuses (SIGABRT). The swap is made here at the same point,
deterministically: right after the check, before the child is asked to load. Row 6: only a
split's first part was checked; a second part declaring a 1 TiB key reached llama.cpp's own
parser, and one whose ``split.no`` has another type than uint16 fails its GGML_ASSERT. Row 9:
head sizes and widths of -2**62 made the memory estimate negative, so the preflight passed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.core.engine import host as host_module
from app.core.engine.gguf import (
    MAX_HEAD_DIM,
    MAX_WIDTH,
    GGUFError,
    check_parts,
    inspect_model,
    read_gguf,
)
from app.core.engine.host import EngineHost
from app.core.engine.model_files import PROC_FD, hold_checked
from app.core.engine.types import EngineCrashedError, LoadSettings, ModelLoadError
from tests.core import gguf_cases as gc

SETTINGS = LoadSettings(n_ctx=512)
TIB = 1 << 40


def _override(kvs: Sequence[bytes], new: dict[str, tuple[int, object]]) -> list[bytes]:
    """``kvs`` with the entries of ``new`` (key: (type, value)) in place of their namesakes."""
    names = [gc.gstr(key) for key in new]
    kept = [e for e in kvs if not any(e.startswith(name) for name in names)]
    return kept + [gc.kv(key, vtype, value) for key, (vtype, value) in new.items()]


def _tiny(new: dict[str, tuple[int, object]] | None = None) -> bytes:
    """The crafted tiny model, with some of its metadata replaced."""
    kvs = _override(gc.tiny_model_kvs(every_type=False), new or {})
    return gc.build_gguf(kvs, gc.tiny_tensors())


def _aborting() -> bytes:
    """A header the checker refuses and llama.cpp aborts on (block_count 100000 > 512)."""
    return _tiny({"llama.block_count": (gc.UINT32, 100_000)})


# --- Row 5: the model loaded is the model checked ---------------------------------------------


def test_a_file_swapped_after_the_check_never_reaches_llama_cpp(
    tmp_path: Path, model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review's swap, at the same point: after the parent's check, before the child (not
    started yet) opens the file. Before the fix: SIGABRT; now one sentence, and the engine lives."""
    target = tmp_path / "model.gguf"
    os.link(model_path, target)  # the real model under a name the attacker can replace
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(_aborting())
    with pytest.raises(GGUFError, match=r"llama\.block_count is 100000"):
        inspect_model(bad)
    preflight = host_module.memory_preflight
    swaps: list[Path] = []

    def swap_then_preflight(*args: object, **kwargs: object) -> object:
        if not swaps:
            os.replace(bad, target)
            swaps.append(target)
        return preflight(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(host_module, "memory_preflight", swap_then_preflight)
    with EngineHost() as host:
        try:
            host.load(target, SETTINGS)
        except EngineCrashedError as exc:  # what happened before the fix
            pytest.fail(f"llama.cpp was given the swapped file: {exc}")
        except ModelLoadError as exc:
            assert str(exc) == (
                "cannot load model.gguf: the file changed on disk after it was checked, so it "
                "was not given to llama.cpp; load it again"
            )
        else:
            pytest.fail("the swapped file was loaded")
        assert swaps and host.alive and host.model is None
        assert host.load(model_path, SETTINGS).n_vocab == 49152  # the same child goes on


def test_a_vocabulary_swapped_after_the_check_never_reaches_llama_cpp(
    tmp_path: Path, model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same swap for a vocabulary loaded alone (counting before a model is loaded)."""
    target = tmp_path / "model.gguf"
    os.link(model_path, target)
    bad = _write(tmp_path / "bad.gguf", _aborting())
    header = host_module.tokenizer_header

    def check_then_swap(path: object) -> object:
        checked = header(path)  # type: ignore[arg-type]
        os.replace(bad, target)
        return checked

    monkeypatch.setattr(host_module, "tokenizer_header", check_then_swap)
    with EngineHost() as host:
        try:
            host.load_vocab(target)
        except EngineCrashedError as exc:
            pytest.fail(f"llama.cpp was given the swapped file: {exc}")
        except ModelLoadError as exc:
            assert "changed on disk after it was checked" in str(exc)
        else:
            pytest.fail("the swapped file was read")
        monkeypatch.setattr(host_module, "tokenizer_header", header)
        assert host.alive and host.load_vocab(model_path) == 49152  # the same child goes on


@pytest.mark.unit
@pytest.mark.skipif(not PROC_FD.is_dir(), reason="needs /proc/self/fd (Linux)")
def test_llama_cpp_opens_the_checked_file_whatever_the_path_names_later(tmp_path: Path) -> None:
    """After the child's comparison, llama.cpp (and every later read: the tokenizer, the
    vocabulary) reaches the held descriptor through the link, not the path."""
    path = tmp_path / "tiny.gguf"
    path.write_bytes(gc.tiny_model())
    files = check_parts(path).files
    held = hold_checked(files, tmp_path / "links")
    try:
        os.replace(_write(tmp_path / "bad.gguf", _aborting()), path)
        assert Path(held.path).name == "tiny.gguf"
        assert read_gguf(held.path).get("llama.block_count") == gc.TINY_N_LAYERS
        seen, checked = read_gguf(held.path).identity, files[0].identity
        assert seen is not None and (seen.device, seen.inode) == (checked.device, checked.inode)
    finally:
        held.close()
    assert not (tmp_path / "links").exists()


@pytest.mark.unit
@pytest.mark.parametrize("change", ["replaced", "written in place", "removed", "a FIFO"])
def test_a_file_changed_before_the_child_opens_it_is_refused(tmp_path: Path, change: str) -> None:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(gc.tiny_model())
    os.utime(path, ns=(10**18, 10**18))  # a write now moves the time, whatever the clock's tick
    files = check_parts(path).files
    if change == "replaced":
        os.replace(_write(tmp_path / "bad.gguf", _aborting()), path)
    elif change == "written in place":
        with path.open("r+b") as fh:  # same inode, same size: the modification time tells
            fh.seek(-1, os.SEEK_END)
            fh.write(b"\x01")
    elif change == "removed":
        path.unlink()
    else:
        path.unlink()
        os.mkfifo(path)  # opened without blocking, then refused
    with pytest.raises(ModelLoadError, match=r"^cannot load tiny\.gguf: ") as err:
        hold_checked(files, tmp_path / "links")
    assert "Traceback" not in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "links").exists()


@pytest.mark.unit
def test_a_link_or_chmod_made_meanwhile_is_not_a_change(tmp_path: Path) -> None:
    """Other tools link a shared model (a cache that de-duplicates, a test suite's workers) or
    change its mode: the same file, loaded (the change time had refused it as changed)."""
    path = tmp_path / "tiny.gguf"
    path.write_bytes(gc.tiny_model())
    files = check_parts(path).files
    os.link(path, tmp_path / "linked.gguf")
    path.chmod(0o600)
    held = hold_checked(files, tmp_path / "links")
    try:
        assert read_gguf(held.path).get("llama.block_count") == gc.TINY_N_LAYERS
    finally:
        held.close()


# --- Row 6: every part of a split model is checked ---------------------------------------------


def _split_keys(no: int, count: int, *, no_type: int = gc.UINT16) -> list[bytes]:
    return [gc.kv("split.no", no_type, no), gc.kv("split.count", gc.UINT16, count),
            gc.kv("split.tensors.count", gc.INT32, count)]  # fmt: skip


def _part(no: int, count: int, *, no_type: int = gc.UINT16) -> bytes:
    """Part ``no`` (from 0) of a split as gguf-split writes it: the split keys, one tensor."""
    return gc.build_gguf([gc.ARCH, *_split_keys(no, count, no_type=no_type)],
                         [gc.Tensor(f"blk.{no}.extra.weight", (8, 4))])  # fmt: skip


def _first(count: int) -> bytes:
    return gc.build_gguf(gc.tiny_model_kvs(every_type=False) + _split_keys(0, count),
                         gc.tiny_tensors())  # fmt: skip


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _split(folder: Path, parts: Sequence[bytes | None], prefix: str = "tiny") -> list[Path]:
    """The parts written as llama.cpp names them (None: a part left out)."""
    n = len(parts)
    paths = [folder / f"{prefix}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]
    for path, data in zip(paths, parts, strict=True):
        if data is not None:
            path.write_bytes(data)
    return paths


def _huge_key() -> bytes:
    """The review's second part: its first key claims 1 TiB."""
    return gc.header(0, 1) + gc.u64(TIB) + b"split.no"


@pytest.mark.unit
def test_a_hostile_second_part_is_refused_before_llama_cpp_sees_it(tmp_path: Path) -> None:
    first, second, _ = _split(tmp_path, [_first(3), _huge_key(), _part(2, 3)])
    sentence = (f"part 2 of 3 ({second.name}): metadata key 0 claims {TIB:,} bytes, more than "
                "the limit of 65,536")  # fmt: skip
    inspect_model(first)  # the first part alone passes: that was the gap
    with pytest.raises(GGUFError) as err:
        check_parts(first)
    assert str(err.value) == sentence
    host = EngineHost()
    with pytest.raises(ModelLoadError) as err:
        host.load(first, SETTINGS)
    assert str(err.value) == f"cannot load {first.name}: {sentence}"
    assert host.pid is None  # refused in the parent: no engine was started for it


@pytest.mark.unit
@pytest.mark.parametrize(("layout", "expected"), [
    ("split.no as uint32", "part 2 of 2 (tiny-00002-of-00002.gguf) does not say it is that part "
                           "(its split.no is 1 as uint32)"),
    ("split.no of another part", "part 2 of 2 (tiny-00002-of-00002.gguf) does not say it is that "
                                 "part (its split.no is 0 as uint16)"),
    ("a part missing", "part 2 of 2 (tiny-00002-of-00002.gguf): model file not found"),
    ("not named as a split", "tiny.gguf is the first of 2 parts, but its name does not end in "
                             "-00001-of-00002.gguf, so llama.cpp cannot find the others"),
    ("the second part given", "tiny-00002-of-00002.gguf is part 2 of a model split into 2 files; "
                              "load its first part"),
    ("split.count absurd", "split.count is 100000; a split model has 2 to 65,535 parts"),
])  # fmt: skip
def test_a_split_that_llama_cpp_would_trip_on_is_one_sentence(
    tmp_path: Path, layout: str, expected: str
) -> None:
    second = _part(1, 2)
    if layout == "split.no as uint32":  # llama.cpp reads it with an assert on its type: SIGABRT
        second = _part(1, 2, no_type=gc.UINT32)
    elif layout == "split.no of another part":
        second = _part(0, 2)
    first, second_path = _split(tmp_path, [_first(2), None if layout == "a part missing"
                                           else second])  # fmt: skip
    given = first
    if layout == "not named as a split":
        given = first.rename(tmp_path / "tiny.gguf")
    elif layout == "the second part given":
        second_path.write_bytes(_tiny({"split.no": (gc.UINT16, 1), "split.count": (gc.UINT16, 2)}))
        given = second_path
    elif layout == "split.count absurd":
        first.write_bytes(_tiny({"split.no": (gc.UINT16, 0), "split.count": (gc.UINT32, 100_000)}))
    with pytest.raises(GGUFError) as err:
        check_parts(given)
    assert str(err.value).startswith(expected), str(err.value)


@pytest.mark.unit
def test_a_whole_split_is_checked_and_counted_as_one_model(tmp_path: Path) -> None:
    paths = _split(tmp_path, [_first(3), _part(1, 3), _part(2, 3)])
    checked = check_parts(paths[0])
    alone = inspect_model(paths[0])
    assert [f.path for f in checked.files] == [str(p) for p in paths]
    assert [f.identity for f in checked.files] == [read_gguf(p).identity for p in paths]
    assert checked.info.file_size == sum(p.stat().st_size for p in paths)
    assert checked.info.n_tensors == alone.n_tensors + 2
    assert checked.info.parameters == alone.parameters + 2 * 32
    assert checked.info.tensor_bytes == alone.tensor_bytes + 2 * 128
    whole = tmp_path / "whole.gguf"
    whole.write_bytes(gc.tiny_model())
    assert check_parts(whole).info == inspect_model(whole)


def _split_real_model(model: Path, folder: Path, count: int) -> list[Path]:
    """``model`` cut into ``count`` parts as gguf-split cuts it: the first with the metadata,
    every part with the split keys, the tensors shared out in order, their bytes copied."""
    from gguf import GGUFReader  # noqa: PLC0415 (only this test reads a model this way)

    reader = GGUFReader(model)
    raw = model.read_bytes()
    infos = read_gguf(model).tensors
    kv_bytes = raw[24 : min(t.field.offset for t in reader.tensors)]
    n_kv = len(read_gguf(model).metadata)
    share = -(-len(infos) // count)
    paths = []
    for no in range(count):
        mine = infos[no * share : (no + 1) * share]
        keys = [gc.kv("split.no", gc.UINT16, no), gc.kv("split.count", gc.UINT16, count)]
        if no == 0:
            keys.append(gc.kv("split.tensors.count", gc.INT32, len(infos)))
        head, body, end = (kv_bytes if no == 0 else b""), [], 0
        for t in mine:
            start = gc.align(end, reader.alignment)
            body.append(gc.tensor_info(t.name, t.shape, t.ggml_type, start))
            end = start + t.n_bytes
        n_keys = len(keys) + (n_kv if no == 0 else 0)
        data = gc.header(len(mine), n_keys) + head + b"".join(keys) + b"".join(body)
        data += bytes(-len(data) % reader.alignment)
        tensors = bytearray(end)
        at = 0
        for t in mine:
            at = gc.align(at, reader.alignment)
            src = reader.data_offset + t.offset
            tensors[at : at + t.n_bytes] = raw[src : src + t.n_bytes]
            at += t.n_bytes
        path = folder / f"smol-{no + 1:05d}-of-{count:05d}.gguf"
        path.write_bytes(data + bytes(tensors))
        paths.append(path)
    return paths


def test_a_split_model_loads_from_its_checked_parts(tmp_path: Path, model_path: Path) -> None:
    """llama.cpp finds a split's other parts by name: through the links too, and it gets the
    same model as from the whole file. What the engine reads of it later (the header, for a
    prompt's continuation) is the file checked, whatever the path names by then."""
    paths = _split_real_model(model_path, tmp_path, 3)
    checked = check_parts(paths[0])
    assert len(checked.files) == 3
    assert checked.info.parameters == inspect_model(model_path).parameters
    with EngineHost() as host:
        loaded = host.load(paths[0], SETTINGS)
        assert loaded.n_vocab == 49152 and host.model_info == checked.info
        tokens = host.tokenize("The files are checked first.")
        assert host.evaluate(tokens).n_evaluated == len(tokens)
        if PROC_FD.is_dir():  # elsewhere llama.cpp is given the path, just compared
            os.replace(_write(tmp_path / "bad.gguf", b"not a GGUF"), paths[0])
        assert host.tokenize("checked", continuation=True)  # reads the header again


def test_a_split_in_the_hugging_face_cache_loads(tmp_path: Path, model_path: Path) -> None:
    """The cache names each part by a link to a blob named by its hash: llama.cpp must be
    given the parts' names, not the blobs' (it said "invalid split file name" before)."""
    snapshot = tmp_path / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for i, part in enumerate(_split_real_model(model_path, tmp_path, 2)):
        blob = tmp_path / f"blob{i}"
        os.replace(part, blob)
        (snapshot / part.name).symlink_to(blob)
    with EngineHost() as host:
        assert host.load(snapshot / "smol-00001-of-00002.gguf", SETTINGS).n_vocab == 49152


# --- Row 9: header values bounded before any arithmetic ----------------------------------------


NEGATIVE = -(2**62)


@pytest.mark.unit
@pytest.mark.parametrize(("key", "value", "bounds"), [
    ("llama.embedding_length", NEGATIVE, f"an embedding width is 1 to {MAX_WIDTH:,}"),
    ("llama.embedding_length", 2**40, f"an embedding width is 1 to {MAX_WIDTH:,}"),
    ("llama.attention.key_length", NEGATIVE, f"a head size is 1 to {MAX_HEAD_DIM:,}"),
    ("llama.attention.value_length", 0, f"a head size is 1 to {MAX_HEAD_DIM:,}"),
    ("llama.attention.key_length_swa", NEGATIVE, f"a head size is 1 to {MAX_HEAD_DIM:,}"),
    ("llama.feed_forward_length", NEGATIVE, f"a feed-forward width is 0 to {MAX_WIDTH:,}"),
    ("llama.vocab_size", NEGATIVE, "a vocabulary size is 1 to"),
    ("llama.attention.sliding_window", NEGATIVE, "not a number of tokens"),
])  # fmt: skip
def test_a_size_the_estimate_multiplies_is_bounded(
    tmp_path: Path, key: str, value: int, bounds: str
) -> None:
    new: dict[str, tuple[int, object]] = {key: (gc.INT64, value)}
    if key == "llama.attention.key_length_swa":  # read where llama.cpp applies a window
        new = {"general.architecture": (gc.STRING, "gemma2"), key.replace("llama", "gemma2"):
               (gc.INT64, value)}  # fmt: skip
        key = key.replace("llama", "gemma2")
    if key == "llama.vocab_size":  # used when the file lists no tokens
        path = _write(tmp_path / "m.gguf", gc.build_gguf([gc.ARCH, gc.kv(key, gc.INT64, value)]))
    else:
        path = _write(tmp_path / "m.gguf", _tiny(new))
    with pytest.raises(GGUFError) as err:
        inspect_model(path)
    message = str(err.value)
    assert message.startswith(f"{key} ") and bounds in message and "\n" not in message


@pytest.mark.unit
def test_the_reviews_header_is_refused_before_the_memory_estimate(tmp_path: Path) -> None:
    """The review's three values together: "fits: -90,071,992,547,409,856 MiB" before; now the
    load is refused in the parent with the first key named, no estimate made."""
    path = _write(tmp_path / "negative.gguf", _tiny({
        "llama.embedding_length": (gc.INT64, NEGATIVE),
        "llama.attention.key_length": (gc.INT64, NEGATIVE),
        "llama.feed_forward_length": (gc.INT64, NEGATIVE),
    }))  # fmt: skip
    host = EngineHost()
    with pytest.raises(ModelLoadError, match=r"^cannot load negative\.gguf: llama\.embedding_len"):
        host.load(path, SETTINGS)
    assert host.pid is None


@pytest.mark.unit
def test_per_layer_widths_are_bounded_too(tmp_path: Path) -> None:
    kvs = [e for e in gc.tiny_model_kvs(every_type=False)
           if not e.startswith(gc.gstr("llama.feed_forward_length"))]  # fmt: skip
    ok = [*kvs, gc.kv("llama.feed_forward_length", gc.ARRAY, [128, 0], gc.INT32)]
    bad = [*kvs, gc.kv("llama.feed_forward_length", gc.ARRAY, [128, -5], gc.INT32)]
    widths = _write(tmp_path / "ok.gguf", gc.build_gguf(ok, gc.tiny_tensors()))
    assert inspect_model(widths).n_ff == 128  # a layer without a feed-forward part is 0
    with pytest.raises(GGUFError, match=r"^llama\.feed_forward_length holds -5; a feed-forward"):
        inspect_model(_write(tmp_path / "bad.gguf", gc.build_gguf(bad, gc.tiny_tensors())))
