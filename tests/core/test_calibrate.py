"""Calibration on the real default model: it keeps the fastest candidate, caches the choice per
model and machine, reports progress, can be cancelled, and skips settings llama.cpp refuses."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.core import calibrate as calibrate_module
from app.core.calibrate import (
    AUTO_ENV,
    BATCHES,
    CACHE_VERSION,
    GEN_TOKENS,
    PROMPT_TOKENS,
    RETRIES,
    automatic,
    cached,
    calibrate,
    candidates,
    machine_key,
)
from app.core.cancelled import Cancelled
from app.core.default_model import sha256_of
from app.core.engine import threads
from app.core.engine.host import EngineHost
from app.core.engine.types import EngineCapabilities, LoadSettings

BASE = LoadSettings(n_ctx=512)


@pytest.fixture
def fresh_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[EngineHost]:
    """A new engine child, nothing loaded, and an empty calibration cache of this test's own."""
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    with EngineHost() as h:
        yield h


@pytest.fixture(scope="module")
def sha(model_path: Path) -> str:
    return sha256_of(model_path)


@pytest.mark.unit
def test_candidates_cover_threads_batches_and_flash_attention() -> None:
    tried = candidates(BASE, cpu_count=8)
    assert {s.n_threads for s in tried} == {1, 4, 8}
    assert {(s.n_batch, s.n_ubatch) for s in tried} == set(BATCHES)
    assert {s.flash_attn for s in tried} == {False, True}
    assert len(tried) == 3 * len(BATCHES) * 2
    assert all(s.n_threads_batch == s.n_threads for s in tried)
    assert all(s.n_ctx == 512 for s in tried)
    quantized = candidates(LoadSettings(kv_cache_type="q8_0", flash_attn=True), cpu_count=2)
    assert quantized and all(s.flash_attn for s in quantized)  # llama.cpp needs it for q8_0


