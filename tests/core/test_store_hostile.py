"""Model stores written by someone else (issue 47, rows 3, 4 and 7): Ollama's service account, a
shared ``OLLAMA_MODELS`` or ``HF_HUB_CACHE``, a model's publisher. Real files in a temporary
folder: JSON nested 200,000 deep, FIFOs (``os.mkfifo``) and links to ``/dev/zero`` where a
small file belongs, links from ``manifests/`` back to itself, thousands of split parts.

A read that blocks runs in a daemon thread joined with a timeout, so a regression fails here
instead of hanging the run; sizes are asserted as counts (folders listed, comparisons made),
never as wall-clock times."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.core import hub_refs, model_folders, model_sources, ollama_store
from app.core.cancelled import Cancelled
from app.core.config import Config
from app.core.gguf_splits import group_files
from app.core.hub_refs import HubRef, choose_files
from app.core.model_cards import CardCache
from app.core.model_sources import Discovery, Source, discover, lm_studio_roots
from app.core.small_files import SmallFileError, read_small, read_small_text
from tests.model_homes import write_tiny_gguf

pytestmark = pytest.mark.unit

DEEP = b"[" * 200_000  # 200 kB, under the 1 MiB caps: json.loads raises RecursionError
MODEL_HEX = "cd" * 32
KINDS = ("template", "params", "system")
BLOCKED_AFTER_S = 10.0


# ----- helpers -----


def release(fifo: Path) -> None:
    """Open ``fifo`` for writing and close it: a reader stuck in ``open`` goes on (at EOF)."""
    with contextlib.suppress(OSError):  # nobody was reading it
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def within(fn: Callable[[], Any], fifos: list[Path]) -> Any:
    """``fn()`` in a daemon thread; the test fails (and the reader is released) when it is
    still running after BLOCKED_AFTER_S."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # raised again on the test's thread
            box["error"] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(BLOCKED_AFTER_S)
    if thread.is_alive():
        for fifo in fifos:
            release(fifo)
        pytest.fail(f"still reading after {BLOCKED_AFTER_S:.0f} s: blocked on a FIFO")
    if "error" in box:
        raise box["error"]
    return box["value"]


