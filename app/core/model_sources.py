"""The GGUF models a person already has, wherever their other tools put them.

People keep models where LM Studio, Ollama, the Hugging Face cache, llama.cpp, GPT4All or Jan
downloaded them; copying gigabytes into ContextLens's own folder to use them would be absurd.
:func:`discover` finds them in place (it never copies, moves or writes anything there):

- ContextLens: its models folder (:func:`app.core.paths.models_dir`), the files in it.
- LM Studio: ``models/<publisher>/<repo>/<file>.gguf`` in the home ``~/.lmstudio-home-pointer``
  names, ``~/.lmstudio`` and ``~/.cache/lm-studio`` (the same under the Windows user profile).
- Ollama: ``OLLAMA_MODELS``, else ``~/.ollama/models`` (Linux services:
  ``/usr/share/ollama/.ollama/models``): manifests that name blobs (:mod:`.ollama_store`).
- Hugging Face cache: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
  ``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache``): ``models--<org>--<name>/snapshots/…``.
- llama.cpp cache: ``LLAMA_CACHE``, else ``$XDG_CACHE_HOME/llama.cpp`` (``~/.cache``) on Linux,
  ``~/Library/Caches/llama.cpp`` on macOS, ``%LOCALAPPDATA%\\llama.cpp`` on Windows.
- GPT4All: ``$XDG_DATA_HOME/nomic.ai/GPT4All`` (``~/.local/share``),
  ``~/Library/Application Support/nomic.ai/GPT4All``, ``%LOCALAPPDATA%\\nomic.ai\\GPT4All``.
- Jan: ``llamacpp/models/<id>/model.gguf`` in its data folder (``~/.local/share/Jan/data``,
  ``~/Library/Application Support/Jan/data``, ``%APPDATA%\\Jan\\data``); before 0.6
  ``~/jan/models``.
- Added folders: those the person added (:mod:`app.core.model_folders`) and ``--folder``.

Every root function takes the home folder, the environment (a :class:`~app.core.config.Config`,
the one reader of variables) and the platform (``sys.platform``), each defaulting to the real
one, so a test can lay out any machine in a temporary folder. Each model is listed once: the
same real file reached twice (a link, a blob in two snapshots, a hard link) goes to the first
source in the order above, and its other names are kept. A split GGUF is one model. A file
that is not a GGUF model llama.cpp could read is a :class:`Problem` (one sentence), never a
crash; adapters, vision projectors and vocabulary-only files are not models and are left out.
"""

from __future__ import annotations

import enum
import functools
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.core import config, paths
from app.core.config import Config
from app.core.engine.gguf import GGUFError
from app.core.gguf_splits import Group, group_files
from app.core.model_cards import Card, CardCache
from app.core.model_walk import StopCheck, check_stop, find_gguf
from app.core.ollama_store import OllamaModel, read_store
from app.core.small_files import read_small_text

OLLAMA_SERVICE_STORE = Path("/usr/share/ollama/.ollama/models")  # Linux installs' service user
MAX_WATCHED = 256  # folders handed to a file watcher at most
MAX_POINTER_BYTES = 4096  # a path (LM Studio's pointer) or a revision (refs/main), no more
_CARDS_FOLDER = "model-cards"


class Source(enum.StrEnum):
    """Where a model was found; the order is the order of precedence."""

    CONTEXTLENS = "ContextLens"
    LM_STUDIO = "LM Studio"
    OLLAMA = "Ollama"
    HF_CACHE = "Hugging Face cache"
    LLAMA_CPP_CACHE = "llama.cpp cache"
    GPT4ALL = "GPT4All"
    JAN = "Jan"
    ADDED = "Added folder"


@dataclass(frozen=True)
class Place:
    """A folder looked in for one source, and how many folders deep its models lie at most."""

    source: Source
    folder: Path
    depth: int = 0


