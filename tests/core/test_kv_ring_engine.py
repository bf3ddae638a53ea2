"""The ring against the real engine: after every step llama.cpp holds what the ring says."""

from __future__ import annotations

import random
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.engine.host import EngineHost
from app.core.engine.ipc import SharedFlag
from app.core.engine.llama_engine import LlamaEngine
from app.core.engine.types import (
    ContextOverflowError,
    Finished,
    LoadSettings,
    SamplingSettings,
    Shifted,
    TextDelta,
)
from app.core.jobs.audit import ring_mismatches
from app.core.jobs.ring import Ring, RingError, SegmentKind
from tests.loops import LOOP_LINE

N_CTX = 256  # llama.cpp's smallest step: shifts and evictions happen often


@pytest.fixture(scope="module")
def small_engine(model_path: Path) -> Iterator[EngineHost]:
    host = EngineHost()
    host.load(model_path, LoadSettings(n_ctx=N_CTX))
    yield host
    host.close()


def _agree(ring: Ring, host: EngineHost, laid: dict[int, list[int]] | None = None) -> None:
    """llama.cpp's cells and positions are the ring's, and each segment's tokens are where the
    ring puts them (the audit's own check)."""
    usage = host.kv_usage()
    assert usage.cells_used <= usage.n_ctx
    mismatches = ring_mismatches(ring, host.kv_tokens(), usage, laid or {})
    assert not mismatches, mismatches


@pytest.mark.parametrize("seed", range(4))
def test_random_operations_keep_ring_and_kv_cache_in_step(
    small_engine: EngineHost, seed: int
) -> None:
    rng = random.Random(seed)
    host = small_engine
    host.reset()
    ring = Ring(N_CTX)
    laid: dict[int, list[int]] = {}  # each segment's tokens, to find them at its positions
    for _ in range(40):
        op = rng.choice(["append", "append", "append", "evict", "evict_named", "shift", "clear"])
        try:
            if op == "append":
                n = rng.randint(1, 70)
                tokens = [rng.randrange(100, 40_000) for _ in range(n)]
                seg = ring.append(rng.choice(list(SegmentKind)), n, pinned=rng.random() < 0.15)
                laid[seg.id] = tokens
                host.evaluate(tokens)
            elif op == "evict":
                removal = ring.evict()
                host.remove(removal.start, removal.end)
            elif op == "evict_named" and len(ring):
                removal = ring.evict(rng.choice([s.id for s in ring]))
                host.remove(removal.start, removal.end)
            elif op == "shift":
                for removal in ring.shift(rng.randint(1, 80)):
                    host.remove(removal.start, removal.end)
            elif op == "clear":
                ring.clear()
                host.reset()
        except RingError:
            pass  # refused by the ring (full, pinned): nothing reached the engine
        ring.check()
        _agree(ring, host, laid)


@pytest.mark.parametrize("policy", ["rolling", "truncate-middle"])
def test_generation_shifts_instead_of_overflowing_and_the_ring_follows(
    small_engine: EngineHost, policy: str
) -> None:
    host = small_engine
    host.reset()
    # a reply that loops by construction (tests/loops.py) runs until its length is spent
    line = host.tokenize(LOOP_LINE + "\n", add_special=False)
    task, opening, rest = line * 4, line * 2, line * 10
    ring = Ring(N_CTX)
    if policy == "rolling":  # the task is pinned; the document scrolls away
        head = task
        parts = [(SegmentKind.SYSTEM, task, True), (SegmentKind.CHUNK, opening + rest, False)]
    else:  # the document's opening is pinned too: the middle goes
        head = task + opening
        parts = [(SegmentKind.SYSTEM, task, True), (SegmentKind.CHUNK, opening, True),
                 (SegmentKind.CHUNK, rest, False)]  # fmt: skip
    laid = {ring.append(kind, len(tokens), pinned=pinned).id: tokens
            for kind, tokens, pinned in parts}  # fmt: skip
    prompt = task + opening + rest
    out = ring.append(SegmentKind.OUTPUT, 1)  # the reply grows this segment
    generated = 0
    shifts = 0
    text: list[str] = []
    finished = None
    for ev in host.generate(prompt, max_tokens=400, on_full="shift", keep=len(head),
                            sampling=SamplingSettings(stop_on_repetition=False)):
        if isinstance(ev, TextDelta):
            text.append(ev.text)
            generated += len(ev.token_ids)
        elif isinstance(ev, Shifted):
            shifts += 1
            assert ev.start == len(head) and ev.n_past == N_CTX  # shifted when full, prefix kept
            ring.grow(out.id, ev.n_past - ring.used)  # the reply so far fills the context
            removals = ring.shift(ev.end - ev.start)
            assert removals[0].start == ev.start
        elif isinstance(ev, Finished):
            finished = ev
    assert finished is not None and finished.stats.finish_reason == "length"
    assert shifts >= 1, "400 tokens in a 256-token context must shift"
    # The ring's output segment holds what the engine kept of the reply (the last generated
    # token is sampled but never evaluated, so it is not in the KV cache).
    kept_output = finished.stats.n_past - (ring.used - ring.get(out.id).tokens)
    assert 0 < kept_output <= N_CTX
    if kept_output - ring.get(out.id).tokens:
        ring.grow(out.id, kept_output - ring.get(out.id).tokens)
    _agree(ring, host, laid)
    assert "".join(text).count(LOOP_LINE) > 40  # kept writing the line across the shifts


