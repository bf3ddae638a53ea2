"""Calibration: the llama.cpp settings that run a model fastest on this machine.

The best thread count, batch and micro-batch sizes and flash-attention setting depend on the CPU
(cores, caches, SIMD), the model and the llama.cpp build, and defaults are often far off (two
threads on a busy two-core machine ran several times slower than one). A calibration loads the
model under each candidate, times a prompt evaluation and a short greedy generation, and keeps the
candidate with the best combined time. The result is cached per model (sha256) and machine, so
it is measured once: the window does it in an engine of its own after a model's first load
(the model is usable meanwhile) and offers the result; the person can see the table and override
the choice.

Pure core: the engine host is passed in, progress and cancel are plain callables.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core import config
from app.core.cancelled import Cancelled
from app.core.engine.api import LocalEngine
from app.core.engine.threads import usable_cores
from app.core.engine.types import EngineCapabilities, EngineError, LoadSettings, SamplingSettings
from app.core.paths import cache_dir

PROMPT_TOKENS = 256  # prompt evaluation timed on this many tokens
GEN_TOKENS = 32  # generation timed on this many tokens, after the prompt
# What a document job spends: mostly prompt evaluation, then replies. The score weighs both by
# the tokens of a typical call (a 2,048-token window and a 128-token reply).
PROMPT_SHARE, GEN_SHARE = 2048, 128
CACHE_VERSION = 3  # 2: micro-batch candidates; 3: the reply timed after the prompt
# (batch, micro-batch) pairs tried: a full sweep on 2 cores found 512/128 fastest, about 15%
# ahead of the best pair with both equal (tests/benchmarks/bench_calibration.py).
BATCHES = ((512, 512), (512, 128), (256, 256))
TRIAL_TEXT = "The quick brown fox jumps over the lazy dog. " * 64  # what every trial evaluates
# "0" turns automatic calibration off (the window then loads with the settings as chosen): for
# scripted runs whose timing or engine faults must not meet a calibration first.
AUTO_ENV = config.CALIBRATE_ENV
RETRIES = 2  # a trial something else ran alongside is measured again, this many times at most


@dataclass(frozen=True)
class Trial:
    """One candidate's figures."""

    settings: LoadSettings
    prompt_tokens_per_s: float
    gen_tokens_per_s: float

    @property
    def seconds_per_call(self) -> float:
        """The time a typical call would take: what the calibration minimises."""
        return PROMPT_SHARE / self.prompt_tokens_per_s + GEN_SHARE / self.gen_tokens_per_s


@dataclass(frozen=True)
class Calibration:
    model_sha256: str
    machine: str
    best: LoadSettings
    trials: tuple[Trial, ...]

    @property
    def best_trial(self) -> Trial:
        """The chosen candidate's figures."""
        fastest = min(self.trials, key=lambda t: t.seconds_per_call)
        return next((t for t in self.trials if t.settings == self.best), fastest)

    def settings_for(self, base: LoadSettings) -> LoadSettings:
        """``base`` (its context size, cache type, GPU layers) with the calibrated speed knobs."""
        b = self.best
        return dataclasses.replace(base, n_threads=b.n_threads, n_threads_batch=b.n_threads_batch,
                                   n_batch=b.n_batch, n_ubatch=b.n_ubatch,
                                   flash_attn=b.flash_attn)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "version": CACHE_VERSION,
            "model_sha256": self.model_sha256,
            "machine": self.machine,
            "best": dataclasses.asdict(self.best),
            "trials": [
                {"settings": dataclasses.asdict(t.settings),
                 "prompt_tokens_per_s": t.prompt_tokens_per_s,
                 "gen_tokens_per_s": t.gen_tokens_per_s}
                for t in self.trials
            ],
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        """What :meth:`to_json` wrote; TypeError or ValueError for anything else (the file is
        in the cache folder, which someone else may be able to write)."""
        trials = tuple(
            Trial(settings_from_json(t["settings"]), float(t["prompt_tokens_per_s"]),
                  float(t["gen_tokens_per_s"]))
            for t in data["trials"][:MAX_TRIALS]
        )  # fmt: skip
        return cls(str(data["model_sha256"]), str(data["machine"]),
                   settings_from_json(data["best"]), trials)  # fmt: skip