@dataclass(frozen=True)
class OllamaDetails:
    """What an Ollama manifest says beside the weights: the chat template (Go template
    syntax), the parameters (stop words, temperature …), the system prompt."""

    manifest: Path
    template: str | None = None
    parameters: dict[str, Any] | None = None
    system: str | None = None


@dataclass(frozen=True)
class FoundModel:
    """One model found: where, under which name, and what its GGUF header says."""

    source: Source
    name: str
    path: Path  # the file llama.cpp opens (a split's first part; an Ollama blob, no extension)
    family: str  # general.architecture
    parameters: int  # summed over a split's parts present
    quantization: str
    file_size: int  # bytes, summed over a split's parts present
    n_ctx_train: int | None
    parts: int = 1  # the files the model is made of
    parts_present: int = 1
    folder: Path | None = None  # the place it was found in (an Ollama store, an added folder)
    gguf_name: str | None = None  # general.name
    also_named: tuple[str, ...] = ()  # the same file under other names (another tag, a link)
    ollama: OllamaDetails | None = None

    @property
    def loadable(self) -> bool:
        """False for a split with parts missing: llama.cpp would refuse it."""
        return self.parts_present == self.parts

    @property
    def note(self) -> str:
        """"2 of 3 parts present", or ""."""
        return "" if self.loadable else f"{self.parts_present} of {self.parts} parts present"

    def as_json(self) -> dict[str, Any]:
        """The object ``contextlens-cli models --json`` prints for this model."""
        details = self.ollama
        return {
            "source": str(self.source),
            "name": self.name,
            "path": str(self.path),
            "family": self.family,
            "parameters": self.parameters,
            "quantization": self.quantization,
            "file_size": self.file_size,
            "n_ctx_train": self.n_ctx_train,
            "parts": self.parts,
            "parts_present": self.parts_present,
            "loadable": self.loadable,
            "note": self.note,
            "found_in": str(self.folder) if self.folder is not None else None,
            "gguf_name": self.gguf_name,
            "also_named": list(self.also_named),
            "ollama_template": details.template if details else None,
            "ollama_parameters": details.parameters if details else None,
            "ollama_system": details.system if details else None,
        }


@dataclass(frozen=True)
class Problem:
    """A file or manifest that was skipped, and why, in one sentence."""

    source: Source
    path: Path
    sentence: str


@dataclass(frozen=True)
class Discovery:
    """The models found, the problems met, the places looked in and the folders read."""

    models: tuple[FoundModel, ...] = ()
    problems: tuple[Problem, ...] = ()
    places: tuple[Place, ...] = ()
    folders: tuple[Path, ...] = ()

    def by_source(self) -> dict[Source, list[FoundModel]]:
        """The models of each source that has any, in the sources' order."""
        groups: dict[Source, list[FoundModel]] = {}
        for model in self.models:
            groups.setdefault(model.source, []).append(model)
        return {s: groups[s] for s in Source if s in groups}


# ----- where each program keeps its models -----


def _where(home: Path | None, env: Config | None, platform: str | None) -> tuple[Path, Config, str]:
    return (home if home is not None else Path.home(),
            env if env is not None else config.current(),
            platform or sys.platform)  # fmt: skip


def _cache_home(home: Path, env: Config) -> Path:
    return env.xdg_cache_home or home / ".cache"


def _data_home(home: Path, env: Config) -> Path:
    return env.xdg_data_home or home / ".local" / "share"


def _local_app_data(home: Path, env: Config) -> Path:
    return env.local_app_data or home / "AppData" / "Local"


def _app_data(home: Path, env: Config) -> Path:
    return env.app_data or home / "AppData" / "Roaming"


def _app_support(home: Path) -> Path:
    return home / "Library" / "Application Support"


