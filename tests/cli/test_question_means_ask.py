"""A `--question` without `--task` is asked (issue 49, row 14): `run` and `plan` under
`retrieve` once refused it with "retrieve needs a question" because `--task` defaulted to
summarize, which drops the question. A task named with a text it does not use is refused in one
sentence that names the conflict, before anything is read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK
from app.core.paths import sample_document
from tests.cli.runner import assert_one_line_error, run

QUESTION = "What is a kluge?"


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def jargon_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Jargon File's first 60,000 characters ("kluge" is among them)."""
    path = tmp_path_factory.mktemp("docs") / "jargon-start.txt"
    path.write_text(sample_document().read_text(encoding="utf-8")[:60_000], encoding="utf-8")
    return path


def test_run_with_a_question_and_no_task_asks_it(jargon_start: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    proc = run("run", str(jargon_start), "--strategy", "retrieve", "--question", QUESTION,
               "--n-ctx", "1024", "--max-tokens", "8", "--db", str(db), "--json")  # fmt: skip
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = _lines(proc.stdout)
    assert [e["question"] for e in lines if e["type"] == "plan_ready"] == [QUESTION]
    done = lines[-1]
    assert done["type"] == "done" and done["task"] == "ask"
    (version,) = done["recorded"]["versions"]
    shown = run("snapshots", "show", str(version), "--db", str(db), "--json")
    assert shown.returncode == EXIT_OK, shown.stderr
    recorded = json.loads(shown.stdout)
    assert recorded["task"] == "ask" and recorded["prompt"] == QUESTION


def test_plan_with_a_question_and_no_task_ranks_against_it(jargon_start: Path) -> None:
    proc = run("plan", str(jargon_start), "--strategy", "retrieve", "--question", QUESTION,
               "--n-ctx", "1024", "--json")  # fmt: skip
    assert proc.returncode == EXIT_OK, proc.stderr
    (plan,) = _lines(proc.stdout)
    assert plan["task"] == "ask" and plan["question"] == QUESTION
    assert any("kluge" in s["terms"] for s in plan["kept"] if s["next_to"] is None)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--task", "summarize", "--question", QUESTION],
         "--task summarize does not use --question: use --task ask to ask it, or leave "
         "--question out"),
        (["--task", "extract", "--question", QUESTION, "--instruction", "List the terms."],
         "--task extract does not use --question: use --task ask to ask it, or leave "
         "--question out"),
        (["--task", "ask", "--question", QUESTION, "--instruction", "List the terms."],
         "--task ask does not use --instruction: use --task extract to extract with it, or "
         "leave --instruction out"),
        (["--question", QUESTION, "--instruction", "List the terms."],
         "--question is for ask and --instruction for extract: give one of them"),
    ],
    ids=["summarize-question", "extract-question", "ask-instruction", "question-instruction"],
)  # fmt: skip
@pytest.mark.parametrize("command", ["run", "plan", "compare", "batch"])
def test_a_text_the_task_does_not_use_is_refused_in_one_sentence(
    tmp_path: Path, command: str, flags: list[str], message: str
) -> None:
    strategy = ["--strategies", "head,retrieve"] if command == "compare" else [
        "--strategy", "retrieve"]  # fmt: skip
    target = tmp_path if command == "batch" else tmp_path / "not-read.txt"
    context = ["--n-ctx", "1024"] if command == "plan" else ["--db", str(tmp_path / "h.db")]
    proc = run(command, str(target), *strategy, *flags, *context)
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert_one_line_error(proc)
    assert proc.stderr.strip() == f"error: {message}"
    assert not (tmp_path / "h.db").exists()  # refused before the history was opened
