"""contextlens-cli run when the engine child dies mid-job (issue 7, item 3, fault injection).

A real process on the real default model and a real document, with the engine's one-shot fault
armed through the environment (tests/fault_injection.py) in a CLI whose engine children start
from tests/fault_child.py (tests/fault_cli.py): the command exits with the
engine-crashed code and one sentence on stderr, the history keeps the run with the text generated
before the crash and the error, and the next run, with the fault spent, succeeds.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.cli.common import EXIT_ENGINE_CRASHED, EXIT_OK
from app.store.archive import export_session, import_session
from app.store.db import open_database
from app.store.repository import Repository
from tests.conftest import DATA
from tests.fault_child import FAULT_ENV
from tests.fault_injection import Draw, check_crash_sentence, draw, tally_of

CLI = [sys.executable, "-m", "app.cli"]
FAULT_CLI = [sys.executable, "-m", "tests.fault_cli"]  # the same, its engines from fault_child
ROOT = Path(__file__).resolve().parents[2]  # where `tests` is a package
DOC = DATA / "sample.docx"
JOB = ("--strategy", "head", "--task", "summarize", "--n-ctx", "256", "--max-tokens", "16")
SEED = 7003


def cli(*args: str, fault: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    command = CLI
    if fault is not None:
        env[FAULT_ENV] = str(fault)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        command = FAULT_CLI
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=300,
                          check=False, env=env)  # fmt: skip


def write_fault(folder: Path, fault: Draw) -> Path:
    print(f"fault drawn: {fault}")
    path = folder / "fault.json"
    path.write_text(json.dumps({"phase": fault.phase, "signal": fault.signal,
                                "after": fault.after}))  # fmt: skip
    return path


def stored_runs(db: Path, copy_to: Path | None = None) -> list[dict[str, Any]]:
    """Every run in the history at ``db`` (or in a copy of its first session, exported and
    imported into ``copy_to``), oldest first, with whether each has a KV state."""

    database = open_database(db)
    repo = Repository(database)
    try:
        if copy_to is not None:
            archive = copy_to.with_suffix(".ctxlens")
            export_session(repo, repo.history()[0].session, archive)
            repo.close()
            database.close()
            database = open_database(copy_to)
            repo = Repository(database)
            import_session(repo, archive)
        return [{**run, "kv_states": len(repo.kv_states(v.id))}
                for v in repo.history() for run in repo.runs(v.id)]  # fmt: skip
    finally:
        repo.close()
        database.close()


def events_of(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_a_crash_mid_generation_exits_3_and_the_history_keeps_the_partial_output(
    tmp_path: Path, model_path: Path, pytestconfig: pytest.Config
) -> None:
    fault = draw(random.Random(SEED), "generate")
    armed = write_fault(tmp_path, fault)
    db = str(tmp_path / "h.db")
    proc = cli("run", str(DOC), *JOB, "--db", db, "--json", fault=armed)
    assert proc.returncode == EXIT_ENGINE_CRASHED, proc.stderr
    assert not armed.exists()  # the engine child took the fault
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "Traceback" not in proc.stderr
    message = line.removeprefix("error: ")
    check_crash_sentence(message, fault)
    tally_of(pytestconfig).add(fault)

    events = events_of(proc)
    batches = [e for e in events if e["type"] == "token_batch"]
    assert sum(b["tokens"] for b in batches) == fault.after  # streamed before the crash
    partial = "".join(b["text"] for b in batches).strip()
    assert partial
    [error] = [e for e in events if e["type"] == "job_error"]
    done = events[-1]
    assert done["type"] == "done" and done["finish_reason"] == "error"
    assert done["error"] == error["message"] == message
    assert [o["text"] for o in done["outputs"]] == [partial]

    # The history holds the run: its partial output and its error; so does a copy of the
    # session in another history.
    [stored] = stored_runs(Path(db))
    assert stored["finish_reason"] == "error" and stored["error"] == message
    [out] = stored["outputs"]
    assert out["text"] == partial and out["finish_reason"] == "error" and out["source_spans"]
    assert stored["kv_states"] == 0
    [copy] = stored_runs(Path(db), copy_to=tmp_path / "other.db")
    assert (copy["error"], copy["outputs"]) == (message, stored["outputs"])

    # The next run (the same environment: the fault was spent) starts a healthy engine.
    again = cli("run", str(DOC), *JOB, "--db", db, "--json", fault=armed)
    assert again.returncode == EXIT_OK, again.stderr
    done = events_of(again)[-1]
    assert done["finish_reason"] in ("stop", "length") and done["error"] is None
    assert done["outputs"][-1]["text"].startswith(partial)  # greedy: the same reply, whole
    assert len(stored_runs(Path(db))) == 2


@pytest.mark.slow
def test_a_crash_while_keeping_the_kv_state_keeps_the_finished_run(
    tmp_path: Path, model_path: Path, pytestconfig: pytest.Config
) -> None:  # fmt: skip
    fault = Draw("save", random.Random(SEED + 1).choice(("SIGKILL", "SIGSEGV", "SIGABRT")), 0)
    armed = write_fault(tmp_path, fault)
    db = str(tmp_path / "h.db")
    proc = cli("run", str(DOC), *JOB, "--keep-kv", "--db", db, "--json", fault=armed)
    assert not armed.exists()
    tally_of(pytestconfig).add(fault)
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("warning: the KV state was not kept: the engine process died")
    assert fault.signal in line
    assert proc.returncode == EXIT_OK, proc.stderr  # the job itself finished
    done = events_of(proc)[-1]
    assert done["finish_reason"] in ("stop", "length") and done["outputs"][-1]["text"]
    [stored] = stored_runs(Path(db))
    assert stored["outputs"][-1]["text"] == done["outputs"][-1]["text"]
    assert stored["kv_states"] == 0
