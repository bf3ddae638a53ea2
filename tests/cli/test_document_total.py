"""One token total for a document (issue 49, row 8), on the command line: `plan` and the plan
line of `compare` say the kept tokens of the number `count` says, the whole text's count, at
two context sizes, although the chunks they plan with add up to another number."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from app.core.paths import sample_document
from tests.cli.runner import run_here
from tests.cut_texts import CUT_INSIDE


def _ok(*argv: str) -> tuple[list[dict[str, Any]], str]:
    done = run_here(*argv)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")], (
        done.stdout + done.stderr
    )


def _count(path: Path) -> int:
    (data,), _ = _ok("count", str(path), "--json")
    return int(data["tokens_model"])


@pytest.mark.parametrize("n_ctx", [2048, 4096])
def test_plan_says_the_total_count_says(n_ctx: int) -> None:
    doc = sample_document()
    whole = _count(doc)
    (plan,), _ = _ok("plan", str(doc), "--strategy", "head", "--n-ctx", str(n_ctx), "--json")
    assert plan["document_tokens"] == whole
    assert plan["total_tokens"] != whole, "the chunks add up to the count: the test shows nothing"
    _, said = _ok("plan", str(doc), "--strategy", "head", "--n-ctx", str(n_ctx))
    kept, total = re.search(r"kept ([\d,]+) of ([\d,]+) tokens", said).groups()  # type: ignore[union-attr]
    assert int(total.replace(",", "")) == whole
    assert int(kept.replace(",", "")) == plan["kept_tokens"] <= plan["budget"]


def test_a_runs_plan_line_says_the_total_count_says(tmp_path: Path) -> None:
    doc = tmp_path / "hostile.txt"
    doc.write_text(CUT_INSIDE, encoding="utf-8")
    whole = _count(doc)
    job = ("--strategies", "head,entropy", "--n-ctx", "256", "--max-tokens", "1")
    (entropy,), _ = _ok("plan", str(doc), "--strategy", "entropy", *job[2:], "--json")
    assert entropy["total_tokens"] != whole, "no cut changed the count: the test shows nothing"
    _, said = _ok("compare", str(doc), *job, "--db", str(tmp_path / "h.db"))
    totals = re.findall(r"plan \w+: [\d,]+ of ([\d,]+) tokens reach the model", said)
    assert [int(t.replace(",", "")) for t in totals] == [whole, whole], said
    table = re.findall(r"\s[\d,]+/([\d,]+)\s*$", said, re.MULTILINE)
    assert [int(t.replace(",", "")) for t in table] == [whole, whole], said