def lm_studio_roots(home: Path | None = None, env: Config | None = None,
                    platform: str | None = None) -> list[Path]:  # fmt: skip
    """LM Studio's models folders: the home its pointer file names, then the two defaults (the
    same under the user profile on Windows)."""
    home, env, platform = _where(home, env, platform)
    roots: list[Path] = []
    try:
        pointed = read_small_text(home / ".lmstudio-home-pointer", MAX_POINTER_BYTES).strip()
    except OSError:
        pointed = ""
    if pointed:
        roots.append(Path(pointed).expanduser() / "models")
    roots += [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    return _unique(roots)


def ollama_roots(home: Path | None = None, env: Config | None = None,
                 platform: str | None = None) -> list[Path]:  # fmt: skip
    """Ollama's store: ``OLLAMA_MODELS`` alone when set (Ollama reads only that one), else the
    user's store, and on Linux the system service's."""
    home, env, platform = _where(home, env, platform)
    if env.ollama_models is not None:
        return [env.ollama_models]
    roots = [home / ".ollama" / "models"]
    if platform.startswith("linux"):
        roots.append(OLLAMA_SERVICE_STORE)
    return roots


def hf_cache_roots(home: Path | None = None, env: Config | None = None,
                   platform: str | None = None) -> list[Path]:  # fmt: skip
    """The Hugging Face hub cache, found as ``huggingface_hub`` finds it (on every platform)."""
    home, env, platform = _where(home, env, platform)
    if env.hf_hub_cache is not None:
        return [env.hf_hub_cache]
    hf_home = env.hf_home or _cache_home(home, env) / "huggingface"
    return [hf_home / "hub"]


def llama_cpp_cache_roots(home: Path | None = None, env: Config | None = None,
                          platform: str | None = None) -> list[Path]:  # fmt: skip
    """llama.cpp's download cache (``-hf``, ``-mu``), as ``fs_get_cache_directory`` finds it."""
    home, env, platform = _where(home, env, platform)
    if env.llama_cache is not None:
        return [env.llama_cache]
    if platform == "darwin":
        return [home / "Library" / "Caches" / "llama.cpp"]
    if platform == "win32":
        return [_local_app_data(home, env) / "llama.cpp"]
    return [_cache_home(home, env) / "llama.cpp"]


def gpt4all_roots(home: Path | None = None, env: Config | None = None,
                  platform: str | None = None) -> list[Path]:  # fmt: skip
    """GPT4All's default download folder on each platform."""
    home, env, platform = _where(home, env, platform)
    if platform == "darwin":
        return [_app_support(home) / "nomic.ai" / "GPT4All"]
    if platform == "win32":
        return [_local_app_data(home, env) / "nomic.ai" / "GPT4All"]
    return [_data_home(home, env) / "nomic.ai" / "GPT4All"]


def jan_roots(home: Path | None = None, env: Config | None = None,
              platform: str | None = None) -> list[Path]:  # fmt: skip
    """Jan's model folders: its data folder's ``llamacpp/models`` (Jan 0.6 on) and ``models``,
    and ``~/jan/models`` where releases before 0.6 kept them."""
    home, env, platform = _where(home, env, platform)
    if platform == "darwin":
        data = _app_support(home) / "Jan" / "data"
    elif platform == "win32":
        data = _app_data(home, env) / "Jan" / "data"
    else:
        data = _data_home(home, env) / "Jan" / "data"
    return [data / "llamacpp" / "models", data / "models", home / "jan" / "models"]


# how many folders deep each source's models lie (LM Studio: publisher/repo/file)
_DEPTHS = {Source.CONTEXTLENS: 0, Source.LM_STUDIO: 3, Source.LLAMA_CPP_CACHE: 2,
           Source.GPT4ALL: 1, Source.JAN: 4, Source.ADDED: 3}  # fmt: skip


def places(own_folder: Path | None = None, added: Sequence[Path] = (), *,
           home: Path | None = None, env: Config | None = None,
           platform: str | None = None) -> list[Place]:  # fmt: skip
    """Every folder looked in, in the sources' order of precedence."""
    where = _where(home, env, platform)
    found = [Place(Source.CONTEXTLENS, own_folder or paths.models_dir(), 0)]
    roots = [(Source.LM_STUDIO, lm_studio_roots(*where)), (Source.OLLAMA, ollama_roots(*where)),
             (Source.HF_CACHE, hf_cache_roots(*where)),
             (Source.LLAMA_CPP_CACHE, llama_cpp_cache_roots(*where)),
             (Source.GPT4ALL, gpt4all_roots(*where)), (Source.JAN, jan_roots(*where)),
             (Source.ADDED, [Path(p).expanduser().absolute() for p in added])]  # fmt: skip
    for source, folders in roots:
        found += [Place(source, folder, _DEPTHS.get(source, 0)) for folder in _unique(folders)]
    return found


def _unique(folders: Iterable[Path]) -> list[Path]:
    """Each path once, in the order first given; linear (a walk hands up to 20k folders)."""
    return list(dict.fromkeys(folders))


# ----- what lies in each place -----


@dataclass
class _Candidate:
    source: Source
    name: str
    group: Group
    folder: Path
    ollama: OllamaModel | None = None


@dataclass
class _Found:
    candidates: list[_Candidate] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)


