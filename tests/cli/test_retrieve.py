"""`contextlens-cli` with the `retrieve` strategy, as a person runs it: `plan --json` prints kept
spans with their score and rank (one plan per question), a fact planted 300k tokens deep in the
Jargon File is kept at a 2,048-token context, `retrieve` without a question exits 2 in one
sentence before anything is read or recorded (plan, run, compare alike), and `run --task ask
--strategy retrieve --audit` on the default model passes with one plan per question."""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK
from app.core.default_model import default_model_path
from app.core.jobs.job_setup import question_text
from app.core.paths import sample_document
from app.core.planning.retrieve import NEEDS_QUESTION
from app.core.tokens import gguf_encoding
from tests.cli.runner import assert_one_line_error, run

FACT = "At the Vostrikov labs the spare coffee grinder was kept in locker 7204, behind the tape "
FACT += "drives."
QUESTION = "In which locker did the Vostrikov staff store their extra grinder for coffee?"


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def planted_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Jargon File (~405k tokens) with :data:`FACT` as a paragraph ~300k tokens in."""
    text = sample_document().read_text(encoding="utf-8")
    at = text.index("\n\n", int(len(text) * 0.74)) + 1
    path = tmp_path_factory.mktemp("docs") / "jargon-planted.txt"
    path.write_text(f"{text[:at]}\n   {FACT}\n{text[at:]}", encoding="utf-8")
    return path


def test_plan_json_prints_scored_spans_one_plan_per_question(planted_file: Path) -> None:
    second = "What does the word kludge mean?"
    proc = run("plan", str(planted_file), "--strategy", "retrieve", "--task", "ask", "--question",
               QUESTION, "--question", second, "--n-ctx", "2048", "--needle", FACT, "--json",
               timeout=300)  # fmt: skip
    assert proc.returncode == EXIT_OK, proc.stderr
    plans = _lines(proc.stdout)
    assert [p["question"] for p in plans] == [QUESTION, second]
    text = planted_file.read_text(encoding="utf-8")
    for p in plans:
        assert p["strategy"] == "retrieve" and p["exact"] is True and p["refused"] is None
        assert p["total_tokens"] > 400_000 and p["peak_tokens"] == p["kept_tokens"] <= p["budget"]
        spans = sorted(p["kept"] + p["dropped"], key=lambda s: s["start"])
        assert spans[0]["start"] == 0 and spans[-1]["end"] == len(text)
        assert all(a["end"] == b["start"] for a, b in itertools.pairwise(spans))
        assert [s["start"] for s in p["kept"]] == sorted(s["start"] for s in p["kept"])
        for s in p["kept"]:  # each kept span says why, in figures
            assert isinstance(s["score"], float) and s["score"] >= 0
            if s["next_to"] is None:  # a sentence of a match, with the words it holds
                assert isinstance(s["rank"], int) and s["rank"] >= 1 and s["terms"]
                assert s["reason"].startswith("sentence ")
                assert f" of the part ranked {s['rank']:,} (score " in s["reason"]
            else:  # a sentence a match leans on, or the text under a heading
                assert (f", for the part ranked {s['next_to']:,}: " in s["reason"]
                        or s["reason"] == f"the text under the heading ranked {s['next_to']:,} "
                                          "starts here")  # fmt: skip
        assert 1 in [s["rank"] for s in p["kept"]]
    deep, other = plans
    assert deep["needle_retention"] == 1.0  # the fact 300k tokens deep reaches the model
    holder = next(s for s in deep["kept"] if s["start"] <= text.index(FACT) < s["end"])
    assert holder["rank"] == 1 and "vostrikov" in holder["terms"]
    assert other["needle_retention"] == 0.0 and other["kept"] != deep["kept"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "--n-ctx", "2048"], NEEDS_QUESTION),
        (["plan", "--n-ctx", "2048", "--question", "  "], NEEDS_QUESTION),
        (["run"], NEEDS_QUESTION),  # a summary has no question
        (["run", "--task", "ask"], "ask needs at least one question"),
        (["compare", "--strategies", "head,retrieve"], NEEDS_QUESTION),
    ],
)
def test_retrieve_without_a_question_exits_2_and_records_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    command, *rest = args
    db = tmp_path / "h.db"
    strategy = [] if command == "compare" else ["--strategy", "retrieve"]
    history = [] if command == "plan" else ["--db", str(db)]  # plan records nothing
    proc = run(command, str(tmp_path / "not-read.txt"), *strategy, *rest, *history)
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert_one_line_error(proc)
    assert proc.stderr.strip() == f"error: {message}"
    assert not db.exists()  # refused before the document was read or the history opened


def test_run_ask_with_retrieve_passes_the_audit_one_plan_per_question(tmp_path: Path) -> None:
    doc = tmp_path / "jargon-part.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:150_000], encoding="utf-8")
    questions = ["Who edited the Jargon File?", "What is a hacker?"]
    db = tmp_path / "h.db"
    proc = run("run", str(doc), "--task", "ask", "--strategy", "retrieve", "--question",
               questions[0], "--question", questions[1], "--n-ctx", "1024", "--max-tokens", "8",
               "--db", str(db), "--audit", "--json", timeout=600)  # fmt: skip
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = _lines(proc.stdout)
    ready = [e for e in lines if e["type"] == "plan_ready"]
    assert [e["question"] for e in ready] == questions
    assert all(e["strategy"] == "retrieve" and 0 < e["kept_tokens"] <= e["budget"] for e in ready)
    done, audit = lines[-2], lines[-1]
    assert done["type"] == "done" and done["finish_reason"] in ("stop", "length")
    assert done["truncated"] is True and [o["step"] for o in done["outputs"]] == [
        "answer 1", "answer 2"]  # fmt: skip
    assert done["plan"]["question"] == questions[-1]
    assert audit["type"] == "audit" and audit["passed"] is True, audit["findings"]
    assert audit["counts"]["calls"] == 2 and audit["counts"]["chunks"] >= 2
    evaluated = {(e["start"], e["end"]) for e in lines if e["type"] == "chunk_evaluated"}
    sources = {tuple(s) for o in done["outputs"] for s in o["source_spans"]}
    assert sources == evaluated  # each answer names the chunks of its own question's plan
    assert done["recorded"] is not None and len(done["recorded"]["versions"]) == 1
    with sqlite3.connect(db) as con:
        [(strategy,)] = con.execute("SELECT strategy FROM runs").fetchall()
    assert strategy == "retrieve"
    assert "audit passed: 1 job(s), 2 model call(s)" in proc.stderr


def test_a_second_question_in_one_ask_evaluates_only_what_is_not_resident(tmp_path: Path) -> None:
    """`run --task ask --strategy retrieve` with two questions whose plans share chunks: the
    shared ones stay in llama.cpp's cache (ring order), the others leave, and the second call
    evaluates at most 1.1x the tokens of its new chunks, its question and the frame's end; the
    audit passes after the evictions."""
    text = sample_document().read_text(encoding="utf-8")[:60_000]
    doc = tmp_path / "jargon-start.txt"
    doc.write_text(text, encoding="utf-8")
    questions = ["What is jargon?", "How does jargon differ from techspeak?"]
    proc = run("run", str(doc), "--task", "ask", "--strategy", "retrieve", "--question",
               questions[0], "--question", questions[1], "--n-ctx", "1024", "--max-tokens", "8",
               "--audit", "--json", timeout=300)  # fmt: skip
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = _lines(proc.stdout)
    done, audit = lines[-2], lines[-1]
    assert audit["passed"] is True, audit["findings"]
    assert audit["counts"]["evictions"] >= 1 and done["evictions"] == audit["counts"]["evictions"]
    first, second = ([tuple(s) for s in o["source_spans"]] for o in done["outputs"])
    shared = [s for s in second if s in first]
    assert shared and second[: len(shared)] == shared  # resident first, where they were
    new = [e for e in lines if e["type"] == "chunk_queued" and e["step"] == "answer 2"]
    assert {(e["start"], e["end"]) for e in new} == set(second) - set(first)
    unshared = sum(e["tokens"] for e in new)
    asked = gguf_encoding(default_model_path()).count(question_text(questions[1]))
    # what llama.cpp evaluates of each call's prompt (the cache holds the rest), as it said
    totals = {e["step"]: e["total"] for e in lines if e["type"] == "eval_progress"}
    evaluated = totals["answer 2"]
    assert totals["answer 1"] + evaluated <= done["prompt_tokens_evaluated"]
    # the frame's end: SmolLM2's "<|im_end|>\n<|im_start|>assistant\n" (5 tokens), and the
    # prompt's last token evaluated again with the reply
    assert evaluated <= 1.1 * (unshared + asked + 6), (evaluated, unshared, asked)
    # the shared chunks are in the second call's prompt and not evaluated again
    queued = {(e["start"], e["end"]): e["tokens"] for e in lines
              if e["type"] == "chunk_queued" and e["step"] == "answer 1"}  # fmt: skip
    kept_warm = sum(queued[s] for s in shared)
    assert kept_warm > 0
    assert evaluated <= done["prompt_tokens"] - totals["answer 1"] - kept_warm
