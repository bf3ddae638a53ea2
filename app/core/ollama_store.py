"""Ollama's model store read as it lies on disk: manifests name the blobs that hold each model.

A store (``OLLAMA_MODELS``, else ``~/.ollama/models``) holds ``manifests/<host>/<namespace>/
<model>/<tag>`` (JSON in the Docker manifest layout) and ``blobs/sha256-<hex>`` (files with no
extension). A manifest's ``layers`` each name a blob by ``digest`` (``sha256:<hex>``) and say what
it is by ``mediaType``: the GGUF weights (``application/vnd.ollama.image.model``), the model's Go
chat template, its parameters (JSON: stop words, temperature …) and its system prompt. Names
are shown as Ollama shows them: ``llama3.2:3b`` on its own registry's ``library``,
``namespace/model:tag`` for another namespace, ``host/namespace/model:tag`` for another host.
Nothing here runs Ollama or writes into its store.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
MODEL_TYPE = "application/vnd.ollama.image.model"
TEMPLATE_TYPE = "application/vnd.ollama.image.template"
PARAMS_TYPE = "application/vnd.ollama.image.params"
SYSTEM_TYPE = "application/vnd.ollama.image.system"
MAX_MANIFEST_BYTES = 1 << 20
MAX_TEXT_BYTES = 1 << 20  # a template, a system prompt or parameters beyond this are not kept
MAX_MANIFESTS = 5_000
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


def read_store(store: Path) -> StoreListing:
    """Every tag in ``store`` whose manifest names a GGUF blob, in name order."""
    listing = StoreListing()
    manifests = store / "manifests"
    if not manifests.is_dir():
        return listing
    for path, parts in _manifest_files(manifests, listing):
        try:
            model = _read_manifest(store, path, display_name(*parts))
        except ValueError as exc:
            listing.problems.append(f"Ollama manifest {path}: {exc}.")
            continue
        if model is not None:
            listing.models.append(model)
    listing.models.sort(key=lambda m: m.name)
    return listing


def _manifest_files(root: Path, listing: StoreListing) -> list[tuple[Path, tuple[str, ...]]]:
    """manifests/<host>/<namespace>/<model>/<tag>: four levels exactly, sorted."""
    found: list[tuple[Path, tuple[str, ...]]] = []
    level = [(root, ())]
    for depth in range(4):
        below: list[tuple[Path, tuple[str, ...]]] = []
        for folder, parts in level:
            listing.folders.append(folder)
            try:
                entries = sorted(folder.iterdir())
            except OSError:
                continue
            for entry in entries:
                if depth < 3 and entry.is_dir():
                    below.append((entry, (*parts, entry.name)))
                elif depth == 3 and entry.is_file() and len(found) < MAX_MANIFESTS:
                    found.append((entry, (*parts, entry.name)))
        level = below
    return found


def _read_manifest(store: Path, path: Path, name: str) -> OllamaModel | None:
    """The model a manifest describes; None when it has no GGUF layer (an embedding of another
    format, a blob pulled only in part is a ValueError)."""
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError("the manifest is too large to be one")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot be read ({exc})") from None
    except json.JSONDecodeError:
        raise ValueError("is not JSON") from None
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
    params_text = _text(by_type.get(PARAMS_TYPE))
    return OllamaModel(name, path, model, _text(by_type.get(TEMPLATE_TYPE)),
                       _parameters(params_text), _text(by_type.get(SYSTEM_TYPE)))  # fmt: skip


def _text(blob: Path | None) -> str | None:
    if blob is None:
        return None
    try:
        if blob.stat().st_size > MAX_TEXT_BYTES:
            return None
        return blob.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _parameters(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