def _relative_name(root: Path, path: Path, source: Source) -> str:
    rel = path.relative_to(root).as_posix()
    if source is Source.JAN and path.name.lower() == "model.gguf" and "/" in rel:
        return rel.rsplit("/", 1)[0]  # Jan names a model by its folder: <org>/<repo>/model.gguf
    return rel


def _walk_place(place: Place, found: _Found, stop: StopCheck) -> None:
    walk = find_gguf(place.folder, place.depth, stop=stop)
    found.folders += walk.folders
    found.problems += [Problem(place.source, place.folder, s) for s in walk.problems]
    for _folder, files in walk.files:
        for group in group_files(files):
            name = _relative_name(place.folder, group.first, place.source)
            found.candidates.append(_Candidate(place.source, name, group, place.folder))


def _hf_repo_name(folder: Path) -> str:
    return folder.name.removeprefix("models--").replace("--", "/")


def _hf_snapshots(repo: Path) -> list[Path]:
    """The repo's snapshots, the one ``refs/main`` names first (its files win over older ones)."""
    snapshots = repo / "snapshots"
    try:
        revisions = sorted(p for p in snapshots.iterdir() if p.is_dir())
    except OSError:
        return []
    try:
        main = read_small_text(repo / "refs" / "main", MAX_POINTER_BYTES).strip()
    except OSError:
        main = ""
    return sorted(revisions, key=lambda p: p.name != main)


def _walk_hf_cache(place: Place, found: _Found, stop: StopCheck) -> None:
    try:
        repos = sorted(p for p in place.folder.iterdir() if p.name.startswith("models--"))
    except OSError:
        return
    found.folders.append(place.folder)
    for repo in repos:
        found.folders.append(repo / "snapshots")  # where a new revision lands
        for snapshot in _hf_snapshots(repo):
            walk = find_gguf(snapshot, 3, stop=stop)
            found.folders += walk.folders
            for _folder, files in walk.files:
                for group in group_files(files):
                    rel = group.first.relative_to(snapshot).as_posix()
                    name = f"{_hf_repo_name(repo)}/{rel}"
                    found.candidates.append(_Candidate(Source.HF_CACHE, name, group,
                                                       place.folder))  # fmt: skip


def _walk_ollama(place: Place, found: _Found, stop: StopCheck) -> None:
    listing = read_store(place.folder, stop)
    found.folders += listing.folders
    found.problems += [Problem(Source.OLLAMA, place.folder, s) for s in listing.problems]
    for model in listing.models:
        found.candidates.append(_Candidate(Source.OLLAMA, model.name, Group((model.blob,), 1),
                                           place.folder, model))  # fmt: skip