@pytest.mark.unit
def test_candidates_stay_within_the_cpus_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``taskset -c 0`` (or a test worker pinned to one core) a second thread only waits
    for the first: no candidate tries it."""
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    assert {s.n_threads for s in candidates(BASE)} == {1}
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    assert {s.n_threads for s in candidates(BASE)} == {1, 2, 4}


def test_calibration_keeps_the_fastest_and_caches_it(
    fresh_host: EngineHost, model_path: Path, sha: str
) -> None:
    trials = [
        LoadSettings(n_ctx=512, n_threads=1, n_threads_batch=1),
        LoadSettings(n_ctx=512, n_threads=1, n_threads_batch=1, n_batch=64, n_ubatch=64),
        LoadSettings(n_ctx=512, kv_cache_type="q8_0"),
    ]  # refused: needs flash attention
    seen: list[tuple[int, int]] = []
    result = calibrate(fresh_host, model_path, sha, BASE, trials=trials,
                       progress=lambda done, total: seen.append((done, total)))  # fmt: skip
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert len(result.trials) == 2  # the refused candidate is not a choice
    assert all(t.prompt_tokens_per_s > 0 and t.gen_tokens_per_s > 0 for t in result.trials)
    assert result.best == min(result.trials, key=lambda t: t.seconds_per_call).settings
    assert fresh_host.model is not None and fresh_host.model.n_threads == result.best.n_threads
    assert result.machine == machine_key(fresh_host.capabilities)
    assert cached(sha, result.machine) == result

    class Counting:  # the real host, counting what a cached calibration still evaluates
        def __init__(self) -> None:
            self.evaluated = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(fresh_host, name)

        def evaluate(self, tokens: Sequence[int]) -> Any:
            self.evaluated += 1
            return fresh_host.evaluate(tokens)

    counting = Counting()
    bigger = LoadSettings(n_ctx=1024)  # the context size is the caller's; the speed knobs cached
    again = calibrate(counting, model_path, sha, bigger, trials=trials)  # type: ignore[arg-type]
    assert again == result and counting.evaluated == 0
    assert fresh_host.model.n_ctx == 1024 and fresh_host.model.n_threads == result.best.n_threads
    assert cached(sha, result.machine, "q8_0") is None  # another cache type: calibrate again


def test_a_damaged_cache_is_ignored_and_a_cancel_stops_before_any_trial(
    fresh_host: EngineHost, model_path: Path, sha: str, tmp_path: Path
) -> None:
    fresh_host.load(model_path, BASE)
    machine = machine_key(fresh_host.capabilities)
    folder = tmp_path / "cache" / "calibration"
    folder.mkdir(parents=True)
    (folder / f"{sha[:16]}-{machine}-f16.json").write_text("{not json", encoding="utf-8")
    assert cached(sha, machine) is None
    (folder / f"{sha[:16]}-{machine}-f16.json").write_text(json.dumps({"version": 0}), "utf-8")
    assert cached(sha, machine) is None
    with pytest.raises(Cancelled):
        calibrate(fresh_host, model_path, sha, BASE, cancelled=lambda: True)
    with pytest.raises(ValueError, match="no candidate settings could be loaded"):
        calibrate(fresh_host, model_path, sha, BASE, trials=[LoadSettings(kv_cache_type="q4_0")])


class _Fake:
    """An engine that answers at once: for the calibration's own logic, not for timings."""

    def __init__(self, on_evaluate: Any = None) -> None:
        self.capabilities = EngineCapabilities("test", "", False, 1)
        self.loaded: list[LoadSettings] = []
        self._on_evaluate = on_evaluate
        self.calls: list[tuple[str, int]] = []  # ("reset"|"evaluate"|"generate", tokens)

    def start(self) -> EngineCapabilities:
        return self.capabilities

    def load(self, _path: Any, settings: LoadSettings) -> None:
        self.loaded.append(settings)

    def tokenize(self, text: str, **_: Any) -> list[int]:
        return list(range(len(text.split())))

    def evaluate(self, tokens: Sequence[int]) -> Any:
        self.calls.append(("evaluate", len(tokens)))
        if self._on_evaluate is not None:
            self._on_evaluate()
        return SimpleNamespace(seconds=0.001 * len(tokens) * self.loaded[-1].n_threads)

    def reset(self) -> None:
        self.calls.append(("reset", 0))

    def generate_text(self, prompt: Sequence[int], **_: Any) -> Any:
        self.calls.append(("generate", len(prompt)))
        return "", SimpleNamespace(stats=SimpleNamespace(gen_tokens_per_s=50.0))


@pytest.mark.unit
@pytest.mark.parametrize(("n_ctx", "depth"), [(512, PROMPT_TOKENS), (200, 200 - GEN_TOKENS - 1)])
def test_the_reply_is_timed_after_the_prompt_at_its_depth(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, n_ctx: int, depth: int
) -> None:
    """A reply decodes after its document, and what each of its tokens costs grows with the
    positions before it (flash attention: 1.08x after 16 positions, 0.76x after 256, 0.51x after
    1,900 on SmolLM2): the reply is timed after the prompt, in the same cache, with room left for
    it in a small context."""
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(calibrate_module, "machine_key", lambda _caps: "m1")  # no `uname -p`
    fake = _Fake()
    one = [LoadSettings(n_ctx=n_ctx, n_threads=1, n_threads_batch=1)]
    calibrate(fake, Path("m.gguf"), "ab" * 32, LoadSettings(n_ctx=n_ctx), trials=one)  # type: ignore[arg-type]
    replies = [i for i, (what, _) in enumerate(fake.calls) if what == "generate"]
    assert replies, fake.calls
    for i in replies:
        assert fake.calls[i - 1] == ("evaluate", depth), fake.calls  # no reset between
        assert fake.calls[i] == ("generate", depth)


def test_a_cancel_during_the_last_trial_keeps_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    stop: list[bool] = []
    fake = _Fake(on_evaluate=lambda: stop.append(True))
    one = [LoadSettings(n_ctx=512, n_threads=1, n_threads_batch=1)]
    with pytest.raises(Cancelled):
        calibrate(fake, Path("m.gguf"), "cd" * 32, BASE, trials=one,  # type: ignore[arg-type]
                  cancelled=lambda: bool(stop))  # fmt: skip
    assert cached("cd" * 32, machine_key(fake.capabilities)) is None
    quick = calibrate(_Fake(), Path("m.gguf"), "cd" * 32, BASE, trials=candidates(BASE, 2))  # type: ignore[arg-type]
    assert quick.best.n_threads == 1  # the fake is fastest on one thread
    assert quick.best_trial.settings == quick.best
    assert quick.best_trial.seconds_per_call == min(t.seconds_per_call for t in quick.trials)


