"""The engine host on the real default model: streaming, reuse, cancel, state, crash isolation."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.core.engine.chat_template import ChatTemplateError
from app.core.engine.host import EngineHost, describe_exit
from app.core.engine.schedule import PROMPT_SLICE, prompt_slices
from app.core.engine.types import (
    ContextOverflowError,
    EngineCrashedError,
    EngineNotLoadedError,
    Finished,
    LoadSettings,
    ModelLoadError,
    SamplingSettings,
    TextDelta,
)
from app.core.paths import sample_document
from tests.fault_child import CrashingHost
from tests.loops import LOOP_TEXT
from tests.plain_llama import plain_llama

CHINESE_PROMPT = "请用中文详细介绍长城的历史，包括它的建造年代和意义。"


def chat_tokens(host: EngineHost, text: str) -> list[int]:
    prompt = host.apply_chat_template([{"role": "user", "content": text}])
    return host.tokenize(prompt, parse_special=True)


def collect(host: EngineHost, tokens: list[int], **kwargs: Any) -> tuple[list[TextDelta], Finished]:
    deltas: list[TextDelta] = []
    finished: Finished | None = None
    for ev in host.generate(tokens, **kwargs):
        if isinstance(ev, TextDelta):
            deltas.append(ev)
        else:
            finished = ev
    assert finished is not None
    return deltas, finished


def test_load_reports_what_llama_cpp_created(engine: EngineHost) -> None:
    assert engine.model is not None
    assert engine.model.n_ctx == 2048
    assert engine.model.n_ctx_train == 8192
    assert engine.model.n_vocab == 49152
    assert engine.model.n_threads >= 1
    assert engine.capabilities is not None
    assert "CPU" in engine.capabilities.system_info
    assert engine.model_info is not None and engine.model_info.architecture == "llama"


def test_tokenize_detokenize_round_trip(engine: EngineHost) -> None:
    text = "Long documents meet short contexts. 长城很长。 emoji 🌍 and tabs\t\t and 12345."
    tokens = engine.tokenize(text)
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert engine.detokenize(tokens) == text


def test_chat_template_renders_chatml(engine: EngineHost) -> None:
    prompt = engine.apply_chat_template([{"role": "user", "content": "hi"}])
    assert prompt.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nhi<|im_end|>" in prompt


def test_generation_streams_text_and_reports_stats(engine: EngineHost) -> None:
    tokens = chat_tokens(engine, "Name three colours.")
    deltas, fin = collect(engine, tokens, max_tokens=24)
    stats = fin.stats
    assert stats.finish_reason in ("stop", "length")
    assert stats.prompt_tokens == len(tokens)
    assert stats.completion_tokens == sum(len(d.token_ids) for d in deltas)
    assert 0 < stats.completion_tokens <= 24
    assert stats.gen_tokens_per_s > 0 and stats.prompt_tokens_per_s > 0
    assert "".join(d.text for d in deltas).strip()


def assert_whole_characters(engine: EngineHost, deltas: list[TextDelta]) -> None:
    for d in deltas:
        assert "\ufffd" not in d.text
        d.text.encode("utf-8")  # whole characters only: encodes without surrogates
    joined = "".join(d.text for d in deltas)
    full = engine.detokenize([t for d in deltas for t in d.token_ids])
    # The stream equals the reply, except possibly an unfinished character at the very end.
    assert full.startswith(joined)
    assert len(full) - len(joined) <= 1


def test_streaming_never_splits_a_multibyte_character(engine: EngineHost) -> None:
    # The check means something only for a reply in which some single token is an incomplete
    # UTF-8 sequence. Which reply the model gives depends on the CPU's floating-point kernels,
    # so the greedy reply comes first, then sampled ones (seeded) until one has such a token.
    tokens = chat_tokens(engine, CHINESE_PROMPT)
    tries = [SamplingSettings()] + [
        SamplingSettings(temperature=1.0, top_k=200, top_p=1.0, min_p=0.0, seed=seed)
        for seed in range(1, 7)
    ]
    split: list[int] = []
    for sampling in tries:
        deltas, _ = collect(engine, tokens, max_tokens=160, sampling=sampling)
        assert_whole_characters(engine, deltas)
        ids = [t for d in deltas for t in d.token_ids]
        split = [t for t in ids if "\ufffd" in engine.detokenize([t])]
        if split:
            break
    assert split, f"none of {len(tries)} replies split a character across tokens"


def _settings_of(engine: EngineHost) -> LoadSettings:
    loaded = engine.model
    assert loaded is not None
    return LoadSettings(n_ctx=loaded.n_ctx, n_threads=loaded.n_threads,
                        n_threads_batch=loaded.n_threads_batch)  # fmt: skip


def test_greedy_output_matches_llama_cpp_under_the_same_settings_and_schedule(
    engine: EngineHost, model_path: Path
) -> None:
    """The engine's greedy tokens are llama-cpp-python's own when llama-cpp-python is made with
    the engine's settings and evaluates the prompt in the engine's slices (schedule.py): on any
    build. A short chat prompt, and one whose prompt fills a slice and leaves one token of the
    rest (the kernels of a one-token decode differ from a batch's on some builds)."""
    text = sample_document().read_text(encoding="utf-8")[:4000]
    long = engine.tokenize(text)[: PROMPT_SLICE + 2]  # slices [128, 1], then the last token
    prompts = [chat_tokens(engine, "Write a haiku about rivers."), long]
    assert prompt_slices(len(long), PROMPT_SLICE) == [PROMPT_SLICE, 1, 1]
    ours = []
    for prompt in prompts:
        engine.reset()
        deltas, _ = collect(engine, prompt, max_tokens=32,
                            sampling=SamplingSettings(stop_on_repetition=False))  # fmt: skip
        ours.append([t for d in deltas for t in d.token_ids])
    with plain_llama(model_path, _settings_of(engine)) as plain:
        theirs = [plain.greedy(prompt, 32) for prompt in prompts]
    assert ours == theirs
    assert all(ours), "each prompt got a reply"


def test_prefix_reuse_evaluates_only_new_tokens(engine: EngineHost) -> None:
    engine.reset()
    base = chat_tokens(engine, "Summarise: the quick brown fox jumps over the lazy dog.")
    _, first = collect(engine, base, max_tokens=4)
    assert first.stats.prompt_eval_tokens == len(base)
    _, again = collect(engine, base, max_tokens=4)
    assert again.stats.prompt_eval_tokens == 1  # only the last token, to refresh its logits
    longer = base + engine.tokenize(" More.")
    _, more = collect(engine, longer, max_tokens=4)
    assert more.stats.prompt_eval_tokens == len(longer) - len(base)
    usage = engine.kv_usage()
    assert usage.cells_used == more.stats.n_past
    assert (usage.pos_min, usage.pos_max) == (0, more.stats.n_past - 1)


def test_context_overflow_is_refused_with_a_clear_sentence(engine: EngineHost) -> None:
    tokens = engine.tokenize("word " * 3000)
    with pytest.raises(ContextOverflowError) as err:
        list(engine.generate(tokens, max_tokens=100))
    assert (
        str(err.value)
        == f"prompt needs {len(tokens):,} tokens, context is 2,048 (reply reserve 100)"
    )
    # Nothing broke: the engine still answers.
    _, fin = collect(engine, engine.tokenize("Hello"), max_tokens=2)
    assert fin.stats.completion_tokens >= 1


def test_bad_token_ids_are_refused_and_the_engine_survives(engine: EngineHost) -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        list(engine.generate([1, 2, 10**7], max_tokens=2))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.detokenize([-5])
    assert engine.detokenize(engine.tokenize("still fine")) == "still fine"


def test_cancel_during_generation_stops_after_at_most_one_token(engine: EngineHost) -> None:
    tokens = engine.tokenize(LOOP_TEXT)  # a reply as long as it is let run (tests/loops.py)
    produced_after_cancel = 0
    cancel_at: float | None = None
    finished: Finished | None = None
    for ev in engine.generate(tokens, max_tokens=1500,
                              sampling=SamplingSettings(stop_on_repetition=False)):
        if isinstance(ev, Finished):
            finished = ev
            latency = time.perf_counter() - cancel_at if cancel_at else None
            break
        if not isinstance(ev, TextDelta):  # the prompt's progress and the KV figures
            continue
        if cancel_at is not None:
            produced_after_cancel += len(ev.token_ids)
        elif sum(1 for _ in ev.token_ids) and ev.text:
            cancel_at = time.perf_counter()
            engine.cancel()
    assert finished is not None and finished.stats.finish_reason == "cancelled"
    assert produced_after_cancel <= 1
    assert latency is not None
    # The engine is ready for the next request, and the KV cache agrees with what it holds.
    assert engine.kv_usage().cells_used == finished.stats.n_past


def test_cancel_interrupts_a_long_prompt_evaluation(engine: EngineHost) -> None:
    engine.reset()
    tokens = engine.tokenize("The archive holds many records. " * 260)[:1900]
    timer = threading.Timer(0.3, engine.cancel)
    timer.start()
    try:
        _, fin = collect(engine, tokens, max_tokens=8)
    finally:
        timer.cancel()
    assert fin.stats.finish_reason == "cancelled"
    assert fin.stats.prompt_eval_tokens < len(tokens)  # it stopped inside the prompt
    assert fin.stats.completion_tokens == 0
    assert engine.kv_usage().cells_used == fin.stats.n_past


def test_abandoning_the_stream_cancels_and_keeps_the_engine_usable(engine: EngineHost) -> None:
    stream = engine.generate(chat_tokens(engine, "Count to one hundred."), max_tokens=500)
    next(stream)
    stream.close()
    assert engine.detokenize(engine.tokenize("ok")) == "ok"


def test_kv_state_save_and_restore_resumes_without_re_evaluation(
    engine: EngineHost, model_path: Path
) -> None:
    engine.reset()
    tokens = chat_tokens(engine, "Describe a library in two sentences.")
    engine.evaluate(tokens)
    state = engine.save_state()
    assert state.tokens == tuple(tokens)
    assert state.model_path == str(model_path.resolve())  # the model's, not llama.cpp's link
    assert len(state.data) == engine.kv_usage().state_bytes
    ref_deltas, reference = collect(engine, tokens, max_tokens=16)

    engine.reset()
    assert engine.kv_usage().cells_used == 0
    assert engine.restore_state(state) == len(tokens)
    assert engine.kv_usage().cells_used == len(tokens)
    deltas, resumed = collect(engine, tokens, max_tokens=16)
    assert resumed.stats.prompt_eval_tokens == 1  # resumed from the saved cache, not re-evaluated
    # Deltas are coalesced by time, so compare the text and the tokens, not the pieces.
    assert "".join(d.text for d in deltas) == "".join(d.text for d in ref_deltas)
    assert [t for d in deltas for t in d.token_ids] == [t for d in ref_deltas for t in d.token_ids]
    assert resumed.stats.completion_tokens == reference.stats.completion_tokens


def test_restore_refuses_a_state_from_other_settings(engine: EngineHost) -> None:
    state = engine.save_state()
    with pytest.raises(ValueError, match="n_ctx"):
        engine.restore_state(replace(state, n_ctx=state.n_ctx * 2))


@pytest.mark.unit
def test_bad_model_file_is_refused_before_the_child_sees_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    host = EngineHost()
    try:
        with pytest.raises(ModelLoadError, match="more than the file can hold"):
            host.load(bad)
        assert host.pid is None  # the GGUF check ran in this process; no child was needed
    finally:
        host.close()


@pytest.mark.unit
def test_operations_without_a_model_say_so() -> None:
    host = EngineHost()
    try:
        with pytest.raises(EngineNotLoadedError):
            host.tokenize("x")
    finally:
        host.close()


@pytest.mark.unit
def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="n_ctx"):
        LoadSettings(n_ctx=4).validate()
    with pytest.raises(ValueError, match="flash attention"):
        LoadSettings(kv_cache_type="q8_0").validate()
    with pytest.raises(ValueError, match="unknown KV cache type"):
        LoadSettings(kv_cache_type="q3").validate()


