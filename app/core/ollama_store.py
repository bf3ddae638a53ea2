"""Ollama's model store read as it lies on disk: manifests name the blobs that hold each model.

A store (``OLLAMA_MODELS``, else ``~/.ollama/models``) holds ``manifests/<host>/<namespace>/
<model>/<tag>`` (JSON in the Docker manifest layout) and ``blobs/sha256-<hex>`` (files with no
extension). A manifest's ``layers`` each name a blob by ``digest`` (``sha256:<hex>``) and say what
it is by ``mediaType``: the GGUF weights (``application/vnd.ollama.image.model``), the model's Go
chat template, its parameters (JSON: stop words, temperature …) and its system prompt. Names
are shown as Ollama shows them: ``llama3.2:3b`` on its own registry's ``library``,
``namespace/model:tag`` for another namespace, ``host/namespace/model:tag`` for another host.
Nothing here runs Ollama or writes into its store.

Whoever writes the store (Ollama's service account, a shared ``OLLAMA_MODELS``, a model's
publisher for its layers) may write anything there: every file is read through
:mod:`.small_files` (regular files only, capped), every folder is listed once (a link back to a
parent is not followed around) and the listing stops after ``MAX_ENTRIES`` entries, and what
cannot be read or parsed is one sentence for that manifest, the rest of the list intact.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.model_walk import StopCheck, check_stop
from app.core.small_files import SmallFileError, read_small_text

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
MODEL_TYPE = "application/vnd.ollama.image.model"
TEMPLATE_TYPE = "application/vnd.ollama.image.template"
PARAMS_TYPE = "application/vnd.ollama.image.params"
SYSTEM_TYPE = "application/vnd.ollama.image.system"
MAX_MANIFEST_BYTES = 1 << 20
MAX_TEXT_BYTES = 1 << 20  # a template, a system prompt or parameters beyond this are not kept
MAX_MANIFESTS = 5_000
MAX_ENTRIES = 20_000  # entries looked at below manifests/ (folders and files together)
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class OllamaModel:
    """One tag of the store: its name, its GGUF blob and what the manifest says beside it."""

    name: str
    manifest: Path
    blob: Path
    template: str | None = None
    parameters: dict[str, Any] | None = None
    system: str | None = None


@dataclass
class StoreListing:
    """What a store holds, the manifests that could not be used (one sentence each), and the
    folders read (to watch for new models)."""

    models: list[OllamaModel] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)


def display_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name Ollama shows (``ollama list``) for a manifest at host/namespace/model/tag."""
    name = f"{model}:{tag}"
    if host != DEFAULT_HOST:
        return f"{host}/{namespace}/{name}"
    return name if namespace == DEFAULT_NAMESPACE else f"{namespace}/{name}"


def blob_path(store: Path, digest: str) -> Path | None:
    """The file of the blob ``sha256:<hex>``; None for a digest Ollama could not have written."""
    m = _DIGEST.match(digest) if isinstance(digest, str) else None
    return store / "blobs" / f"sha256-{m[1]}" if m else None


def read_store(store: Path, stop: StopCheck = None) -> StoreListing:
    """Every tag in ``store`` whose manifest names a GGUF blob, in name order; Cancelled
    as soon as ``stop`` says so."""
    listing = StoreListing()
    manifests = store / "manifests"
    if not manifests.is_dir():
        return listing
    for path, parts in _manifest_files(manifests, listing, stop):
        check_stop(stop)
        notes: list[str] = []
        try:
            model = _read_manifest(store, path, display_name(*parts), notes)
        except ValueError as exc:
            notes.append(str(exc))
            model = None
        except OSError as exc:  # a blob's folder that cannot be looked in
            notes.append(f"cannot be read ({exc.strerror or exc})")
            model = None
        listing.problems += [f"Ollama manifest {path}: {note}." for note in notes]
        if model is not None:
            listing.models.append(model)
    listing.models.sort(key=lambda m: m.name)
    return listing


