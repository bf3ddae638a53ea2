"""Naming a GGUF on the Hugging Face Hub: parse a reference, then pick the repository's files.

A person names a model the way llama.cpp's ``-hf`` and Ollama's ``hf.co/`` do:

- ``org/repo:Q4_K_M``: a quantization tag, matched case-insensitively against the repository's
  ``.gguf`` names (a name where the tag stands as a token of its own wins over one where it is
  only part of a longer tag, so ``Q4_K`` picks ``-Q4_K.gguf`` over ``-Q4_K_M.gguf``);
- ``org/repo:path/FILE.gguf``: one file of the repository;
- ``org/repo``: its Q4_K_M, or its only model;
- a link, ``https://huggingface.co/org/repo/resolve/<rev>/<file>`` or ``.../blob/<rev>/<file>``
  (or the same on the configured endpoint).

A split GGUF (``name-00001-of-00003.gguf``) is one model: every part is fetched. Everything here
is pure (the file list is given), so each refusal is one sentence and is tested without a server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from app.core.default_model import ModelFetchError

DEFAULT_QUANT = "Q4_K_M"
HUB_HOSTS = frozenset({"huggingface.co", "www.huggingface.co", "hf.co"})
SHOWN_NAMES = 8  # a refusal lists at most this many files or quantizations
EXAMPLE = "org/repo:Q4_K_M, org/repo:FILE.gguf or a huggingface.co link"

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO = re.compile(rf"^{_NAME}/{_NAME}$")
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
# the quantization tags llama.cpp and its converters write into file names
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q[1-8](?:_[A-Za-z0-9]+)*|TQ[12]_0|MXFP4(?:_MOE)?|BF16|F16|"
    r"F32|FP16|FP32))(?![A-Za-z0-9])",
    re.IGNORECASE,
)


class HubReferenceError(ModelFetchError):
    """What the person typed names no model, or no file of the repository; one sentence."""


@dataclass(frozen=True)
class HubRef:
    """A model on the Hub: the repository, its revision (None: main), and a file or a tag."""

    repo_id: str
    revision: str | None = None
    filename: str | None = None
    quant: str | None = None

    def __str__(self) -> str:
        at = f"@{self.revision}" if self.revision else ""
        pick = self.filename or self.quant
        return f"{self.repo_id}{at}:{pick}" if pick else f"{self.repo_id}{at}"


def looks_like_hub_reference(text: str) -> bool:
    """Whether ``text`` is meant for the Hub rather than a known model's name (it has a ``/``)."""
    return "/" in text


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    more = len(names) - SHOWN_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _bad(text: str) -> HubReferenceError:
    return HubReferenceError(
        f"{text!r} does not name a model on the Hugging Face Hub; write {EXAMPLE}"
    )


def parse_reference(text: str, endpoint: str = "https://huggingface.co") -> HubRef:
    """The model ``text`` names; HubReferenceError says in one sentence what is wrong with it."""
    text = text.strip()
    if not text:
        raise HubReferenceError(f"no model given; write {EXAMPLE}")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        return _parse_link(text, endpoint)
    lowered = text.lower()
    for host in HUB_HOSTS:  # Ollama's hf.co/org/repo:TAG, or a link without its scheme
        if lowered.startswith(host + "/"):
            rest = text[len(host) + 1:]
            as_link = rest.split(":", 1)[0].count("/") > 1
            return parse_reference(f"https://{text}" if as_link else rest, endpoint)
    repo, _, pick = text.partition(":")
    if not _REPO.match(repo) or "--" in repo or ".." in repo:
        raise _bad(text)
    if not pick or pick.lower() == "latest":
        return HubRef(repo)
    if pick.lower().endswith(".gguf") or "/" in pick or "." in pick:
        if pick.startswith("/") or ".." in pick.split("/"):
            raise _bad(text)
        return HubRef(repo, filename=pick)
    if not _TAG.match(pick):
        raise _bad(text)
    return HubRef(repo, quant=pick)


def _parse_link(text: str, endpoint: str) -> HubRef:
    parts = urlsplit(text)
    base = endpoint.rstrip("/")
    if text.startswith(base + "/"):
        path = text[len(base):].split("?", 1)[0].split("#", 1)[0]
    elif parts.scheme in ("http", "https") and parts.hostname in HUB_HOSTS:
        path = parts.path
    else:
        raise HubReferenceError(
            f"{text!r} is not a Hugging Face link; give one on https://huggingface.co or on "
            f"{base}"
        )
    segments = [unquote(s) for s in path.strip("/").split("/") if s]
    if segments and segments[0] in ("datasets", "spaces"):
        raise HubReferenceError(f"{text!r} is a {segments[0][:-1]}, not a model repository")
    if len(segments) < 2 or not _REPO.match("/".join(segments[:2])):
        raise _bad(text)
    repo, rest = "/".join(segments[:2]), segments[2:]
    if not rest:
        return HubRef(repo)
    if rest[0] == "tree" and len(rest) == 2:
        return HubRef(repo, revision=rest[1])
    if rest[0] in ("resolve", "blob") and len(rest) >= 3:
        return HubRef(repo, revision=rest[1], filename="/".join(rest[2:]))
    raise HubReferenceError(
        f"{text!r} does not point at a file; copy the link of a .gguf file (…/blob/main/x.gguf)"
    )


