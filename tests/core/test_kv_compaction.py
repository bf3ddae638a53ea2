"""Compaction after a removal (LlamaEngine.remove): the cells move to the front of the cache and
nothing else changes. The proof is llama.cpp's own serialisation: the sequence's state after a
compacted removal is byte for byte the state after the same removal left in place once its
shift is applied (the state lists cells in order, not where they sit). Both test models: Gemma 3
keeps two caches (its sliding-window layers' and the rest), SmolLM2 one."""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.engine.compaction import COMPACT_MIN
from app.core.engine.host import EngineHost
from app.core.engine.ipc import SharedFlag
from app.core.engine.llama_engine import LlamaEngine
from app.core.engine.types import LoadSettings
from app.core.paths import sample_document

N_CTX = 1024
PINNED, WINDOW, NOTES = 16, COMPACT_MIN + 40, 32  # a hole just over the threshold


@pytest.fixture(scope="module")
def opening() -> str:
    """The first 12,000 characters of the sample document."""
    return sample_document().read_text(encoding="utf-8")[:12_000]


@pytest.fixture(scope="module", params=["smollm2", "gemma"])
def model_host(request: pytest.FixtureRequest, model_path: Path) -> Iterator[EngineHost]:
    """An engine on each test model in turn (SmolLM2, then Gemma 3 with its sliding window)."""
    path = model_path if request.param == "smollm2" else request.getfixturevalue("gemma_path")
    with EngineHost() as engine:
        engine.load(path, LoadSettings(n_ctx=N_CTX))
        yield engine


def test_a_compacted_removal_keeps_every_cell_as_it_was(
    model_host: EngineHost, opening: str
) -> None:
    tokens = model_host.tokenize(opening, add_special=False)
    pinned, window = tokens[:PINNED], tokens[PINNED : PINNED + WINDOW]
    notes = tokens[PINNED + WINDOW : PINNED + WINDOW + NOTES]
    kept = pinned + notes

    model_host.reset()
    model_host.evaluate(pinned + window + notes)
    edit = model_host.remove(PINNED, PINNED + WINDOW)
    assert (edit.removed, edit.moved, edit.reevaluated, edit.compacted) == (WINDOW, NOTES, 0, True)
    usage = model_host.kv_usage()
    assert (usage.cells_used, usage.pos_min, usage.pos_max) == (len(kept), 0, len(kept) - 1)
    assert model_host.kv_tokens() == kept
    compacted = model_host.save_state()

    model_host.reset()
    model_host.evaluate(pinned + window + notes)
    edit = model_host.remove(PINNED, PINNED + WINDOW, compact=False)
    assert edit.compacted is False
    # llama.cpp rotates the moved keys at the next decode; the compaction decodes the last
    # token again to get there, so the same is done here before the states are compared
    model_host.remove(len(kept) - 1, len(kept))
    model_host.evaluate(kept[-1:])
    in_place = model_host.save_state()
    assert compacted.tokens == in_place.tokens == tuple(kept)
    assert compacted.data == in_place.data

    # what comes after is appended behind the moved text as before
    more = tokens[-50:]
    model_host.restore_state(compacted)
    model_host.evaluate(more)
    assert model_host.kv_tokens() == kept + more


def test_small_holes_and_the_tail_are_not_compacted(model_host: EngineHost, opening: str) -> None:
    tokens = model_host.tokenize(opening, add_special=False)[:300]
    model_host.reset()
    model_host.evaluate(tokens)
    assert model_host.remove(10, 10 + COMPACT_MIN - 1).compacted is False  # under a block of cells
    rest = tokens[:10] + tokens[10 + COMPACT_MIN - 1 :]
    assert model_host.kv_tokens() == rest
    assert model_host.remove(20, len(rest)).compacted is False  # nothing behind the hole to move
    assert model_host.kv_tokens() == rest[:20]


def test_a_state_llama_cpp_refuses_back_is_evaluated_again(model_path: Path, tmp_path: Path,
                                                          opening: str) -> None:  # fmt: skip
    """Should llama.cpp not take the state back, the cache is rebuilt from the tokens."""
    engine = LlamaEngine(SharedFlag(tmp_path / "flag", create=True))
    engine.load(str(model_path), LoadSettings(n_ctx=N_CTX))
    real = engine._lc
    engine._lc = types.SimpleNamespace(  # type: ignore[assignment]
        **{name: getattr(real, name) for name in dir(real) if not name.startswith("__")}
    )
    engine._lc.llama_state_seq_set_data = lambda *_args: 0
    try:
        tokens = engine.tokenize(opening, add_special=False)[: PINNED + WINDOW + NOTES]
        engine.evaluate(tokens)
        edit = engine.remove(PINNED, PINNED + WINDOW)
        kept = tokens[:PINNED] + tokens[PINNED + WINDOW :]
        assert edit.compacted is False and engine.tokens == kept
        usage = engine.kv_usage()
        assert (usage.cells_used, usage.pos_min, usage.pos_max) == (len(kept), 0, len(kept) - 1)
    finally:
        engine._lc = real
        engine.unload()
