"""``run`` and ``compare`` over a pool of two real llama-servers (tests/llama_servers.py, the
default model): the server a run is on killed (SIGKILL) while it generates, the run finishes on
the other with a whole reply, says which server was lost (a ``server`` JSON line, a stderr line)
and records the reply of the server that ran it; a compare of two strategies over a pool (given
in a pool file) records both."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.cli.common import EXIT_OK
from app.core.paths import sample_document
from tests.cli.runner import CLI, run
from tests.llama_servers import NO_LLAMA_SERVER, LlamaServer, have_llama_server, llama_servers

pytestmark = [
    pytest.mark.serial,  # two servers at once: every core
    pytest.mark.skipif(not have_llama_server(), reason=NO_LLAMA_SERVER),
]

WHOLE = ("stop", "length")


@pytest.fixture
def servers(model_path: Path, tmp_path: Path) -> Iterator[list[LlamaServer]]:
    with llama_servers(model_path, 2, tmp_path / "logs", parallel=1, ctx_per_slot=1024) as started:
        yield started


@pytest.fixture
def document(tmp_path: Path) -> Path:
    path = tmp_path / "doc.txt"
    path.write_text(sample_document().read_text(encoding="utf-8")[:2500], encoding="utf-8")
    return path


def _engines(servers: list[LlamaServer]) -> list[str]:
    return [arg for s in servers for arg in ("--engine", s.url)]


def _recorded_labels(db: Path) -> list[str]:
    """The engine each recorded version names ("URL model" for a server)."""
    with sqlite3.connect(db) as con:
        return [label for (label,) in con.execute("SELECT model_path FROM prompt_versions")]


def test_a_run_whose_server_is_killed_mid_reply_finishes_on_the_other(
    servers: list[LlamaServer], document: Path, tmp_path: Path
) -> None:
    a, b = servers
    db = tmp_path / "h.db"
    args = ["run", str(document), "--strategy", "head", "--max-tokens", "200",
            "--no-stop-on-repetition", "--retries", "1", "--db", str(db), "--json",
            *_engines(servers)]  # fmt: skip
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    lines: list[dict[str, Any]] = []
    try:
        for raw in proc.stdout:
            line = json.loads(raw)
            if line["type"] == "token_batch" and not any(
                seen["type"] == "token_batch" for seen in lines
            ):
                a.kill()  # the reply has begun: cut it in the middle
            lines.append(line)
        _, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert proc.returncode == EXIT_OK, err
    lost = [line for line in lines if line["type"] == "server" and line.get("event") == "lost"]
    assert len(lost) == 1 and lost[0]["server"] == a.url and lost[0]["moved_to"] == b.url
    assert lost[0]["reason"]
    assert f"server {a.url} lost (" in err and f"): running again on {b.url}" in err
    assert not [line for line in lines if line["type"] == "job_error"]
    after = lines[lines.index(lost[0]) + 1 :]
    assert any(line["type"] == "token_batch" for line in after)  # streamed again, on B
    done = lines[-1]
    assert done["type"] == "done" and done["error"] is None
    assert done["finish_reason"] in WHOLE and done["completion_tokens"] > 0
    assert done["recorded"] is not None
    labels = _recorded_labels(db)  # the reply B gave, recorded once, as B's
    assert len(labels) == 1 and labels[0].startswith(b.url)


def test_compare_over_a_pool_file_records_each_strategy(
    servers: list[LlamaServer], document: Path, tmp_path: Path
) -> None:
    pool = tmp_path / "servers.txt"
    pool.write_text(f"# the pool\n{servers[0].url}\n\n{servers[1].url}  # the second\n",
                    encoding="utf-8")  # fmt: skip
    db = tmp_path / "h.db"
    done = run("compare", str(document), "--strategies", "head,tail", "--max-tokens", "16",
               "--engines", str(pool), "--db", str(db), "--json")  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert not [line for line in lines if line.get("event") == "lost"]
    results = [line for line in lines if line["type"] == "result"]
    assert [r["strategy"] for r in results] == ["head", "tail"]
    assert all(r["error"] is None and r["finish_reason"] in (*WHOLE, "repetition")
               for r in results)  # fmt: skip
    last = lines[-1]
    assert last["type"] == "done" and len(last["results"]) == 2
    assert last["recorded"] is not None and len(last["recorded"]["versions"]) == 2
    labels = _recorded_labels(db)
    assert len(labels) == 2 and all(label.startswith(servers[0].url) for label in labels)