def _split_of(name: str) -> tuple[str, int] | None:
    """(prefix, count) when ``name`` is a part of a split GGUF, else None."""
    m = _SPLIT.match(name)
    if m is None:
        return None
    count = int(m["count"])
    if count < 2 or not 1 <= int(m["no"]) <= count:
        return None
    return m["prefix"], count


def model_files(name: str) -> list[str]:
    """The files that make the model ``name`` is part of: itself, or all of its split's parts."""
    split = _split_of(name)
    if split is None:
        return [name]
    prefix, count = split
    return [f"{prefix}-{k:05d}-of-{count:05d}.gguf" for k in range(1, count + 1)]


def _first_file(name: str) -> str:
    """The first file of the model ``name`` is part of, without naming every part."""
    split = _split_of(name)
    return name if split is None else f"{split[0]}-00001-of-{split[1]:05d}.gguf"


def _is_projector(name: str) -> bool:
    """A multimodal projector (``mmproj-*.gguf``) is not a model to load on its own."""
    return "mmproj" in name.rsplit("/", 1)[-1].lower()


def _as_token(tag: str, name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(tag)}(?![A-Za-z0-9_])", name, re.I) is not None


def quantizations(names: Iterable[str]) -> list[str]:
    """The quantization tags the file names carry, in order, once each (upper case)."""
    seen: dict[str, None] = {}
    for name in names:
        for m in _QUANT.finditer(name.rsplit("/", 1)[-1]):
            seen.setdefault(m.group(1).upper(), None)
    return list(seen)


def _models(names: Iterable[str]) -> list[str]:
    """The models among ``names`` (a split's parts together), each by its first file's name,
    in order: linear in the names (a repository may list thousands of parts)."""
    return list(dict.fromkeys(_first_file(name) for name in names))


def choose_files(ref: HubRef, repo_files: Sequence[str]) -> list[str]:
    """The file(s) to fetch for ``ref`` from a repository holding ``repo_files``: one model, its
    first file first. HubReferenceError says why none fits, and what the repository has."""
    ggufs = sorted(f for f in repo_files if f.lower().endswith(".gguf"))
    repo, listed = ref.repo_id, frozenset(repo_files)
    if ref.filename is not None:
        if not ref.filename.lower().endswith(".gguf"):
            raise HubReferenceError(f"{ref.filename} is not a GGUF file (its name ends otherwise)")
        if ref.filename not in listed:
            have = f"its GGUF files are {_listed(ggufs)}" if ggufs else "it has no GGUF files"
            raise HubReferenceError(f"{repo} has no file {ref.filename}; {have}")
        return _complete(repo, model_files(ref.filename), listed)
    if not ggufs:
        raise HubReferenceError(
            f"{repo} has no GGUF files ({_listed(sorted(repo_files)) or 'it is empty'}); "
            "ContextLens runs GGUF models only"
        )
    models = [f for f in ggufs if not _is_projector(f)]
    tag = ref.quant or DEFAULT_QUANT
    hits = [f for f in models if tag.lower() in f.lower()]
    hits = [f for f in hits if _as_token(tag, f)] or hits
    groups = _models(hits)
    if len(groups) == 1:
        return _complete(repo, model_files(groups[0]), listed)
    if len(groups) > 1:
        raise HubReferenceError(
            f"several models in {repo} match {tag} ({_listed(groups)}); name one as "
            f"{repo}:FILE.gguf"
        )
    everything = _models(models)
    if ref.quant is None and len(everything) == 1:
        return _complete(repo, model_files(everything[0]), listed)
    tags = quantizations(models)
    have = (f"its quantizations are {_listed(tags)}" if tags
            else f"its GGUF files are {_listed(everything)}")  # fmt: skip
    if ref.quant is None:
        raise HubReferenceError(f"{repo} has no {DEFAULT_QUANT} file; {have}: add one as "
                                f"{repo}:TAG")  # fmt: skip
    raise HubReferenceError(f"{repo} has no {tag} file; {have}")


def _complete(repo: str, files: list[str], listed: frozenset[str]) -> list[str]:
    missing = [f for f in files if f not in listed]
    if missing:
        raise HubReferenceError(
            f"{repo} holds only {len(files) - len(missing)} of the {len(files)} parts of "
            f"{files[0]} (missing: {_listed(missing)})"
        )
    return files