def _look(place_list: Sequence[Place], stop: StopCheck) -> _Found:
    found = _Found()
    for place in place_list:
        check_stop(stop)
        if not place.folder.is_dir():
            continue
        if place.source is Source.OLLAMA:
            _walk_ollama(place, found, stop)
        elif place.source is Source.HF_CACHE:
            _walk_hf_cache(place, found, stop)
        else:
            _walk_place(place, found, stop)
    return found


# ----- reading what was found -----


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


def _model(candidate: _Candidate, cards: CardCache) -> FoundModel | Problem | None:
    """The model a candidate is; a Problem when a file is not a readable GGUF; None when it is
    a GGUF that is not a model (an adapter, a projector, a vocabulary)."""
    group = candidate.group
    try:
        parts: list[Card] = [cards.card(p) for p in group.parts]
    except GGUFError as exc:
        return Problem(candidate.source, group.first,
                       _sentence(f"Skipped {group.first}: {exc}"))  # fmt: skip
    first = parts[0]
    if first.kind != "model":
        return None
    count = max(group.count, first.split_count)
    details = None
    if candidate.ollama is not None:
        o = candidate.ollama
        details = OllamaDetails(o.manifest, o.template, o.parameters, o.system)
    return FoundModel(
        source=candidate.source,
        name=candidate.name,
        path=group.first,
        family=first.family,
        parameters=sum(c.parameters for c in parts),
        quantization=first.quantization,
        file_size=sum(c.file_size for c in parts),
        n_ctx_train=first.n_ctx_train,
        parts=count,
        parts_present=len(parts),
        folder=candidate.folder,
        gguf_name=first.name,
        ollama=details,
    )


@functools.cache
def _cards_in(folder: Path) -> CardCache:
    return CardCache(folder)


def default_cards() -> CardCache:
    """This process's cards for the cache folder in effect, kept on disk between processes."""
    return _cards_in(paths.cache_dir() / _CARDS_FOLDER)


def discover(own_folder: Path | None = None, added: Sequence[Path] = (), *,
             home: Path | None = None, env: Config | None = None, platform: str | None = None,
             cards: CardCache | None = None, stop: StopCheck = None) -> Discovery:  # fmt: skip
    """Every GGUF model in the places of :func:`places`, each real file once. ``stop`` ends
    the scan with Cancelled as soon as it says so (it is asked for each entry)."""
    looked = places(own_folder, added, home=home, env=env, platform=platform)
    found = _look(looked, stop)
    cards = cards or default_cards()
    models: list[FoundModel] = []
    problems = list(found.problems)
    owner: dict[tuple[int, int], int | None] = {}  # a real file -> its model's index, if any
    for candidate in found.candidates:
        check_stop(stop)
        identity = _identity(candidate.group.first)
        if identity is not None and identity in owner:
            i = owner[identity]
            if i is not None and candidate.name not in (models[i].name, *models[i].also_named):
                also = (*models[i].also_named, candidate.name)
                models[i] = replace(models[i], also_named=also)
            continue
        result = _model(candidate, cards)
        if isinstance(result, Problem):
            problems.append(result)
        elif result is not None:
            models.append(result)
        if identity is not None:
            owner[identity] = len(models) - 1 if isinstance(result, FoundModel) else None
    return Discovery(tuple(models), tuple(problems), tuple(looked), tuple(_unique(found.folders)))


def watch_folders(discovery: Discovery, limit: int = MAX_WATCHED,
                  stop: StopCheck = None) -> list[Path]:  # fmt: skip
    """The folders a file watcher should watch to see a new model appear: each place that
    exists, then the folders read below them (shallowest first), ``limit`` at most."""
    chosen = _unique(p.folder for p in discovery.places if p.folder.is_dir())[:limit]
    known = set(chosen)
    below = sorted(_unique(f for f in discovery.folders if f not in known),
                   key=lambda f: len(f.parts))  # fmt: skip
    for folder in below:  # looked at (a stat each) only until the limit is reached
        check_stop(stop)
        if len(chosen) >= limit:
            break
        if folder.is_dir():
            chosen.append(folder)
    return chosen
