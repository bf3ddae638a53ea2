"""contextlens-cli as a user runs it: a real process, real exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.cli.runner import CLI, assert_one_line_error, run
from tests.loops import LOOP_TEXT


def test_info_prints_the_model_card(model_path: Path) -> None:
    proc = run("info")
    assert proc.returncode == 0, proc.stderr
    assert "llama" in proc.stdout and "134,515,008" in proc.stdout and "23,040" in proc.stdout


def test_info_json(model_path: Path) -> None:
    proc = run("info", str(model_path), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["architecture"] == "llama"
    assert data["n_layers"] == 30
    assert data["n_head_kv"] == 3
    assert data["n_ctx_train"] == 8192
    assert data["vocab_size"] == 49152
    assert data["quantization"] == "Q4_1"
    assert data["has_chat_template"] is True
    assert data["kv_bytes_per_token"]["f16"] == 23040


def test_generate_json_lines_end_with_the_stats(model_path: Path) -> None:
    proc = run("generate", "--prompt", "Say hello.", "--max-tokens", "12", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["type"] == "done"
    for key in ("prompt_tokens", "completion_tokens", "prompt_tokens_per_s", "gen_tokens_per_s",
                "finish_reason"):  # fmt: skip
        assert key in lines[-1]
    assert lines[-1]["finish_reason"] in ("stop", "length")
    texts = [line for line in lines if line["type"] == "text"]
    assert sum(len(t["tokens"]) for t in texts) == lines[-1]["completion_tokens"]


def test_generate_streams_plain_text(model_path: Path) -> None:
    proc = run("generate", "--prompt", "What is 2+2?", "--max-tokens", "16")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    assert "tok/s" in proc.stderr


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["info", "/no/such/model.gguf"], "model file not found"),
        (["generate", "--model", "/no/such/model.gguf", "--prompt", "x"], "not found"),
        (["generate", "--prompt", "x", "--n-ctx", "4"], "n_ctx must be at least 16"),
        (["generate", "--prompt", "x", "--max-tokens", "0"], "--max-tokens"),
        (["generate", "--prompt-file", "/no/such/prompt.txt"], "prompt file not found"),
        (["generate"], "give the prompt"),
        (["generate", "--prompt", "x", "--kv-type", "q8_0"], "flash attention"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], phrase: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    assert_one_line_error(proc)
    assert phrase in proc.stderr


def test_bad_model_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "random.gguf"
    bad.write_bytes(os.urandom(4096))
    for args in (["info", str(bad)], ["generate", "--model", str(bad), "--prompt", "x"]):
        proc = run(*args)
        assert proc.returncode == 2
        assert_one_line_error(proc)
        assert "not a GGUF file" in proc.stderr


def test_prompt_that_does_not_fit_exits_4(tmp_path: Path, model_path: Path) -> None:
    prompt = tmp_path / "long.txt"
    prompt.write_text("The context window is finite. " * 400, encoding="utf-8")
    proc = run("generate", "--prompt-file", str(prompt), "--n-ctx", "512", "--raw")
    assert proc.returncode == 4, proc.stderr
    assert_one_line_error(proc)
    assert "context is 512 (reply reserve 256)" in proc.stderr


def _start_long_generation() -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "generate", "--prompt", LOOP_TEXT, "--raw", "--no-stop-on-repetition",
         "--max-tokens", "3000", "--n-ctx", "4096", "--json"],  # runs on (tests/loops.py)
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for_text(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    for _ in range(3):
        line = proc.stdout.readline()
        assert line, "the CLI produced no output"


def test_ctrl_c_cancels_and_exits_130(model_path: Path) -> None:
    proc = _start_long_generation()
    try:
        _wait_for_text(proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    last = json.loads(out.strip().splitlines()[-1])
    assert last["type"] == "done" and last["finish_reason"] == "cancelled"


def test_engine_crash_exits_3_and_the_cli_reports_it(model_path: Path) -> None:
    proc = _start_long_generation()
    try:
        _wait_for_text(proc)
        children = psutil.Process(proc.pid).children()
        assert len(children) == 1
        os.kill(children[0].pid, signal.SIGSEGV)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 3
    assert "SIGSEGV" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