def test_stop_policy_ends_with_length_at_the_limit(small_engine: EngineHost) -> None:
    host = small_engine
    host.reset()
    prompt = host.tokenize("Count from 1 to 1000: 1, 2, 3,", add_special=False)
    with pytest.raises(ContextOverflowError, match="reply reserve 600"):
        host.generate_text(prompt, max_tokens=600)
    _, done = host.generate_text(prompt, max_tokens=N_CTX - len(prompt),
                                 sampling=SamplingSettings(stop_on_repetition=False))
    assert done.stats.finish_reason in ("length", "stop")
    assert host.kv_usage().cells_used <= N_CTX


def test_remove_checks_its_range(small_engine: EngineHost) -> None:
    host = small_engine
    host.reset()
    host.evaluate(host.tokenize("A few tokens here.", add_special=False))
    with pytest.raises(ValueError, match="cannot remove positions"):
        host.remove(3, 99)
    edit = host.remove(0, 2)
    assert edit.removed == 2 and edit.n_past == host.kv_usage().cells_used


def test_where_llama_cpp_cannot_shift_the_rest_is_evaluated_again(
    model_path: Path, tmp_path: Path
) -> None:
    """The fallback of LlamaEngine.remove, driven in-process with can_shift forced to False.

    (Every cache type of the default model can shift, so the path is forced here; re-evaluation
    is exact, so the result must equal evaluating the remaining tokens from scratch.)
    """
    engine = LlamaEngine(SharedFlag(tmp_path / "flag", create=True))
    engine.load(str(model_path), LoadSettings(n_ctx=N_CTX))
    real = engine._lc
    engine._lc = types.SimpleNamespace(  # type: ignore[assignment]
        **{name: getattr(real, name) for name in dir(real) if not name.startswith("__")}
    )
    engine._lc.llama_memory_can_shift = lambda _mem: False
    try:
        tokens = engine.tokenize("The quick brown fox jumps over the lazy dog again and again.",
                                 add_special=False)  # fmt: skip
        engine.evaluate(tokens)
        edit = engine.remove(2, 6)
        assert edit.reevaluated == len(tokens) - 6 and edit.removed == 4
        kept = tokens[:2] + tokens[6:]
        assert engine.tokens == kept
        usage = engine.kv_usage()
        assert (usage.cells_used, usage.pos_min, usage.pos_max) == (len(kept), 0, len(kept) - 1)

        def reply() -> list[int]:
            out: list[int] = []
            engine.generate(kept, max_tokens=8, sampling=SamplingSettings(), stop=[],
                            emit=lambda ev: out.extend(getattr(ev, "token_ids", ())))  # fmt: skip
            return out

        after_remove = reply()
        engine.reset()
        engine.evaluate(kept)
        assert reply() == after_remove  # identical to evaluating the kept tokens afresh

        # A reply that fills the context with on_full="shift" falls back the same way, and its
        # Shifted event says how many positions were evaluated again.
        engine.reset()
        long = (tokens * N_CTX)[: N_CTX - 4]
        shifts: list[Shifted] = []
        def seen(ev: object) -> None:
            if isinstance(ev, Shifted):
                shifts.append(ev)

        engine.generate(long, max_tokens=8, sampling=SamplingSettings(), stop=[],
                        on_full="shift", keep=2, emit=seen)  # fmt: skip
        assert shifts and shifts[0].reevaluated == shifts[0].n_past - shifts[0].end > 0
    finally:
        engine._lc = real
        engine.unload()
