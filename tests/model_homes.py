"""A home folder laid out as a person's who uses other model tools: real layouts, real files.

The tests of model discovery (core, CLI, window) build one of these in a temporary folder: LM
Studio's ``publisher/repo/file.gguf``, an Ollama store (a manifest naming a blob named by the
sha256 of its bytes, with template and parameters layers), a Hugging Face cache (two snapshots
linking one blob), llama.cpp's cache, a split GGUF (whole, and with a part missing), a file that
is not a GGUF, a link back to a parent folder (a loop) and a second link to a model listed
already. The large test models are hard-linked (copied only where linking fails); the small
ones are written with the ``gguf`` package, as llama.cpp's ``gguf-split`` lays out splits.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

TEMPLATE = "{{ .System }}<|user|>{{ .Prompt }}<|assistant|>"
PARAMS = {"stop": ["<|user|>"], "temperature": 0.3}
TINY_PARAMS = 4 * 8  # elements in a tiny model's one tensor


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def link_or_copy(source: Path, target: Path) -> Path:
    """``target`` as a hard link to ``source`` (the same bytes, no copy), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return target


def write_tiny_gguf(path: Path, name: str, *, split: tuple[int, int] | None = None,
                    n_ctx: int = 2048) -> Path:  # fmt: skip
    """A small valid GGUF (one 4×8 f32 tensor); ``split=(no, count)`` (no from 0) writes a
    part as gguf-split does: the first part with the model's metadata, each with split.*."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), "llama")
    if split is None or split[0] == 0:
        writer.add_name(name)
        writer.add_context_length(n_ctx)
        writer.add_block_count(1)
        writer.add_file_type(0)  # all f32
    if split is not None:
        writer.add_uint16("split.no", split[0])
        writer.add_uint16("split.count", split[1])
        writer.add_int32("split.tensors.count", split[1])
    writer.add_tensor(f"blk.{split[0] if split else 0}.weight", np.ones((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@dataclass
class Home:
    """Where each thing was put, for the assertions."""

    home: Path
    own: Path  # ContextLens's models folder (empty but for one bad file)
    lm_studio_file: Path
    ollama_store: Path
    ollama_blob: Path
    hf_cache: Path
    hf_blob: Path
    llama_cache_file: Path
    added: Path  # a folder the person adds
    split_first: Path  # a whole split in the added folder
    broken_split_first: Path  # a split with its second part missing
    bad_file: Path  # not a GGUF


def ollama_store(store: Path, blob_source: Path, blob_sha: str, name: tuple[str, ...]) -> Path:
    """An Ollama store holding ``blob_source`` as one model, at manifests/<name parts>."""
    blobs = store / "blobs"
    blob = link_or_copy(blob_source, blobs / f"sha256-{blob_sha}")
    layers = [{"mediaType": "application/vnd.ollama.image.model",
               "digest": f"sha256:{blob_sha}", "size": blob.stat().st_size}]  # fmt: skip
    for media, text in (("template", TEMPLATE), ("params", json.dumps(PARAMS))):
        data = text.encode()
        sha = hashlib.sha256(data).hexdigest()
        (blobs / f"sha256-{sha}").write_bytes(data)
        layers.append({"mediaType": f"application/vnd.ollama.image.{media}",
                       "digest": f"sha256:{sha}", "size": len(data)})  # fmt: skip
    manifest = store / "manifests" / Path(*name)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    config = {"mediaType": "application/vnd.docker.container.image.v1+json",
              "digest": "sha256:" + "0" * 64, "size": 2}  # fmt: skip
    manifest.write_text(json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": config, "layers": layers}))  # fmt: skip
    return blob


def build_home(root: Path, smol: Path, gemma: Path, gemma_sha: str) -> Home:
    """Lay the home out under ``root``; ``gemma_sha`` is the sha256 of ``gemma``'s bytes."""
    home = root / "home"
    own = root / "own-models"
    own.mkdir(parents=True)
    bad = own / "not-a-model.gguf"
    bad.write_bytes(b"this is text, not a GGUF header" * 4)

    lm = link_or_copy(smol, home / ".lmstudio" / "models" / "bartowski" / "SmolLM2-GGUF"
                      / "SmolLM2-135M-Instruct-Q4_1.gguf")  # fmt: skip

    store = home / ".ollama" / "models"
    blob = ollama_store(store, gemma, gemma_sha, ("registry.ollama.ai", "library", "gemma3",
                                                  "270m"))  # fmt: skip

    hub = home / ".cache" / "huggingface" / "hub"
    repo = hub / "models--tiny-org--Tiny-GGUF"
    hf_blob = write_tiny_gguf(repo / "blobs" / ("a" * 64), "Tiny HF")
    for rev in ("1111", "2222"):
        snap = repo / "snapshots" / rev
        snap.mkdir(parents=True)
        (snap / "tiny-f32.gguf").symlink_to(Path("..", "..", "blobs", "a" * 64))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("2222")

    llama_cache = write_tiny_gguf(home / ".cache" / "llama.cpp" / "tiny-org_Tiny_cache.gguf",
                                  "Tiny cached", n_ctx=4096)  # fmt: skip

    added = root / "added"
    parts = [write_tiny_gguf(added / f"big-{i:05d}-of-00003.gguf", "Big split",
                             split=(i - 1, 3)) for i in (1, 2, 3)]  # fmt: skip
    broken = [write_tiny_gguf(added / "half" / f"half-{i:05d}-of-00003.gguf", "Half split",
                              split=(i - 1, 3)) for i in (1, 3)]  # fmt: skip
    (added / "loop").symlink_to(added, target_is_directory=True)
    (added / "same-as-lm-studio.gguf").symlink_to(lm)
    return Home(home, own, lm, store, blob, hub, hf_blob, llama_cache, added, parts[0],
                broken[0], bad)  # fmt: skip


def live_in(home: Home, monkeypatch: pytest.MonkeyPatch) -> Home:
    """Make ``home`` this test's home, as the discovery reads it (its Ollama store too)."""
    monkeypatch.setenv("HOME", str(home.home))
    monkeypatch.setenv("OLLAMA_MODELS", str(home.ollama_store))
    return home