MAX_TRIALS = 64  # a calibration tries 18 at most (3 thread counts x 3 batches x 2)
# Where a stored setting is clamped to: what a calibration could have chosen on any machine.
_BOUNDS = {"n_threads": (1, 1024), "n_threads_batch": (1, 1024), "n_batch": (1, 8192),
           "n_ubatch": (1, 8192), "n_ctx": (16, 1 << 20), "n_gpu_layers": (-1, 4096),
           "seed": (0, 2**32 - 1)}  # fmt: skip


def settings_from_json(data: Any) -> LoadSettings:
    """Load settings from a stored calibration: only the known fields, each of its own type,
    numbers clamped to :data:`_BOUNDS` and threads to this machine's cores; TypeError or
    ValueError for anything else."""
    if not isinstance(data, dict):
        raise TypeError("stored settings are not an object")
    defaults = LoadSettings()
    known = {f.name for f in dataclasses.fields(LoadSettings)}
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name not in known:
            raise ValueError(f"unknown setting {name!r}")
        if value is None and name == "n_threads_batch":
            continue
        if name in _BOUNDS:
            if type(value) is not int:
                raise TypeError(f"{name} is not a whole number")
            low, high = _BOUNDS[name]
            if name.startswith("n_threads"):
                high = max(1, usable_cores())
            values[name] = min(max(value, low), high)
        elif type(value) is type(getattr(defaults, name)):
            values[name] = value
        else:
            raise TypeError(f"{name} is not what it should be")
    settings = LoadSettings(**values)
    settings.validate()
    return settings


def automatic() -> bool:
    """Whether a first load calibrates (and a cached calibration applies); see AUTO_ENV."""
    return config.current().calibrate


