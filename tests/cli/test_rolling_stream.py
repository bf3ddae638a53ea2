"""`contextlens-cli run --strategy rolling` on a document ten times the context, as a person
runs it: the done record says each document token was evaluated about once (the instruction
once, a few template tokens per window), the JSON events show every eviction and shift of the
KV ring, and `--audit` passes after reading the cache back at each of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.cli.common import EXIT_OK
from app.core.paths import sample_document
from tests.cli.runner import run

N_CTX = 256


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_rolling_streams_a_document_ten_times_the_context(tmp_path: Path) -> None:
    whole = sample_document().read_text(encoding="utf-8")
    start = whole.index("\n\n", 100_000) + 2
    doc = tmp_path / "jargon-part.txt"
    doc.write_text(whole[start : whole.index("\n\n", start + 11_500)], encoding="utf-8")
    proc = run("run", str(doc), "--strategy", "rolling", "--n-ctx", str(N_CTX), "--max-tokens",
               "16", "--json", "--audit", "--db", str(tmp_path / "history.db"),
               timeout=240, process=True)  # fmt: skip
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = _lines(proc.stdout)
    done = next(e for e in lines if e["type"] == "done")
    assert done["document_tokens"] >= 10 * N_CTX and done["fallback"] is None
    shifts = [e for e in lines if e["type"] == "k_v_shifted"]
    prefix = shifts[0]["layout"][0][2]  # the pinned instruction, evaluated once
    assert shifts[0]["layout"][0][0] == "system"
    assert done["prompt_tokens_evaluated"] <= 1.1 * done["document_tokens"] + prefix
    assert done["evaluated_per_document_token"] == round(
        done["prompt_tokens_evaluated"] / done["document_tokens"], 4
    )
    assert done["evictions"] > 0 and any(e["moved"] > 0 for e in shifts)
    assert any("chunk" in e["kinds"] for e in shifts)
    evicted = [e for e in lines if e["type"] == "chunk_evicted"]
    evaluated = {(e["start"], e["end"]) for e in lines if e["type"] == "chunk_evaluated"}
    assert evicted and {(e["start"], e["end"]) for e in evicted} <= evaluated
    audit = next(e for e in lines if e["type"] == "audit")
    assert audit["passed"], audit
    assert audit["counts"]["evictions"] == done["evictions"] and audit["counts"]["shifts"] > 0
    steps = [o["step"] for o in done["outputs"]]
    assert steps[-1] == "summary" and len(steps) >= 11
    assert all(o["source_spans"] for o in done["outputs"])