def hostile(path: Path, kind: str) -> Path:
    """``path`` made a FIFO (``"fifo"``) or a link to /dev/zero (``"zero"``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


def new_store(store: Path) -> Path:
    """An Ollama store whose one model blob is a file (the store reads no GGUF header)."""
    (store / "blobs").mkdir(parents=True)
    (store / "blobs" / f"sha256-{MODEL_HEX}").write_bytes(b"GGUF")
    return store


def blob(store: Path, hex_: str) -> Path:
    return store / "blobs" / f"sha256-{hex_}"


def manifest(store: Path, model: str, *, text: bytes | None = None,
             layers: dict[str, str] | None = None) -> Path:  # fmt: skip
    """manifests/registry.ollama.ai/library/<model>/latest: ``text``, else JSON naming the
    model blob and ``layers`` ({"template": hex, ...})."""
    path = store / "manifests" / "registry.ollama.ai" / "library" / model / "latest"
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        named = [{"mediaType": "application/vnd.ollama.image.model",
                  "digest": f"sha256:{MODEL_HEX}"}]  # fmt: skip
        named += [{"mediaType": f"application/vnd.ollama.image.{kind}", "digest": f"sha256:{h}"}
                  for kind, h in (layers or {}).items()]  # fmt: skip
        text = json.dumps({"layers": named}).encode()
    path.write_bytes(text)
    return path


def one_line_sentences(lines: list[str]) -> None:
    for line in lines:
        assert "\n" not in line and line.endswith("."), line


# ----- row 3: JSON nested too deeply -----


def test_a_manifest_nested_200k_deep_is_one_sentence_and_the_rest_is_listed(
    tmp_path: Path,
) -> None:
    store = new_store(tmp_path / "ollama")
    manifest(store, "good")
    bad = manifest(store, "deep", text=DEEP)
    listing = ollama_store.read_store(store)
    assert [m.name for m in listing.models] == ["good:latest"]
    assert listing.problems == [
        f"Ollama manifest {bad}: is JSON nested too deeply to read."]  # fmt: skip


def test_a_parameters_blob_nested_200k_deep_leaves_the_model_listed_without_them(
    tmp_path: Path,
) -> None:
    store = new_store(tmp_path / "ollama")
    blob(store, "ee" * 32).write_bytes(DEEP)
    path = manifest(store, "m", layers={"params": "ee" * 32})
    listing = ollama_store.read_store(store)
    assert [(m.name, m.parameters) for m in listing.models] == [("m:latest", None)]
    assert listing.problems == [f"Ollama manifest {path}: its parameters are not a JSON object, "
                                "so it is listed without them."]  # fmt: skip


def test_a_folder_list_nested_200k_deep_is_no_folders(tmp_path: Path) -> None:
    file = tmp_path / "model-folders.json"
    file.write_bytes(b'{"folders": ' + DEEP)
    assert model_folders.load_folders(file) == []


# ----- row 4: one bounded reader for every small file -----


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = hostile(tmp_path / "template", "fifo")
    with pytest.raises(SmallFileError) as refused:
        within(lambda: read_small(fifo, 1024), [fifo])
    assert str(refused.value) == f"{fifo} is a FIFO, not a regular file"


def test_a_link_to_dev_zero_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    zero = hostile(tmp_path / "refs" / "main", "zero")
    with pytest.raises(SmallFileError) as refused:
        within(lambda: read_small(zero, 1 << 20), [])
    assert refused.value.reason == "is a device, not a regular file"


def test_at_most_the_cap_is_read(tmp_path: Path) -> None:
    file = tmp_path / "blob"
    file.write_bytes(b"x" * 100)
    assert read_small(file, 100) == b"x" * 100
    with pytest.raises(SmallFileError, match=r"is larger than 99 bytes$"):
        read_small(file, 99)
    link = tmp_path / "link"
    link.symlink_to(file)  # a link to a regular file is followed
    assert read_small_text(link, 100) == "x" * 100


def test_a_folder_a_missing_file_and_bytes_that_are_not_utf8_are_one_sentence_each(
    tmp_path: Path,
) -> None:
    (tmp_path / "latin1").write_bytes("café".encode("latin-1"))
    for name, says in (("", "is a folder, not a regular file"),
                       ("missing", "cannot be read (No such file or directory)"),
                       ("latin1", "is not UTF-8 text")):  # fmt: skip
        with pytest.raises(SmallFileError) as refused:
            read_small_text(tmp_path / name, 1024)
        assert refused.value.reason == says
        assert isinstance(refused.value, OSError)  # the callers' "cannot be read"


def hostile_home(root: Path, kind: str) -> tuple[Path, Path, list[Path]]:
    """A home where every small file a store holds is hostile (``kind``), beside one model in
    each of ContextLens's folder, the HF cache and the Ollama store: (home, own, the files)."""
    home, own = root / "home", root / "own"
    write_tiny_gguf(own / "own.gguf", "Own")
    bad = [hostile(home / ".lmstudio-home-pointer", kind)]
    repo = home / ".cache" / "huggingface" / "hub" / "models--org--tiny"
    write_tiny_gguf(repo / "snapshots" / "1111" / "tiny.gguf", "HF tiny")
    bad.append(hostile(repo / "refs" / "main", kind))
    store = new_store(home / ".ollama" / "models")
    write_tiny_gguf(blob(store, MODEL_HEX), "Ollama tiny")
    hexes = {k: f"{i}{i}" * 32 for i, k in enumerate(KINDS, start=1)}
    bad += [hostile(blob(store, h), kind) for h in hexes.values()]
    manifest(store, "m", layers=hexes)
    bad.append(hostile(store / "manifests" / "registry.ollama.ai" / "library" / "n" / "latest",
                       kind))  # fmt: skip
    return home, own, bad


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_every_small_file_of_a_store_is_read_bounded_and_the_rest_is_listed(
    tmp_path: Path, kind: str
) -> None:
    home, own, bad = hostile_home(tmp_path, kind)
    found: Discovery = within(lambda: discover(own, home=home, env=Config(), platform="darwin",
                                               cards=CardCache()), bad)  # fmt: skip
    assert [(m.source, m.name) for m in found.models] == [
        (Source.CONTEXTLENS, "own.gguf"), (Source.OLLAMA, "m:latest"),
        (Source.HF_CACHE, "org/tiny/tiny.gguf")]  # fmt: skip
    details = found.models[1].ollama
    assert details is not None and (details.template, details.parameters, details.system) == (
        None, None, None)  # fmt: skip
    sentences = [p.sentence for p in found.problems]
    what = "a FIFO" if kind == "fifo" else "a device"
    for layer, hex_ in zip(("template", "parameters", "system prompt"), "123", strict=True):
        assert any(f"its {layer} blob sha256-{hex_ * 64} is {what}, not a regular file, so it is "
                   f"listed without its {layer}." in s for s in sentences), sentences  # fmt: skip
    one_line_sentences(sentences)
    pointer_read = within(lambda: lm_studio_roots(home, Config(), "linux"), bad)
    assert pointer_read == [home / ".lmstudio" / "models", home / ".cache/lm-studio/models"]


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_hostile_folder_list_is_no_folders(tmp_path: Path, kind: str) -> None:
    file = hostile(tmp_path / "config" / "model-folders.json", kind)
    assert within(lambda: model_folders.load_folders(file), [file]) == []


