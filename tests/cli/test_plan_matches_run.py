"""`plan` shows the budget `run` executes: for the same document, model, task and context size,
each strategy's plan from `contextlens-cli plan --json` has the budget, reply reserve and kept
tokens of the `plan_ready` event the job sends (both plan through app.services.jobs: the same
instruction, chat-template frame and reply room). Tested at 1,024, 2,048 and 8,192 tokens, for
a summary (head, rolling: rolling keeps room for its running summary) and a question (retrieve,
ranked against it), in-process through the CLI's own `main` (tests/cli/runner.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.core.paths import sample_document
from tests.cli.runner import run_here

QUESTION = "What is a kludge?"
REPLY = 16  # the reply room both plan beside (short: the budgets are checked, not the replies)
# (task options, strategies): a summary and a question, each as `run`/`compare` takes them
JOBS = [
    (["--task", "summarize"], ["head", "rolling"]),
    (["--task", "ask", "--question", QUESTION], ["retrieve"]),
]


@pytest.fixture(scope="module")
def jargon_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 1,130 tokens of the Jargon File: cut at 1,024, whole at 2,048 and 8,192 (short:
    each size runs three strategies)."""
    text = sample_document().read_text(encoding="utf-8")
    path = tmp_path_factory.mktemp("docs") / "jargon-start.txt"
    path.write_text(text[: text.index("\n", 4_800)], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def brief(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 400 tokens: whole at every size, for the sizes where the budget is all that
    differs (the run costs the document's tokens, three times)."""
    text = sample_document().read_text(encoding="utf-8")
    path = tmp_path_factory.mktemp("docs") / "jargon-brief.txt"
    path.write_text(text[: text.index("\n", 1_600)], encoding="utf-8")
    return path


def _json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _cli(*argv: str) -> list[dict[str, Any]]:
    done = run_here(*argv)
    assert done.returncode == 0, done.stderr
    return _json_lines(done.stdout)


@pytest.mark.parametrize("n_ctx", [1024, 2048, 8192])
def test_plan_reports_the_budget_run_executes(
    jargon_start: Path, brief: Path, tmp_path: Path, n_ctx: int
) -> None:
    document = jargon_start
    if n_ctx > 1024:  # the document is whole here either way: the shorter one runs sooner
        document = brief
    for task, strategies in JOBS:
        shown = {}
        for name in strategies:
            (plan,) = _cli("plan", str(document), "--strategy", name, "--n-ctx",
                           str(n_ctx), *task, "--max-tokens", str(REPLY), "--json")  # fmt: skip
            shown[plan["strategy"]] = plan
        events = _cli("compare", str(document), "--strategies", ",".join(strategies),
                      "--n-ctx", str(n_ctx), *task, "--max-tokens", str(REPLY),
                      "--db", str(tmp_path / "h.db"), "--json")  # fmt: skip
        ran = {e["strategy"]: e for e in events if e["type"] == "plan_ready"}
        assert set(ran) == set(shown) == set(strategies)
        for name in strategies:
            plan, ready = shown[name], ran[name]
            assert plan["refused"] is None
            assert plan["budget"] == ready["budget"] == (
                n_ctx - plan["template_tokens"] - plan["reserve"]
            ), (name, plan, ready)
            assert plan["kept_tokens"] == ready["kept_tokens"]
            assert plan["total_tokens"] == ready["total_tokens"]
        reserves = {name: shown[name]["reserve"] for name in strategies}
        if "rolling" in reserves:  # room for the running summary next to each window
            assert reserves["rolling"] == 2 * REPLY + 16 and reserves["head"] == REPLY
        if n_ctx == 1024 and "head" in shown:  # the document is cut here, whole above
            assert shown["head"]["kept_tokens"] < shown["head"]["total_tokens"]


def test_plan_and_run_read_task_and_max_tokens_the_same_way(jargon_start: Path) -> None:
    (default,) = _cli("plan", str(jargon_start), "--strategy", "head", "--n-ctx", "2048",
                      "--json")  # fmt: skip
    (short,) = _cli("plan", str(jargon_start), "--strategy", "head", "--n-ctx", "2048",
                    "--max-tokens", "64", "--json")  # fmt: skip
    assert default["task"] == "summarize" and default["reserve"] == 256  # run's default reply
    assert short["reserve"] == 64 and short["budget"] == default["budget"] + 192
    # a task that is not a task is refused as run refuses it, in one sentence
    refused = run_here("plan", str(jargon_start), "--strategy", "head", "--n-ctx", "2048", "--task",
                       "Summarize the document.")  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "error: unknown task 'Summarize the document.' (choose one of summarize, ask, extract)"
    )