@dataclass
class _Budget:
    """The entries a listing may still look at, and the folders it has read (by identity)."""

    entries: int
    seen: set[tuple[int, int]] = field(default_factory=set)

    def first_visit(self, folder: Path) -> bool:
        """False for a folder read already (a loop, a second link to it) or one not there."""
        try:
            st = folder.stat()
        except OSError:
            return False
        key = (st.st_dev, st.st_ino)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def list(self, folder: Path) -> list[Path] | None:
        """The folder's entries, sorted (none when it cannot be read); None when they would
        pass the budget (never more than the budget's worth is read)."""
        try:
            with os.scandir(folder) as it:  # lazy, unlike iterdir (a whole listdir first)
                names = [e.name for e in itertools.islice(it, self.entries + 1)]
        except OSError:
            return []
        entries = [folder / name for name in sorted(names)]
        if len(entries) > self.entries:
            return None
        self.entries -= len(entries)
        return entries


def _manifest_files(root: Path, listing: StoreListing,
                    stop: StopCheck = None) -> list[tuple[Path, tuple[str, ...]]]:  # fmt: skip
    """manifests/<host>/<namespace>/<model>/<tag>: four levels exactly, sorted; each folder
    read once, ``MAX_ENTRIES`` entries looked at in all."""
    found: list[tuple[Path, tuple[str, ...]]] = []
    budget = _Budget(MAX_ENTRIES)
    level: list[tuple[Path, tuple[str, ...]]] = [(root, ())]
    for depth in range(4):
        below: list[tuple[Path, tuple[str, ...]]] = []
        for folder, parts in level:
            check_stop(stop)
            if not budget.first_visit(folder):
                continue
            listing.folders.append(folder)
            entries = budget.list(folder)
            if entries is None:
                listing.problems.append(
                    f"Stopped reading the Ollama manifests in {root} after "
                    f"{MAX_ENTRIES:,} entries.")  # fmt: skip
                return found
            for entry in entries:
                if depth < 3 and entry.is_dir():
                    below.append((entry, (*parts, entry.name)))
                elif depth == 3 and entry.is_file() and len(found) < MAX_MANIFESTS:
                    found.append((entry, (*parts, entry.name)))
        level = below
    return found


def _read_manifest(store: Path, path: Path, name: str, notes: list[str]) -> OllamaModel | None:
    """The model a manifest describes; None when it has no GGUF layer (an embedding of another
    format). A manifest that cannot be used is a ValueError; a layer beside the weights that
    cannot be read is left out, with a sentence in ``notes``."""
    try:
        text = read_small_text(path, MAX_MANIFEST_BYTES)
    except SmallFileError as exc:
        raise ValueError(exc.reason) from None
    data = _json(text)
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise ValueError("has no list of layers")
    by_type: dict[str, Path] = {}
    for layer in layers:
        if not isinstance(layer, dict):
            continue
        media, digest = layer.get("mediaType"), layer.get("digest")
        blob = blob_path(store, digest) if isinstance(digest, str) else None
        if isinstance(media, str) and blob is not None:
            by_type.setdefault(media.split(";")[0].strip(), blob)
    model = by_type.get(MODEL_TYPE)
    if model is None:
        return None
    if not model.is_file():
        raise ValueError(f"its model blob {model.name} is missing")
    template = _text(by_type.get(TEMPLATE_TYPE), "template", notes)
    params = _parameters(_text(by_type.get(PARAMS_TYPE), "parameters", notes), notes)
    system = _text(by_type.get(SYSTEM_TYPE), "system prompt", notes)
    return OllamaModel(name, path, model, template, params, system)


def _json(text: str) -> Any:
    """The JSON value of ``text``; ValueError when it is not JSON or is nested so deeply that
    the parser runs out of stack (200 kB of ``[`` raise RecursionError, under the size cap)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("is JSON nested too deeply to read") from None
    except ValueError:
        raise ValueError("is not JSON") from None


def _text(blob: Path | None, what: str, notes: list[str]) -> str | None:
    """A layer's text; None, with a sentence in ``notes``, when it cannot be read."""
    if blob is None:
        return None
    try:
        return read_small_text(blob, MAX_TEXT_BYTES)
    except SmallFileError as exc:
        notes.append(f"its {what} blob {blob.name} {exc.reason}, so it is listed without "
                     f"its {what}")  # fmt: skip
        return None


def _parameters(text: str | None, notes: list[str]) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = _json(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        notes.append("its parameters are not a JSON object, so it is listed without them")
        return None
    return value
