"""contextlens-cli at the context's edges, as a user runs it: the exit code, and one sentence with
the numbers on stderr (and in ``--json``), never a traceback.

Prompts at the exact budget and one token past it, reply reserves of 0 and of the whole context,
an n_ctx below llama.cpp's smallest, above the model's training context and too large for
memory, a budget smaller than one sentence. The 5 MB one-line documents (``plan``, ``count`` and
a ``run`` of head) are in the SLOW=1 set. Documents are real text from tests/data cut to the
token (tests/edge_docs.py).
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.core.planning.frame import model_frame
from app.core.planning.retrieve import NEEDS_QUESTION
from app.core.planning.strategies import MULTI_PASS, QUESTION_STRATEGIES, STRATEGIES
from app.core.tokens import TokenCounter
from tests.cli.runner import assert_one_line_error, run
from tests.edge_cases import Edges
from tests.edge_docs import LONG_SENTENCE, ONE_LINE_KINDS, one_line, text_of_tokens

N_CTX = 256
SUMMARIZE = "Summarize the document."  # the single-pass summary's instruction (app.core.jobs.tasks)
TRAIN_CTX = 8192


@pytest.fixture(scope="module")
def frame(model_path: Path, gguf_counter: TokenCounter) -> int:
    """Tokens of the summary prompt around the document."""
    return model_frame(model_path, task=SUMMARIZE).tokens(gguf_counter)


def _file(folder: Path, text: str, name: str = "doc.txt") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _job(doc: Path, db: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run("run", str(doc), "--task", "summarize", "--db", str(db), "--json", *args,
               timeout=timeout)  # fmt: skip


def _lines(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def _numbers(text: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)]


# ----- reply reserves ----------------------------------------------------------------------------


def test_a_reply_reserve_of_zero_is_bad_input_in_one_line(tmp_path: Path, edges: Edges) -> None:
    doc, db = _file(tmp_path, LONG_SENTENCE), str(tmp_path / "h.db")
    for args in (
        ("run", str(doc), "--strategy", "head", "--max-tokens", "0", "--db", db),
        ("generate", "--prompt", "Hello", "--max-tokens", "0"),
    ):
        proc = run(*args)
        assert proc.returncode == 2, proc.stderr
        assert_one_line_error(proc)
        assert "--max-tokens must be at least 1" in proc.stderr
        edges.add("reply reserve", "rejected")
    proc = run("run", str(doc), "--strategy", "head", "--max-tokens", "0", "--json", "--db", db)
    (line,) = _lines(proc)
    assert line == {"type": "error", "exit_code": 2, "message": "--max-tokens must be at least 1"}


def test_a_reply_reserve_of_the_whole_context_is_refused_with_the_numbers(
    tmp_path: Path, frame: int, edges: Edges
) -> None:
    doc = _file(tmp_path, LONG_SENTENCE)
    proc = _job(doc, tmp_path / "h.db", "--strategy", "head", "--n-ctx", str(N_CTX),
                "--max-tokens", str(N_CTX))  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert_one_line_error(proc)
    sentence = f"prompt needs {frame + 1:,} tokens, context is {N_CTX:,} (reply reserve {N_CTX:,})"
    assert proc.stderr.strip() == f"error: refused: {sentence}"
    done = _lines(proc)[-1]
    assert done["type"] == "done" and done["refused"] == sentence
    assert done["prompt_tokens"] == 0 and done["completion_tokens"] == 0
    edges.add("reply reserve", "refused")


# ----- prompts at the edge of the context --------------------------------------------------------


@pytest.mark.parametrize(
    "past", [pytest.param(0, marks=pytest.mark.slow), 1], ids=["at the budget", "one past it"]
)
def test_refuse_runs_at_the_exact_budget_and_refuses_one_token_past_it(
    tmp_path: Path, gguf_counter: TokenCounter, frame: int, past: int, edges: Edges
) -> None:
    """A reply of one token: a document of exactly the budget fills the context to its last
    cell (exit 0); one token more exits 4 with the document's tokens and the budget."""
    budget = N_CTX - frame - 1
    doc = _file(tmp_path, text_of_tokens(gguf_counter, budget + past))
    proc = _job(doc, tmp_path / "h.db", "--strategy", "refuse", "--n-ctx", str(N_CTX),
                "--max-tokens", "1")  # fmt: skip
    done = _lines(proc)[-1]
    if not past:
        assert proc.returncode == 0, proc.stderr
        # one token, unless the model's first is its end (greedy text is per machine)
        assert done["prompt_tokens"] == N_CTX - 1 and done["completion_tokens"] <= 1
        assert done["kv_peak_cells"] <= N_CTX == done["n_ctx"] and not done["truncated"]
        edges.add("prompt at the context's edge", "worked")
        return
    assert proc.returncode == 4, proc.stderr
    assert_one_line_error(proc)
    numbers = f"the document's chunks need {budget + 1:,} tokens; the budget is {budget:,}"
    assert numbers in done["refused"] and done["refused"] in proc.stderr
    assert done["completion_tokens"] == 0
    edges.add("prompt at the context's edge", "refused")


