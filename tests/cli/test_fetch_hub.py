"""``contextlens-cli fetch-model org/repo:…`` and ``hub-token`` against the loopback Hub
(tests/hub_server.py), in this process, with ``$HF_ENDPOINT`` pointing there."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from app.cli import fetch
from tests.cli.runner import assert_one_line_error, run_here
from tests.hub_server import COMMIT, TOKEN, hub, keyring_file, sha256

__all__ = ["hub", "keyring_file"]  # fixtures

pytestmark = pytest.mark.unit

BIG = "big/ggml-vocab-qwen2-F16.gguf"
Q4KM = "ggml-vocab-llama-spm-Q4_K_M.gguf"


def test_a_hub_file_is_fetched_and_its_path_printed(hub, tmp_path: Path) -> None:
    _, endpoint = hub
    done = run_here("fetch-model", f"test-org/vocab-GGUF:{Q4KM}")
    assert done.returncode == 0, done.stderr
    snapshot = tmp_path / "hf-home" / "hub" / "models--test-org--vocab-GGUF" / "snapshots"
    assert done.stdout == f"{snapshot / COMMIT / Q4KM}\n"
    lines = done.stderr.splitlines()
    port = endpoint.rsplit(":", 1)[1]
    assert lines[0] == f"fetching {Q4KM} (0.7 MB) from 127.0.0.1:{port}"
    assert lines[-1] == "  0.7 of 0.7 MB" and len(lines) <= 12
    again = run_here("fetch-model", f"test-org/vocab-GGUF:{Q4KM}")
    assert again.returncode == 0 and again.stdout == done.stdout
    assert again.stderr == ""  # already there: nothing to report


def test_an_interrupted_fetch_fails_in_one_sentence_and_the_next_resumes(hub,
                                                                         tmp_path: Path) -> None:
    state, _ = hub
    state.cut_at, state.cuts = 2_000_000, 99
    broken = run_here("fetch-model", f"test-org/vocab-GGUF:{BIG}", "--dir", str(tmp_path / "m"))
    assert broken.returncode == 2 and broken.stdout == ""
    assert "broke after" in broken.stderr and "fetching again resumes there" in broken.stderr
    assert_one_line_error(
        type(broken)(broken.args, 2, "", broken.stderr.splitlines()[-1] + "\n"))
    assert all(line.startswith(("fetching ", "  ")) for line in broken.stderr.splitlines()[:-1])
    state.cuts = 0
    resumed = run_here("fetch-model", f"test-org/vocab-GGUF:{BIG}", "--dir", str(tmp_path / "m"))
    assert resumed.returncode == 0, resumed.stderr
    assert state.gets(BIG)[-1].range == "bytes=2000000-"
    path = Path(resumed.stdout.strip())
    assert path == tmp_path / "m" / BIG
    assert sha256(path.read_bytes()) == sha256(state.repos["test-org/vocab-GGUF"][BIG])


def test_ctrl_c_exits_130_and_the_next_fetch_resumes(hub, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:  # fmt: skip
    state, _ = hub
    shown = fetch._ProgressLine.__call__

    def interrupted(self: fetch._ProgressLine, done: int, total: int) -> None:
        shown(self, done, total)
        if 0 < done < total:
            raise KeyboardInterrupt

    monkeypatch.setattr(fetch._ProgressLine, "__call__", interrupted)
    stopped = run_here("fetch-model", f"test-org/vocab-GGUF:{BIG}")
    assert stopped.returncode == 130
    assert stopped.stderr.splitlines()[-1] == (
        "error: cancelled; fetching again resumes where it stopped")
    monkeypatch.setattr(fetch._ProgressLine, "__call__", shown)
    resumed = run_here("fetch-model", f"test-org/vocab-GGUF:{BIG}")
    assert resumed.returncode == 0, resumed.stderr
    assert re.fullmatch(r"bytes=[1-9]\d*-", state.gets(BIG)[-1].range or "")


@pytest.mark.parametrize(("args", "says"), [
    (["fetch-model", "no-such-model"],
     "error: unknown model 'no-such-model' (known: smollm2-135m, gemma-3-270m"),
    (["fetch-model", "org/re po"], "does not name a model on the Hugging Face Hub"),
    (["fetch-model", "test-org/vocab-GGUF:Q2_K"], "has no Q2_K file; its quantizations are"),
    (["fetch-model", "test-org/gated-GGUF"], "error: this model needs a Hugging Face token: "),
])  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(hub, args: list[str], says: str) -> None:
    state, _ = hub
    state.gated.add("test-org/gated-GGUF")
    refused = run_here(*args)
    assert refused.returncode == 2 and says in refused.stderr
    assert_one_line_error(refused)


def test_the_token_is_kept_from_stdin_and_forgotten(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    state, endpoint = hub
    state.gated.add("test-org/gated-GGUF")
    monkeypatch.setattr("sys.stdin", io.StringIO(TOKEN + "\n"))
    kept = run_here("hub-token")
    assert kept.returncode == 0
    assert kept.stderr == f"the Hugging Face token for {endpoint} is kept in the system keyring\n"
    assert run_here("fetch-model", "test-org/gated-GGUF").returncode == 0
    assert {r.authorization for r in state.log} == {f"Bearer {TOKEN}"}
    gone = run_here("hub-token", "--forget")
    assert gone.returncode == 0 and "was removed" in gone.stderr
    assert "no Hugging Face token kept" in run_here("hub-token", "--forget").stderr
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    empty = run_here("hub-token")
    assert empty.returncode == 2 and "the Hugging Face token is empty" in empty.stderr


def test_the_help_names_the_hub_forms() -> None:
    shown = run_here("fetch-model", "--help")
    assert "org/repo:Q4_K_M" in shown.stdout and "--dir" in shown.stdout
    assert "hub-token" in run_here("--help").stdout
