"""`contextlens-cli run --json`: every output names the document spans it came from, the steps that
combine earlier outputs too (map-reduce's combining rounds and summary, ask's combined answer).

The first five functions of bisect.py at n_ctx 256 plan five one-chunk windows; with 48-token
replies the five partial summaries do not fit one combining call when they run long, so a first
level of two (``combine 1.1``, ``combine 1.2``) runs. How long they run is the greedy text of
this machine's kernels (app/core/engine/schedule.py): on the development machine they need the
level; each level that ran is checked, whichever ran. An audited run makes its calls one after
another (the audit reads the cache after each); without the audit the parts and the combining
level run in lanes (``CallRunner._map_in_lanes``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.runner import run
from tests.conftest import DATA

Span = tuple[int, int]
MAP_REDUCE = ("--strategy", "map-reduce", "--n-ctx", "256")


def _run(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    doc = tmp_path / "bisect-head.py"  # bisect.py up to bisect_left: five windows
    doc.write_text((DATA / "sample.py").read_text(encoding="utf-8")[:2020], encoding="utf-8")
    proc = run("run", str(doc), *MAP_REDUCE, *args, "--json", "--db", str(tmp_path / "h.db"),
               timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _spans(out: dict[str, Any]) -> list[Span]:
    return [(a, b) for a, b in out["source_spans"]]


def _union(outs: list[dict[str, Any]]) -> list[Span]:
    return sorted({s for out in outs for s in _spans(out)})


def _check_sources(lines: list[dict[str, Any]], done: dict[str, Any], parts: str) -> None:
    """Every output names sources; each a chunk the plan laid out and the model evaluated; the
    outputs of calls that held chunks name exactly those, as their streamed batches did; the
    others name nothing while they stream."""
    chunks: dict[str, list[Span]] = {}
    for e in lines:
        if e["type"] == "chunk_evaluated":
            chunks.setdefault(e["step"], []).append((e["start"], e["end"]))
    evaluated = {s for spans in chunks.values() for s in spans}
    windows = [(w["start"], w["end"]) for w in done["plan"]["windows"]]
    assert all(any(a <= x < y <= b for a, b in windows) for x, y in evaluated)
    starts, ends = {a for a, _ in evaluated}, {b for _, b in evaluated}
    outputs = done["outputs"]
    assert len({o["step"] for o in outputs}) == len(outputs)
    for out in outputs:
        spans = _spans(out)
        assert spans, f"{out['step']} names no source"
        assert spans == sorted(set(spans)), f"{out['step']}: not sorted, or a span twice"
        assert all(a in starts and b in ends and a < b for a, b in spans), out
        if out["step"].startswith(parts):  # held document chunks: exactly those
            assert spans == chunks[out["step"]]
        else:  # made from earlier outputs: held none
            assert out["step"] not in chunks
        batches = [e for e in lines if e["type"] == "token_batch" and e["step"] == out["step"]]
        held = [list(s) for s in chunks.get(out["step"], [])]
        assert batches or not out["text"], out["step"]
        assert all(e["sources"] == held for e in batches), out["step"]  # what was resident
        results = [e for e in lines if e["type"] == "partial_result" and e["step"] == out["step"]]
        assert all(e["sources"] == out["source_spans"] for e in results), out["step"]
    part_outs = [o for o in outputs if o["step"].startswith(parts)]
    assert len(part_outs) == len(windows) >= 2 and not done["truncated"]
    assert _union(part_outs) == sorted(evaluated)  # every chunk, in some part


def _made_of_runs(combined: list[dict[str, Any]], inputs: list[dict[str, Any]]) -> None:
    """Each combined output names the union of a run of consecutive inputs, the runs in order
    and together all of them."""
    rest = list(inputs)
    for out in combined:
        k = next((k for k in range(1, len(rest) + 1) if _union(rest[:k]) == _spans(out)), 0)
        assert k, f"{out['step']} names {_spans(out)}, no run of {[o['step'] for o in rest]}"
        rest = rest[k:]
    assert not rest, f"{[o['step'] for o in rest]} went into no combined output"


@pytest.mark.parametrize("audited", [True, False], ids=["audited-one-by-one", "in-lanes"])
def test_map_reduce_combine_steps_name_the_spans_they_were_made_from(
    model_path: Path, tmp_path: Path, audited: bool
) -> None:
    lines = _run(tmp_path, "--max-tokens", "48", *(["--audit"] if audited else []))
    done = next(e for e in lines if e["type"] == "done")
    assert done["finish_reason"] in ("stop", "length", "repetition")
    rounds = [e for e in lines if e["type"] == "lanes_started"]
    if audited:
        assert rounds == [] and done["lanes"] is None  # the audit: one call at a time, always
        audit = lines[-1]
        assert audit["type"] == "audit" and audit["passed"] is True, audit["findings"]
        assert audit["counts"]["calls"] == len(done["outputs"])
    _check_sources(lines, done, "part ")
    outputs = done["outputs"]
    parts = [o for o in outputs if o["step"].startswith("part ")]
    levels = [parts]  # each combining level made of runs of the one before
    while level := [o for o in outputs if o["step"].startswith(f"combine {len(levels)}.")]:
        _made_of_runs(level, levels[-1])
        levels.append(level)
    if len(levels) >= 2:  # the partial summaries outgrew one combining call
        assert len(levels[1]) >= 2, [o["step"] for o in outputs]
        if not audited:  # the parts, then the first combining level, each a batch of lanes
            assert [r["windows"] for r in rounds[:2]] == [len(parts), len(levels[1])]
    summary = outputs[-1]
    assert summary["step"] == "summary" and summary["text"]
    assert _spans(summary) == _union(levels[-1]) == _union(parts)  # what the partials covered


def test_ask_map_reduce_answer_names_the_answers_it_combined(
    model_path: Path, tmp_path: Path
) -> None:
    lines = _run(tmp_path, "--task", "ask", "--question", "What does insort_left do?",
                 "--max-tokens", "16", "--audit")  # fmt: skip
    done = next(e for e in lines if e["type"] == "done")
    audit = lines[-1]
    assert audit["type"] == "audit" and audit["passed"] is True, audit["findings"]
    _check_sources(lines, done, "answer 1 part ")
    outputs = done["outputs"]
    parts = [o for o in outputs if o["step"].startswith("answer 1 part ")]
    answer = outputs[-1]
    assert answer["step"] == "answer 1" and answer["text"]
    # 16-token answers: all five fit next to the question in the combining call
    assert _spans(answer) == _union(parts)