# ----- row 7: scans linear in what they find -----


def test_links_from_manifests_back_to_itself_are_read_once(tmp_path: Path) -> None:
    store = new_store(tmp_path / "ollama")
    manifest(store, "m")
    for i in range(15):  # 3,874 folders listed before (cubic in links)
        (store / "manifests" / f"l{i:02d}").symlink_to(".")
    listing = ollama_store.read_store(store)
    assert [m.name for m in listing.models] == ["m:latest"] and listing.problems == []
    assert len(listing.folders) == 4  # manifests, the host, the namespace, the model


def test_the_manifest_listing_stops_at_its_cap_in_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ollama_store, "MAX_ENTRIES", 10)
    store = new_store(tmp_path / "ollama")
    for i in range(25):
        (store / "manifests" / f"host{i:02d}").mkdir(parents=True)
    listing = ollama_store.read_store(store)
    assert listing.problems == [f"Stopped reading the Ollama manifests in {store / 'manifests'} "
                                "after 10 entries."]  # fmt: skip
    assert len(listing.folders) <= 11


class Counted(str):
    """A name that counts the equality tests made on it (a step counter for a scan)."""

    __slots__ = ()
    compared = 0

    def __eq__(self, other: object) -> bool:
        Counted.compared += 1
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        return str.__hash__(self)


def test_unique_paths_take_a_few_comparisons_each() -> None:
    Counted.compared = 0
    names = [Counted(f"/m/folder{i}") for i in range(4_000)] * 2
    kept = model_sources._unique(names)  # type: ignore[arg-type]  # any hashable name
    assert kept == names[:4_000]
    assert Counted.compared <= 2 * len(names)  # pairwise: about 8 million


def test_a_2000_part_split_is_one_model_grouped_linearly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = [f"big-F16-{i:05d}-of-02000.gguf" for i in range(1, 2001)]
    made: list[int] = []
    real = hub_refs.model_files  # the one that spells out every part's name
    monkeypatch.setattr(hub_refs, "model_files",
                        lambda name: made.append(1) or real(name))  # fmt: skip
    Counted.compared = 0
    listed = [Counted(n) for n in reversed(names)]
    assert choose_files(HubRef("o/r", quant="F16"), listed) == names
    assert len(made) <= 2  # every part's name spelled out once, not once per part
    assert Counted.compared <= 2 * len(names)  # "in repo_files" on a list: about 2 million
    paths = [Path("/m", n) for n in names]
    (group,) = group_files([*paths, paths[0]])  # a part named twice counts once
    assert group.parts == tuple(paths) and group.complete


def test_a_search_ends_at_its_next_entry_once_stopped(tmp_path: Path) -> None:
    """A newer search, or the window closing, stops a walk of many entries where it is (the
    window's pool thread no longer holds the process for a whole walk)."""
    home, own = tmp_path / "home", tmp_path / "own"
    own.mkdir(parents=True)
    for i in range(300):
        (own / f"model-{i:03d}.gguf").write_bytes(b"")
    asked = 0

    def stop() -> bool:
        nonlocal asked
        asked += 1
        return asked > 25

    with pytest.raises(Cancelled):
        discover(own, home=home, env=Config(), platform="linux", cards=CardCache(), stop=stop)
    assert asked == 26  # asked at each entry, and not once more after it said stop
    found = discover(own, home=home, env=Config(), platform="linux", cards=CardCache(),
                     stop=lambda: False)  # fmt: skip
    assert len(found.problems) == 300  # every (empty) file looked at when never stopped