def machine_key(capabilities: EngineCapabilities | None) -> str:
    """What makes timings on this machine comparable: CPU model and count, the llama.cpp build."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            names = [ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    build = ""
    if capabilities is not None:
        build = f"{capabilities.llama_cpp_python_version} {capabilities.system_info}"
    raw = f"{platform.system()}|{cpu}|{os.cpu_count()}|{build}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def candidates(base: LoadSettings, cpu_count: int | None = None) -> list[LoadSettings]:
    """The settings worth trying around ``base``: thread counts up to the cores this process may
    use (its affinity: under ``taskset`` a thread beyond them only waits), the batch and
    micro-batch sizes of :data:`BATCHES`, flash attention off and on (only where the KV cache
    type allows both)."""
    cores = max(1, cpu_count or usable_cores())
    threads = sorted({1, max(1, cores // 2), cores})
    out = []
    for n in threads:
        for batch, ubatch in BATCHES:
            for flash in (False, True):
                if not flash and base.kv_cache_type not in ("f16", "f32", "bf16"):
                    continue  # a quantized cache needs flash attention
                out.append(dataclasses.replace(base, n_threads=n, n_threads_batch=n,
                                               n_batch=batch, n_ubatch=ubatch,
                                               flash_attn=flash))  # fmt: skip
    return out


def _cache_file(model_sha256: str, machine: str, kv_cache_type: str) -> Path:
    name = f"{model_sha256[:16]}-{machine}-{kv_cache_type}.json"
    return cache_dir() / "calibration" / name


def cached(model_sha256: str, machine: str, kv_cache_type: str = "f16") -> Calibration | None:
    """The calibration made earlier for this model, machine and KV cache type, or None (the
    cache type decides whether flash attention may be off, so it is part of the key)."""
    path = _cache_file(model_sha256, machine, kv_cache_type)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != CACHE_VERSION:
            return None
        found = Calibration.from_json(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none yet, or unreadable: calibrate again
    same = (found.model_sha256, found.machine, found.best.kv_cache_type)
    return found if same == (model_sha256, machine, kv_cache_type) else None


def _save(calibration: Calibration) -> None:
    path = _cache_file(calibration.model_sha256, calibration.machine,
                       calibration.best.kv_cache_type)  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(calibration.to_json(), indent=1), encoding="utf-8")
    tmp.replace(path)  # a half-written file never replaces a good one


def calibrate(
    host: LocalEngine,
    model: Path,
    model_sha256: str,
    base: LoadSettings,
    *,
    trials: Sequence[LoadSettings] | None = None,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    use_cache: bool = True,
    disturbed: Callable[[], bool] = lambda: False,
) -> Calibration:
    """Time each candidate (``trials``, by default :func:`candidates` of ``base``) and keep the
    fastest; cached per model, machine and KV cache type. The model is left loaded with
    ``base`` tuned by the result (:meth:`Calibration.settings_for`).

    ``progress(done, total)`` is called after each trial; ``cancelled()`` is asked before each
    (Cancelled then; it may also wait, as a calibration in the background waits while
    a job runs). ``disturbed()``, asked after each trial, says that other work ran alongside
    it: its figures are not to be trusted and it is measured again. A candidate llama.cpp
    refuses is skipped.
    """
    machine = machine_key(host.start())  # the build is part of the key: the engine must run
    if use_cache and (found := cached(model_sha256, machine, base.kv_cache_type)) is not None:
        host.load(model, found.settings_for(base))
        return found
    todo = list(trials) if trials is not None else candidates(base)
    done: list[Trial] = []
    for i, settings in enumerate(todo):
        trial = _measured(host, model, settings, cancelled, disturbed)
        if trial is not None:
            done.append(trial)
        if progress is not None:
            progress(i + 1, len(todo))
    if cancelled():  # during the last trial: its figures are not to be trusted
        raise Cancelled("calibration cancelled")
    if not done:
        raise ValueError("no candidate settings could be loaded; the model cannot be calibrated")
    best = min(done, key=lambda t: t.seconds_per_call)
    result = Calibration(model_sha256, machine, best.settings, tuple(done))
    host.load(model, result.settings_for(base))
    _save(result)
    return result


def _measured(
    host: LocalEngine,
    model: Path,
    settings: LoadSettings,
    cancelled: Callable[[], bool],
    disturbed: Callable[[], bool],
) -> Trial | None:
    """One candidate's figures, measured again while ``disturbed()`` (RETRIES times at most);
    None: this build or machine cannot run it, so it is not a choice."""
    trial = None
    for _ in range(1 + RETRIES):
        if cancelled():
            raise Cancelled("calibration cancelled")
        try:
            trial = measure(host, model, settings)
        except (EngineError, ValueError):
            return None
        if not disturbed():
            break
    return trial


def measure(host: LocalEngine, model: Path, settings: LoadSettings) -> Trial:
    """Load ``model`` with ``settings`` and time it: what each candidate goes through (the
    benchmark measures a full sweep the same way)."""
    host.load(model, settings)
    return _trial(host, settings, TRIAL_TEXT)


def _trial(host: LocalEngine, settings: LoadSettings, text: str) -> Trial:
    """The prompt's rate, then the reply's after it. A reply decodes after its document, and
    each of its tokens attends to every position before it: timed after a 16-token prompt,
    flash attention made SmolLM2's reply 1.08x faster on an AVX-512 build, after 256 positions
    0.76x and after 1,900 0.51x (the calibration then chose it, and a reply after a full
    context ran at half speed). After the prompt, the reply costs no more to time (the prompt
    is cached); the prompt leaves the reply room in a small context."""
    room = max(16, settings.n_ctx - GEN_TOKENS - 1)
    tokens = list(host.tokenize(text, add_special=False))[: min(PROMPT_TOKENS, room)]
    host.reset()
    host.evaluate(tokens[:8])  # warm-up: the first decode pays one-off costs
    host.reset()
    pp = host.evaluate(tokens)
    _, finished = host.generate_text(tokens, max_tokens=GEN_TOKENS,
                                     sampling=SamplingSettings())  # fmt: skip
    stats = finished.stats
    gen = stats.gen_tokens_per_s or 1e-9
    return Trial(settings, len(tokens) / max(pp.seconds, 1e-9), gen)