@pytest.mark.unit
@pytest.mark.parametrize(("value", "on"), [(None, True), ("1", True), ("0", False),
                                            ("off", False)])  # fmt: skip
def test_automatic_calibration_can_be_turned_off(
    monkeypatch: pytest.MonkeyPatch, value: str | None, on: bool
) -> None:
    if value is None:
        monkeypatch.delenv(AUTO_ENV, raising=False)
    else:
        monkeypatch.setenv(AUTO_ENV, value)
    assert automatic() is on


def test_a_trial_disturbed_by_other_work_is_measured_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A calibration in the background yields to the person's jobs: a trial a job ran alongside
    is measured again (RETRIES times at most), an undisturbed one once."""
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    fake = _Fake()
    one = LoadSettings(n_ctx=512, n_threads=1, n_threads_batch=1)
    two = LoadSettings(n_ctx=512, n_threads=2, n_threads_batch=2)
    answers = iter([True, False, False])  # the first trial was disturbed once
    calibrate(fake, Path("m.gguf"), "ef" * 32, BASE, trials=[one, two],  # type: ignore[arg-type]
              disturbed=lambda: next(answers))  # fmt: skip
    assert fake.loaded[:3] == [one, one, two]
    always = _Fake()
    calibrate(always, Path("m.gguf"), "ef" * 32, BASE, trials=[one],  # type: ignore[arg-type]
              disturbed=lambda: True, use_cache=False)  # fmt: skip
    assert always.loaded[: 1 + RETRIES] == [one] * (1 + RETRIES)
    assert always.loaded[1 + RETRIES :] == [one]  # then the fastest is loaded, as always


@pytest.mark.unit
def test_a_calibration_file_written_by_someone_else_is_clamped_or_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Review round 3, row 2b: the cached file fed ``LoadSettings(**json)`` with no bounds, so a
    file in a shared cache folder could ask for a million threads or a billion-token context.
    Numbers are clamped (threads to this machine's cores), anything else makes the file
    ignored (calibrated again)."""
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    sha, machine = "ab" * 32, "m1"
    folder = tmp_path / "cache" / "calibration"
    folder.mkdir(parents=True)
    path = folder / f"{sha[:16]}-{machine}-f16.json"
    huge = {"n_threads": 1_000_000, "n_threads_batch": 1_000_000, "n_batch": 10**9,
            "n_ubatch": 10**9, "n_ctx": 10**9, "n_gpu_layers": 10**6, "kv_cache_type": "f16",
            "flash_attn": False, "seed": -5}  # fmt: skip
    stored = {"version": CACHE_VERSION, "model_sha256": sha, "machine": machine, "best": huge,
              "trials": [{"settings": huge, "prompt_tokens_per_s": 1.0,
                          "gen_tokens_per_s": 1.0}] * 1000}  # fmt: skip
    path.write_text(json.dumps(stored), encoding="utf-8")
    found = cached(sha, machine)
    assert found is not None
    best = found.best
    assert 1 <= best.n_threads <= threads.usable_cores() and best.n_threads_batch == best.n_threads
    assert (best.n_batch, best.n_ubatch, best.n_ctx, best.n_gpu_layers, best.seed) == (
        8192, 8192, 1 << 20, 4096, 0)
    assert len(found.trials) == 64
    for bad in ({"n_threads": "8"}, {"n_threads": 2.5}, {"flash_attn": "yes"},
                {"kv_cache_type": "evil"}, {"__class__": 1}, {"n_batch": True}):
        path.write_text(json.dumps({**stored, "best": {**huge, **bad}}), encoding="utf-8")
        assert cached(sha, machine) is None, bad
