"""contextlens-cli count / plan / chunk as a user runs them: real files, real exit codes."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.paths import sample_document
from app.core.planning.retrieve import NEEDS_QUESTION
from app.core.tokens import gguf_encoding
from tests.cli.runner import assert_one_line_error, run

DATA = Path(__file__).resolve().parents[1] / "data"


def test_count_json_exact_and_estimate(model_path: Path) -> None:
    doc = DATA / "chinese-gbk.txt"
    proc = run("count", str(doc), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    text = doc.read_bytes().decode("gb18030")
    assert data["bytes"] == doc.stat().st_size and data["chars"] == len(text)
    assert data["encoding"] in ("gbk", "gb18030")
    assert data["tokens_model"] == gguf_encoding(model_path).count(text)
    assert data["tokens_cl100k"] > 0 and data["seconds"] >= 0


def test_count_without_a_model_gives_the_estimate_only(tmp_path: Path) -> None:
    env_models = tmp_path / "no-models"
    env_models.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "count", str(DATA / "sample.md"), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "CONTEXTLENS_MODELS": str(env_models)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["tokens_model"] is None and data["tokens_cl100k"] > 0


def test_plan_json_contract(model_path: Path) -> None:
    proc = run("plan", str(DATA / "sample.pdf"), "--n-ctx", "512", "--reserve", "64",
               "--strategy", "head", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("strategy", "budget", "kept", "dropped", "kept_tokens", "total_tokens",
                "boundary_integrity", "seconds"):  # fmt: skip
        assert key in data
    assert data["strategy"] == "head" and data["exact"] is True
    assert data["budget"] == 512 - 64 - data["template_tokens"]
    assert data["kept_tokens"] <= data["budget"] < data["total_tokens"]
    for span in data["kept"] + data["dropped"]:
        assert set(span) == {"start", "end", "tokens", "reason"}
    assert data["kept"][0]["start"] == 0


def test_plan_reports_needle_retention(model_path: Path) -> None:
    proc = run("plan", str(DATA / "sample.pdf"), "--n-ctx", "400", "--reserve", "64",
               "--strategy", "all", "--json", "--needle", "Four score and seven years ago",
               "--needle", "We the People")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plans = {p["strategy"]: p for p in map(json.loads, proc.stdout.splitlines())}
    assert plans["map-reduce"]["needle_retention"] == 1.0
    assert plans["head"]["needle_retention"] < 1.0
    missing = run("plan", str(DATA / "sample.pdf"), "--n-ctx", "400", "--strategy", "head",
                  "--needle", "not in this document")  # fmt: skip
    assert missing.returncode == 2
    assert_one_line_error(missing)


def test_plan_all_prints_one_plan_per_strategy(model_path: Path) -> None:
    proc = run("plan", str(DATA / "sample.html"), "--n-ctx", "300", "--reserve", "32",
               "--strategy", "all", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plans = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [p["strategy"] for p in plans] == ["refuse", "head", "tail", "middle", "rolling",
                                              "semantic", "entropy", "map-reduce",
                                              "retrieve"]  # fmt: skip
    for p in plans:
        assert p["peak_tokens"] <= p["budget"]
    # retrieve without a question: its plan says what it needs (`--strategy retrieve` exits 2)
    assert plans[-1]["refused"] == NEEDS_QUESTION and plans[-1]["kept"] == []


def test_plan_refuse_exits_4_with_the_numbers(model_path: Path) -> None:
    proc = run("plan", str(DATA / "sample.docx"), "--n-ctx", "128", "--reserve", "16",
               "--strategy", "refuse")  # fmt: skip
    assert proc.returncode == 4
    assert_one_line_error(proc)
    assert "tokens; the budget is" in proc.stderr


def test_plan_default_reserve_is_the_reply_run_keeps_room_for(model_path: Path) -> None:
    proc = run("plan", str(DATA / "sample.md"), "--n-ctx", "400", "--strategy", "tail", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["reserve"] == 256  # run's --max-tokens default


def test_plan_with_no_room_for_the_document_exits_4(model_path: Path) -> None:
    proc = run("plan", str(DATA / "sample.md"), "--n-ctx", "64", "--reserve", "60",
               "--strategy", "head")  # fmt: skip
    assert proc.returncode == 4
    assert_one_line_error(proc)
    assert "context is 64 (reply reserve 60)" in proc.stderr


def test_chunk_json_with_overlap(model_path: Path) -> None:
    proc = run("chunk", str(DATA / "sample.py"), "--max-tokens", "80", "--overlap", "0.25",
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    chunks = data["chunks"]
    assert len(chunks) > 3 and all(c["tokens"] <= 80 for c in chunks)
    assert any(b["start"] < a["end"] for a, b in itertools.pairwise(chunks))


def test_chunk_human_output(model_path: Path) -> None:
    proc = run("chunk", str(DATA / "sample.md"), "--max-tokens", "50")
    assert proc.returncode == 0, proc.stderr
    assert "chunks of at most 50 tokens" in proc.stdout


BAD = sorted((DATA / "bad").iterdir())


@pytest.mark.parametrize("path", BAD, ids=[p.name for p in BAD])
def test_bad_documents_exit_2_with_one_line(path: Path) -> None:
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    for args in (["count", str(path)], ["chunk", str(path), "--max-tokens", "50"]):
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert_one_line_error(proc)
        assert path.name in proc.stderr
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    "args",
    [
        ["count", "/no/such/file.txt"],
        ["count", str(DATA / "sample.md"), "--model", "/no/such/model.gguf"],
        ["count", str(DATA / "sample.md"), "--model", str(DATA / "sample.md")],
        ["plan", str(DATA / "sample.md"), "--n-ctx", "512", "--strategy", "best"],
        ["plan", str(DATA / "sample.md"), "--n-ctx", "0", "--strategy", "head"],
        ["plan", str(DATA / "sample.md"), "--n-ctx", "512", "--strategy", "semantic",
         "--overlap", "1.5"],
        ["plan", str(DATA / "sample.md"), "--strategy", "head"],
        ["chunk", str(DATA / "sample.md"), "--max-tokens", "0"],
        ["chunk", str(DATA)],
    ],
)  # fmt: skip
def test_bad_arguments_exit_2_with_one_line(args: list[str]) -> None:
    proc = run(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert_one_line_error(proc)


def test_run_summarize_json_contract(tmp_path: Path, model_path: Path) -> None:
    doc = tmp_path / "part.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:9000], encoding="utf-8")
    proc = run("run", str(doc), "--task", "summarize", "--strategy", "tail", "--n-ctx", "512",
               "--max-tokens", "32", "--json", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["type"] == "plan_ready" and all("type" in line for line in lines)
    done = lines[-1]
    assert done["type"] == "done"
    for key in ("finish_reason", "prompt_tokens", "completion_tokens", "kv_peak_cells", "n_ctx",
                "ttft_s", "seconds", "outputs"):  # fmt: skip
        assert key in done
    assert done["kv_peak_cells"] <= done["n_ctx"] == 512
    assert done["outputs"] and {"text", "source_spans"} <= set(done["outputs"][0])
    refused = run("run", str(doc), "--strategy", "refuse", "--n-ctx", "512", timeout=300)
    assert refused.returncode == 4 and "budget is" in refused.stderr


def test_run_executes_the_plan_that_plan_shows(tmp_path: Path, model_path: Path) -> None:
    """Both plan the Document with its structure (here: code, never cut inside a line)."""

    doc = str(DATA / "sample.py")
    shown = run("plan", doc, "--n-ctx", "256", "--strategy", "head", "--max-tokens", "8",
                "--task", "summarize", "--json", timeout=300)  # fmt: skip
    ran = run("run", doc, "--strategy", "head", "--n-ctx", "256", "--max-tokens", "8",
              "--db", str(tmp_path / "h.db"), "--json", timeout=300)  # fmt: skip
    assert shown.returncode == 0 and ran.returncode == 0, (shown.stderr, ran.stderr)
    plan = json.loads(shown.stdout.splitlines()[0])
    done = json.loads(ran.stdout.splitlines()[-1])
    assert done["plan"]["budget"] == plan["budget"]
    assert done["plan"]["boundary_integrity"] == plan["boundary_integrity"] == 1.0
    sources = done["outputs"][0]["source_spans"]
    assert [[k["start"], k["end"]] for k in plan["kept"]] == [[sources[0][0], sources[-1][1]]]


def test_compare_json_has_a_result_per_strategy(tmp_path: Path, model_path: Path) -> None:
    doc = tmp_path / "part.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:6000], encoding="utf-8")
    proc = run("compare", str(doc), "--task", "ask", "--question", "What is this?",
               "--strategies", "head,tail", "--n-ctx", "512", "--max-tokens", "16", "--json",
               timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [ln["strategy"] for ln in lines if ln["type"] == "result"] == ["head", "tail"]
    assert lines[-1]["type"] == "done" and len(lines[-1]["results"]) == 2


@pytest.mark.parametrize(
    "args",
    [
        ["run", str(DATA / "sample.md"), "--strategy", "best"],
        ["run", str(DATA / "sample.md"), "--strategy", "head", "--task", "ask"],
        ["run", str(DATA / "sample.md"), "--strategy", "head", "--task", "extract"],
        ["run", str(DATA / "sample.md"), "--strategy", "head", "--task", "translate"],
        ["run", str(DATA / "bad" / "empty.txt"), "--strategy", "head"],
        ["compare", str(DATA / "sample.md"), "--strategies", "head,nope"],
        ["run", str(DATA / "sample.md"), "--strategy", "head", "--max-tokens", "0"],
    ],
)  # fmt: skip
def test_bad_job_arguments_exit_2_with_one_line(args: list[str]) -> None:
    proc = run(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert_one_line_error(proc)
