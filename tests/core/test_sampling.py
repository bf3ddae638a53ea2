"""Samplers and the loop stop on the real engine and the default model: a prompt that makes the
model loop under greedy decoding by construction (tests/loops.py) ends with finish reason
``repetition`` (one call and in lanes),
a seed makes a sampled reply reproducible, the penalties change what greedy decoding picks, and
bad values are refused in one sentence. Presets and stored settings without an engine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.engine.host import EngineHost
from app.core.engine.remote import RemoteEngine, ServerInfo, UnsupportedRemotelyError
from app.core.engine.remote_http import Connection
from app.core.engine.repetition import ends_in_loop
from app.core.engine.types import (
    FINISH_REASONS,
    Finished,
    GenerationStats,
    LaneDelta,
    LaneFinished,
    LoadSettings,
    SamplingSettings,
    TextDelta,
)
from app.core.sampling import (
    BALANCED,
    CREATIVE,
    DETERMINISTIC,
    PRESETS,
    describe,
    from_version,
    preset,
    preset_of,
    stored,
)
from tests.loops import LOOP_LINE, LOOP_TEXT, MIN_LEAD
from tests.plain_llama import plain_llama


@pytest.fixture(scope="module")
def looping(engine: EngineHost) -> list[int]:
    return engine.tokenize(LOOP_TEXT)


def _reply(engine: EngineHost, prompt: Sequence[int], sampling: SamplingSettings,
           max_tokens: int) -> tuple[str, GenerationStats]:  # fmt: skip
    parts, stats = [], None
    for ev in engine.generate(prompt, max_tokens=max_tokens, sampling=sampling):
        if isinstance(ev, TextDelta):
            parts.append(ev.text)
        elif isinstance(ev, Finished):
            stats = ev.stats
    assert stats is not None
    return "".join(parts), stats


def test_the_loop_is_one_by_construction_on_this_build(engine: EngineHost, looping: list[int],
                                                      model_path: Path) -> None:  # fmt: skip
    """The premise of the loop tests, measured on the build that runs: greedy decoding writes
    the line again, each token ahead of the next best by more than other kernels could move it
    (tests/loops.py)."""
    loaded = engine.model
    assert loaded is not None
    with plain_llama(model_path, LoadSettings(n_ctx=loaded.n_ctx)) as plain:
        reply, leads = plain.leads(looping, 64)
    assert min(leads) >= MIN_LEAD, f"the loop's weakest token leads by {min(leads):.2f} logits"
    assert (LOOP_LINE + "\n") * 3 in engine.detokenize(reply)


def test_a_greedy_loop_ends_with_finish_reason_repetition(engine: EngineHost,
                                                          looping: list[int]) -> None:  # fmt: skip
    stopped, stats = _reply(engine, looping, SamplingSettings(), 80)
    assert stats.finish_reason == "repetition", stopped
    assert stats.completion_tokens < 60 and ends_in_loop(stopped)
    assert stopped.count(LOOP_LINE) >= 4  # a line repeated needs four copies to count
    # without the stop the same greedy reply goes on looping until its length runs out
    running, full = _reply(engine, looping, SamplingSettings(stop_on_repetition=False), 64)
    assert full.finish_reason == "length" and full.completion_tokens == 64
    assert running.startswith(stopped)
    assert running.count(LOOP_LINE) > stopped.count(LOOP_LINE)


def test_a_greedy_loop_in_lanes_ends_with_repetition(engine: EngineHost,
                                                     looping: list[int]) -> None:  # fmt: skip
    cut = len(looping) - 6  # the shared prefix, and the prompt's end as each lane's own part
    finished: dict[int, str] = {}
    texts: dict[int, list[str]] = {0: [], 1: []}
    for ev in engine.generate_lanes(looping[:cut], [looping[cut:], looping[cut:]], lanes=2,
                                    max_tokens=100):  # fmt: skip
        if isinstance(ev, LaneDelta):
            texts[ev.index].append(ev.text)
        elif isinstance(ev, LaneFinished):
            finished[ev.index] = ev.stats.finish_reason
    assert finished == {0: "repetition", 1: "repetition"}
    assert all(ends_in_loop("".join(t)) for t in texts.values())


def test_the_same_seed_and_settings_give_the_same_sampled_reply(engine: EngineHost) -> None:
    """Bit for bit when the prompt is evaluated the same way: each reply here after an empty
    cache (a prompt after a cached prefix starts its slices elsewhere: app/core/engine/
    schedule.py). An open request, so that the draws have words to choose between."""
    sampled = SamplingSettings(temperature=0.7, repeat_penalty=1.15, seed=1)
    text = engine.apply_chat_template([{"role": "user", "content": "Write a poem about hackers."}])
    prompt = engine.tokenize(text, parse_special=True)

    def fresh(s: SamplingSettings) -> str:
        engine.reset()
        return _reply(engine, prompt, s, 24)[0]

    first = fresh(sampled)
    assert first and fresh(sampled) == first
    others = {fresh(replace(sampled, seed=s)) for s in (2, 3)}
    assert others - {first}, "another seed should give another reply"


def test_penalties_steer_greedy_decoding_out_of_its_loop(engine: EngineHost,
                                                         looping: list[int]) -> None:  # fmt: skip
    greedy, _ = _reply(engine, looping, SamplingSettings(stop_on_repetition=False), 32)
    penalized, stats = _reply(engine, looping, SamplingSettings(repeat_penalty=1.3), 32)
    assert penalized != greedy and stats.finish_reason != "repetition"
    assert (LOOP_LINE + "\n") * 2 not in penalized and not ends_in_loop(penalized)


def test_bad_sampling_values_are_refused_in_one_sentence(engine: EngineHost,
                                                         looping: list[int]) -> None:  # fmt: skip
    with pytest.raises(ValueError, match=r"^top-p must be above 0 and at most 1 .*\(got 0\.0\)$"):
        _reply(engine, looping, SamplingSettings(temperature=0.5, top_p=0.0), 4)
    with pytest.raises(ValueError, match=r"^seed must be between 0 and 4294967294"):
        _reply(engine, looping, SamplingSettings(seed=2**32 - 1), 4)
    assert engine.alive  # refused before anything ran


# ----- presets and stored settings (no engine) -------------------------------------------------


@pytest.mark.unit
def test_presets_and_what_a_version_stores() -> None:
    assert PRESETS[DETERMINISTIC] == SamplingSettings() and SamplingSettings().greedy
    for name in (BALANCED, CREATIVE):
        p = preset(name, seed=7)
        p.validate()
        assert not p.greedy and p.seed == 7 and preset_of(p) == name
    assert preset_of(SamplingSettings(temperature=0.3)) is None
    with pytest.raises(ValueError, match="unknown sampling preset 'wild'"):
        preset("wild")
    chosen = SamplingSettings(temperature=0.7, repeat_penalty=1.15, seed=1)
    record = stored(chosen)
    assert record["temperature"] == 0.7 and record["repeat_penalty"] == 1.15
    assert from_version({"sampling": record}) == chosen
    assert from_version({"n_ctx": 512}) == SamplingSettings()  # recorded before sampling was
    assert SamplingSettings.from_dict({**record, "future_field": 1}) == chosen
    assert describe(SamplingSettings()) == "greedy"
    assert describe(chosen).startswith("temperature 0.7, top-k 40")
    assert "repetition" in FINISH_REASONS


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["llama-server", "llama-cpp-python", "vllm"])
def test_a_server_gets_every_sampling_field_it_knows_or_a_refusal(kind: str) -> None:
    remote = RemoteEngine(Connection("http://127.0.0.1:9"))
    remote._info = ServerInfo(url="http://127.0.0.1:9", kind=kind, model="m", n_ctx=512,
                              n_ctx_source="given", n_ctx_train=None, tokenizer="",
                              exact_counts=False, chat_template="", slots=None, kv_source="",
                              accepts_token_ids=True)  # fmt: skip
    chosen = SamplingSettings(temperature=0.7, top_k=20, repeat_penalty=1.15, seed=1)
    body = remote._body([1, 2, 3], 8, chosen, ())
    assert (body["temperature"], body["top_k"], body["seed"]) == (0.7, 20, 1)
    penalty = "repetition_penalty" if kind == "vllm" else "repeat_penalty"
    assert body[penalty] == 1.15
    assert remote._body([1], 8, SamplingSettings(), ())[penalty] == 1.0  # greedy: always off
    dry = replace(chosen, dry_multiplier=0.8, repeat_last_n=256)
    if kind == "llama-server":
        body = remote._body([1], 8, dry, ())
        assert (body["dry_multiplier"], body["repeat_last_n"]) == (0.8, 256)
        assert "dry_penalty_last_n" not in body  # -1: the server's default, which it refuses
        assert remote._body([1], 8, replace(dry, dry_last_n=128), ())["dry_penalty_last_n"] == 128
    else:
        with pytest.raises(UnsupportedRemotelyError, match="DRY sampling needs llama-server"):
            remote._body([1], 8, dry, ())
        with pytest.raises(UnsupportedRemotelyError, match="leave repeat-last-n at 64"):
            remote._body([1], 8, replace(chosen, repeat_last_n=256), ())
