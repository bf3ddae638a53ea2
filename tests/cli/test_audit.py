"""`contextlens-cli run/compare --audit`: a pass says what it checked; a mismatch exits 5."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from app.cli import main as cli
from app.cli.common import EXIT_AUDIT
from app.core.engine.host import EngineHost
from tests.cli.runner import run
from tests.conftest import DATA


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_run_audit_passes_and_says_what_it_checked(model_path: Path, tmp_path: Path) -> None:
    proc = run("run", str(DATA / "sample.py"), "--strategy", "middle", "--n-ctx", "256",
               "--max-tokens", "8", "--db", str(tmp_path / "h.db"), "--audit", "--json",
               timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = _lines(proc.stdout)
    done, audit = lines[-2], lines[-1]
    assert done["type"] == "done" and done["truncated"] is True  # bisect.py overflows 256 tokens
    assert audit["type"] == "audit" and audit["passed"] is True and audit["findings"] == []
    counts = audit["counts"]
    assert counts["calls"] == 1 and counts["chunks"] >= 2
    evaluated = sum(e["tokens"] for e in lines if e["type"] == "chunk_evaluated")
    assert counts["document_tokens"] == evaluated == done["plan"]["kept_tokens"]
    assert "audit passed: 1 job(s), 1 model call(s)" in proc.stderr


def test_compare_audit_covers_every_strategy(model_path: Path, tmp_path: Path) -> None:
    proc = run("compare", str(DATA / "mixed.md"), "--strategies", "tail,map-reduce",
               "--task", "ask", "--question", "Which settings file format is used?",
               "--n-ctx", "256", "--max-tokens", "8", "--db", str(tmp_path / "h.db"), "--audit",
               "--json", timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    audit = _lines(proc.stdout)[-1]
    assert audit["passed"] is True and audit["counts"]["jobs"] == 2
    assert audit["counts"]["calls"] >= 3  # tail: one call; map-reduce: a call per window + one


def test_run_audit_fails_loudly_when_the_model_saw_something_else(
    model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The engine loses one prompt token on the way: the run itself succeeds, the audit
    does not, and the command exits 5 naming the position."""
    real = EngineHost.generate

    def loses_a_token(self: EngineHost, prompt: Sequence[int], **kwargs: Any) -> Iterator[Any]:
        return real(self, [*prompt[:40], *prompt[41:]], **kwargs)

    monkeypatch.setattr(EngineHost, "generate", loses_a_token)
    code = cli.main(["run", str(DATA / "sample.py"), "--strategy", "head", "--n-ctx", "256",
                     "--max-tokens", "8", "--db", str(tmp_path / "h.db"), "--audit",
                     "--json"])  # fmt: skip
    out = capsys.readouterr()
    assert code == EXIT_AUDIT == 5
    audit = _lines(out.out)[-1]
    assert audit["type"] == "audit" and audit["passed"] is False
    assert any("differs from the prompt sent at position 40" in f for f in audit["findings"])
    assert "audit FAILED" in out.err and "position 40" in out.err


@pytest.mark.slow
@pytest.mark.parametrize("task", ["summarize", "ask", "extract"])
def test_compare_audit_passes_on_gemma_for_every_strategy(
    gemma_path: Path, tmp_path: Path, task: str
) -> None:
    """Gemma 3 (SentencePiece, sliding window, a base model) through the CLI's own counter, on a
    table drawn in box characters with Chinese and Python: no false alarm (the audit once read a
    run of sixteen '─' as missing), every strategy, framed for completion."""
    extra = {"ask": ["--question", "What is the mean?"],
             "extract": ["--instruction", "List the numbers."]}.get(task, [])  # fmt: skip
    proc = run("compare", str(DATA / "box-drawing.txt"), "--model", str(gemma_path),
               "--strategies", "refuse,head,tail,middle,rolling,semantic,entropy,map-reduce",
               "--task", task, *extra, "--n-ctx", "160", "--max-tokens", "8",
               "--db", str(tmp_path / "h.db"), "--audit", "--json", timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    audit = _lines(proc.stdout)[-1]
    assert audit["passed"] is True and audit["counts"]["jobs"] == 8, audit
    assert audit["counts"]["calls"] >= 7 and audit["counts"]["document_tokens"] > 0  # refuse: 0