def test_plan_refuse_names_the_whole_prompt_and_the_context(
    tmp_path: Path, gguf_counter: TokenCounter, frame: int, edges: Edges
) -> None:
    budget = N_CTX - frame - 1
    doc = _file(tmp_path, text_of_tokens(gguf_counter, budget + 1))
    proc = run("plan", str(doc), "--strategy", "refuse", "--n-ctx", str(N_CTX), "--reserve", "1")
    assert proc.returncode == 4, proc.stderr
    assert_one_line_error(proc)
    assert proc.stderr.strip() == (  # the prompt is the whole context: no room for the reply
        f"error: refused: prompt needs {N_CTX:,} tokens, context is {N_CTX:,} "
        f"(reply reserve 1): the document's chunks need {budget + 1:,} tokens; "
        f"the budget is {budget:,}"
    )
    edges.add("prompt at the context's edge", "refused")


@pytest.mark.slow
def test_plan_with_a_reply_reserve_of_zero_fits_one_token_more(
    tmp_path: Path, gguf_counter: TokenCounter, frame: int, edges: Edges
) -> None:
    doc = _file(tmp_path, text_of_tokens(gguf_counter, N_CTX - frame))
    proc = run("plan", str(doc), "--strategy", "refuse", "--n-ctx", str(N_CTX), "--reserve", "0",
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (p,) = _lines(proc)
    assert p["reserve"] == 0 and p["kept_tokens"] == p["budget"] == N_CTX - frame
    edges.add("reply reserve", "planned")


# ----- the context size --------------------------------------------------------------------------


@pytest.mark.slow
def test_an_n_ctx_below_llama_cpps_smallest_runs_in_the_real_one(
    tmp_path: Path, edges: Edges
) -> None:
    doc = _file(tmp_path, LONG_SENTENCE)
    proc = _job(doc, tmp_path / "h.db", "--strategy", "head", "--n-ctx", "16", "--max-tokens", "1")
    assert proc.returncode == 0, proc.stderr
    done = _lines(proc)[-1]
    assert done["n_ctx"] == N_CTX, "the context llama.cpp made, not the one asked for"
    assert done["prompt_tokens"] + done["completion_tokens"] <= N_CTX
    assert 0 < done["kv_peak_cells"] <= N_CTX
    edges.add("n_ctx below the smallest", "worked")


def test_an_n_ctx_below_the_smallest_the_app_accepts_is_bad_input(
    tmp_path: Path, edges: Edges
) -> None:
    doc = _file(tmp_path, LONG_SENTENCE)
    proc = _job(doc, tmp_path / "h.db", "--strategy", "head", "--n-ctx", "15")
    assert proc.returncode == 2, proc.stderr
    assert_one_line_error(proc)
    assert _lines(proc)[-1]["message"] == "n_ctx must be at least 16 (got 15)"
    edges.add("n_ctx below the smallest", "rejected")


@pytest.mark.parametrize("command", ["run", "generate"])
@pytest.mark.parametrize("n_ctx", [10_000_000, pytest.param(2**30, marks=pytest.mark.slow)])
def test_a_context_too_large_for_memory_exits_4_before_loading(
    tmp_path: Path, command: str, n_ctx: int, edges: Edges
) -> None:
    doc = _file(tmp_path, LONG_SENTENCE)
    if command == "run":
        args = ["run", str(doc), "--strategy", "head", "--db", str(tmp_path / "h.db")]
    else:
        args = ["generate", "--prompt", "Hello"]
    proc = run(*args, "--n-ctx", str(n_ctx), "--json")
    assert proc.returncode == 4, proc.stderr
    assert_one_line_error(proc)
    (line,) = _lines(proc)
    assert line["type"] == "error" and line["exit_code"] == 4
    message = line["message"]
    assert message.startswith(f"does not fit: a context of {n_ctx:,} tokens needs about ")
    assert "KV cache" in message and "GiB" in message and "of memory is free" in message
    edges.add("n_ctx over memory", "refused")


def test_generate_above_the_training_context_warns_and_runs(edges: Edges) -> None:
    n_ctx = 2 * TRAIN_CTX
    proc = run("generate", "--prompt", "Hello", "--max-tokens", "1", "--n-ctx", str(n_ctx),
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warning = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and f"{n_ctx:,}" in warning[0] and f"{TRAIN_CTX:,}" in warning[0]
    assert _lines(proc)[-1]["type"] == "done"
    edges.add("n_ctx over the training context", "worked")


def test_run_above_the_training_context_warns_and_runs(tmp_path: Path, edges: Edges) -> None:
    """The load's warning reaches the person running a job too (stderr, and a ``warning`` line
    with --json)."""
    n_ctx = 2 * TRAIN_CTX
    doc = _file(tmp_path, LONG_SENTENCE)
    proc = _job(doc, tmp_path / "h.db", "--strategy", "head", "--n-ctx", str(n_ctx),
                "--max-tokens", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _lines(proc)[-1]["n_ctx"] == n_ctx
    warning = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and f"{TRAIN_CTX:,}" in warning[0], proc.stderr
    assert {"type": "warning", "message": warning[0].removeprefix("warning: ")} in _lines(proc)
    edges.add("n_ctx over the training context", "worked")


# ----- a budget smaller than one sentence --------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["n_ctx 16", pytest.param("reserve n_ctx", marks=pytest.mark.slow),
     pytest.param("budget 0", marks=pytest.mark.slow)],
)  # fmt: skip
def test_plan_without_room_for_the_document_exits_4_with_the_numbers(
    tmp_path: Path, frame: int, case: str, edges: Edges
) -> None:
    n_ctx, reserve = {"n_ctx 16": (16, 256), "reserve n_ctx": (N_CTX, N_CTX),
                      "budget 0": (frame + 3, 3)}[case]  # fmt: skip
    doc = _file(tmp_path, LONG_SENTENCE)
    args = ["plan", str(doc), "--strategy", "all", "--n-ctx", str(n_ctx)]
    if case != "n_ctx 16":  # there the default reserve: run's reply room (--max-tokens 256)
        args += ["--reserve", str(reserve)]
    proc = run(*args)
    assert proc.returncode == 4, proc.stderr
    assert_one_line_error(proc)
    assert proc.stderr.strip() == (
        f"error: no room for the document: prompt needs {frame + 1:,} tokens, context is "
        f"{n_ctx:,} (reply reserve {reserve:,})"
    )
    edges.add("budget under a sentence", "refused")


@pytest.mark.parametrize("budget", [pytest.param(1, marks=pytest.mark.slow), 5])
def test_plan_with_a_budget_smaller_than_one_sentence_cuts_inside_it_and_says_so(
    tmp_path: Path, gguf_counter: TokenCounter, frame: int, budget: int, edges: Edges
) -> None:
    doc = _file(tmp_path, LONG_SENTENCE)
    total = gguf_counter.count(LONG_SENTENCE)
    n_ctx = frame + 2 + budget
    proc = run("plan", str(doc), "--strategy", "all", "--n-ctx", str(n_ctx), "--reserve", "2",
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plans = {p["strategy"]: p for p in _lines(proc)}
    assert set(plans) == set(STRATEGIES)
    for name, p in plans.items():
        assert p["n_ctx"] == n_ctx and p["exact"] is True and p["total_tokens"] >= total
        # a multi-pass strategy plans beside its own, longer window prompt, as its run does
        assert p["budget"] == budget if name not in MULTI_PASS else p["budget"] <= budget
        assert p["peak_tokens"] <= p["budget"]
        if p["budget"] == 0:  # that prompt alone fills the context: refused, as run would
            assert re.fullmatch(r"prompt needs [\d,]+ tokens, context is [\d,]+ \(reply "
                                r"reserve 2\)", p["refused"]) and p["kept"] == []  # fmt: skip
            edges.add("budget under a sentence", "refused")
            continue
        spans = sorted(p["kept"] + p["dropped"], key=lambda s: s["start"])
        assert spans[0]["start"] == 0 and spans[-1]["end"] == len(LONG_SENTENCE)
        if name == "refuse":
            assert p["refused"] and _numbers(p["refused"]) == [p["total_tokens"], budget]
            edges.add("budget under a sentence", "refused")
            continue
        if name in QUESTION_STRATEGIES:  # `all` without --question: said in its plan
            assert p["refused"] == NEEDS_QUESTION and p["kept"] == []
            edges.add("budget under a sentence", "refused")
            continue
        assert p["refused"] is None
        if name in MULTI_PASS:
            assert len(p["windows"]) >= 2 and p["boundary_integrity"] < 1
        elif p["kept"]:
            assert p["dropped"] and p["boundary_integrity"] < 1
        edges.add("budget under a sentence", "planned")


# ----- a document of one 5 MB line (SLOW=1) ------------------------------------------------------


@pytest.fixture(scope="module")
def line_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("lines")
    return {kind: _file(folder, one_line(kind), f"{kind}.txt") for kind in ONE_LINE_KINDS}


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", ONE_LINE_KINDS)
def test_plan_every_strategy_on_a_5_mb_line(
    line_files: dict[str, Path], kind: str, edges: Edges
) -> None:
    text = one_line(kind)
    proc = run("plan", str(line_files[kind]), "--strategy", "all", "--n-ctx", str(N_CTX),
               "--reserve", "2", "--question", "Who calls himself Ishmael?", "--json",
               timeout=1700)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plans = _lines(proc)
    assert [p["strategy"] for p in plans] == list(STRATEGIES)
    for p in plans:
        assert p["peak_tokens"] <= p["budget"] < p["total_tokens"]
        spans = sorted(p["kept"] + p["dropped"], key=lambda s: s["start"])
        assert spans[0]["start"] == 0 and spans[-1]["end"] == len(text)
        assert all(a["end"] == b["start"] for a, b in itertools.pairwise(spans))
        assert (p["refused"] is not None) == (p["strategy"] == "refuse")
        edges.add("5 MB line", "planned")


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", ONE_LINE_KINDS)
def test_count_a_5_mb_line(
    line_files: dict[str, Path], gguf_counter: TokenCounter, kind: str, edges: Edges
) -> None:
    proc = run("count", str(line_files[kind]), "--json", timeout=1700)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["bytes"] == len(one_line(kind).encode("utf-8")) and data["format"] == "text"
    assert data["tokens_model"] == gguf_counter.count(one_line(kind))
    edges.add("5 MB line", "worked")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_run_head_on_a_5_mb_line(
    line_files: dict[str, Path], tmp_path: Path, edges: Edges
) -> None:
    proc = _job(line_files["words"], tmp_path / "h.db", "--strategy", "head", "--n-ctx",
                str(N_CTX), "--max-tokens", "2", timeout=1700)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    done = _lines(proc)[-1]
    assert done["truncated"] and done["kv_peak_cells"] <= N_CTX
    assert done["prompt_tokens"] + done["completion_tokens"] <= N_CTX
    edges.add("5 MB line", "worked")