def test_template_errors_come_back_as_clear_errors(engine: EngineHost) -> None:
    with pytest.raises(ChatTemplateError, match="role"):
        engine.apply_chat_template([{"content": "no role"}])


# ----- crash isolation: every way the child can die ends as a clear error here -----


@pytest.fixture
def fresh_engine(model_path: Path) -> Any:
    host = CrashingHost()  # the app's child, which also crashes on request
    host.load(model_path, LoadSettings(n_ctx=1024))
    yield host
    host.close()


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT, signal.SIGKILL])
def test_child_killed_mid_generation_leaves_the_caller_alive(
    fresh_engine: EngineHost, model_path: Path, sig: signal.Signals
) -> None:
    host = fresh_engine
    tokens = chat_tokens(host, "Write a long essay about the history of printing.")
    pid = host.pid
    assert pid is not None
    seen = 0
    with pytest.raises(EngineCrashedError) as err:
        for _ev in host.generate(tokens, max_tokens=900):
            seen += 1
            if seen == 3:
                os.kill(pid, sig)
    message = str(err.value)
    assert sig.name in message
    assert "load the model again" in message
    assert "\n" not in message
    assert err.value.exitcode == -sig
    assert not host.alive
    # A new engine starts on the next load, and works.
    host.load(model_path, LoadSettings(n_ctx=1024))
    assert host.pid != pid
    _, fin = collect(host, host.tokenize("Hello"), max_tokens=3)
    assert fin.stats.completion_tokens >= 1


@pytest.mark.parametrize(
    ("kind", "name"),
    [("segfault", "SIGSEGV"), ("abort", "SIGABRT"), ("illegal-instruction", "SIGILL")],
)
def test_native_faults_inside_the_child_become_clear_errors(
    fresh_engine: EngineHost, kind: str, name: str
) -> None:
    with pytest.raises(EngineCrashedError, match=name):
        fresh_engine.crash(kind)
    with pytest.raises(EngineNotLoadedError):
        fresh_engine.tokenize("the model went with the engine")


@pytest.mark.unit
def test_exit_descriptions_name_the_signal() -> None:
    assert describe_exit(-signal.SIGILL).startswith("SIGILL (an illegal instruction")
    assert describe_exit(1) == "it exited with status 1"
    assert describe_exit(None) == "it stopped answering"
