"""``batch`` over a pool of real llama.cpp servers (tests/llama_servers.py, the default model):
a server killed (SIGKILL) or hung (SIGSTOP) halfway costs nothing — every document recorded once,
the moved ones complete, exit 0, the progress says which server was lost — and a pool whose
servers disagree on the model or the context size is refused in one sentence."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK
from app.core.paths import sample_document
from tests.cli.runner import CLI, run
from tests.llama_servers import NO_LLAMA_SERVER, LlamaServer, have_llama_server, llama_servers

pytestmark = pytest.mark.skipif(not have_llama_server(), reason=NO_LLAMA_SERVER)

DOCUMENTS = 12
CTX = 1024  # per slot
GEMMA = Path(__file__).resolve().parents[2] / "models" / "gemma-3-270m-q4_k_m.gguf"


def _folder(tmp_path: Path, count: int = DOCUMENTS) -> Path:
    """``count`` documents of 600 to 1,300 characters (a few hundred tokens: a busy 2-core
    machine evaluates them in seconds), each a slice of its own of the sample, so no server
    answers one from a prompt it cached for another."""
    text = sample_document().read_text(encoding="utf-8")
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(count):
        start = 30_000 + i * 4_000
        (folder / f"doc-{i:02}.txt").write_text(text[start : start + 600 + 60 * i],
                                                encoding="utf-8")  # fmt: skip
    return folder


def _batch_args(folder: Path, db: Path, servers: list[LlamaServer], *extra: str) -> list[str]:
    engines = [arg for s in servers for arg in ("--engine", s.url)]
    return ["batch", str(folder), "--strategy", "head", "--max-tokens", "16", "--lanes", "0",
            "--db", str(db), "--json", "--retries", "1", *engines, *extra]  # fmt: skip


def _finished_versions(db: Path) -> Counter[str]:
    """Finished versions (a run without an error or a refusal) per document sha256."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT d.sha256 FROM prompt_versions v JOIN sessions s ON v.session_id = s.id "
            "JOIN documents d ON s.document_id = d.id JOIN runs r ON r.version_id = v.id "
            "WHERE r.error IS NULL AND r.refused IS NULL "
            "AND r.finish_reason IN ('stop', 'length', 'repetition')"
        ).fetchall()
    return Counter(sha for (sha,) in rows)


def _run_and_fail_halfway(args: list[str], fail: Any) -> tuple[int, list[dict[str, Any]], str]:
    """The batch as a process; ``fail()`` once half the documents are done (as their lines
    stream); its exit status, JSON lines and stderr."""
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    lines: list[dict[str, Any]] = []
    done = 0
    try:
        for raw in proc.stdout:
            line = json.loads(raw)
            lines.append(line)
            if line.get("type") == "document" and line["status"] == "done":
                done += 1
                if done == DOCUMENTS // 2:
                    fail()
        _, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, lines, err


def _check_nothing_lost(code: int, lines: list[dict[str, Any]], err: str, db: Path, *,
                        lost: LlamaServer, left: LlamaServer) -> None:  # fmt: skip
    assert code == EXIT_OK, err
    documents = [line for line in lines if line["type"] == "document"]
    assert Counter(d["path"] for d in documents) == Counter(
        {str(p): 1 for p in Path(documents[0]["path"]).parent.glob("doc-*.txt")})  # fmt: skip
    assert all(d["status"] == "done" for d in documents), documents
    moved = [d for d in documents if d["moved_from"]]
    assert moved, "no document was running on the server that failed"
    for d in moved:  # run again from its start: a complete reply, never the cut one
        assert d["moved_from"] == [lost.url] and d["server"] == left.url
        assert d["finish_reason"] in ("stop", "length") and d["completion_tokens"] > 0
    events = [line for line in lines if line["type"] == "server"]
    assert any(e["server"] == lost.url and e["event"] == "lost" and e["document"] for e in events)
    assert f"server {lost.url} lost (" in err and "moved to another server" in err
    summary = lines[-1]
    assert summary["type"] == "done" and summary["done"] == DOCUMENTS and summary["not_run"] == 0
    servers = summary["servers"]
    assert servers[lost.url]["state"] == "lost" and servers[lost.url]["lost"] == 1
    assert servers[lost.url]["moved"] == len(moved)
    assert servers[left.url] == {"documents": servers[left.url]["documents"], "lost": 0,
                                 "moved": 0, "state": "up"}  # fmt: skip
    assert servers[lost.url]["documents"] + servers[left.url]["documents"] == DOCUMENTS
    assert f"{lost.url}: {servers[lost.url]['documents']} document" in err
    assert f"{left.url}: {servers[left.url]['documents']} documents, never lost" in err
    assert err.count("lost once") == 1
    finished = _finished_versions(db)  # each document recorded exactly once
    assert len(finished) == DOCUMENTS and set(finished.values()) == {1}


@pytest.fixture
def two_servers(model_path: Path, tmp_path: Path) -> Iterator[list[LlamaServer]]:
    with llama_servers(model_path, 2, tmp_path / "logs", parallel=2, ctx_per_slot=CTX,
                       cores=[0, 1]) as servers:  # fmt: skip
        yield servers


@pytest.mark.serial
def test_a_server_killed_halfway_costs_nothing(two_servers: list[LlamaServer],
                                               tmp_path: Path) -> None:  # fmt: skip
    a, b = two_servers
    db = tmp_path / "h.db"
    code, lines, err = _run_and_fail_halfway(_batch_args(_folder(tmp_path), db, two_servers),
                                             a.kill)  # fmt: skip
    _check_nothing_lost(code, lines, err, db, lost=a, left=b)


@pytest.mark.serial
def test_a_stopped_server_is_left_by_the_reply_timeout(two_servers: list[LlamaServer],
                                                       tmp_path: Path) -> None:  # fmt: skip
    """A hung server accepts connections and answers nothing: the reply timeout notices, a
    probe that times out too says it is gone (the fixture wakes it to end it)."""
    a, b = two_servers
    db = tmp_path / "h.db"
    args = _batch_args(_folder(tmp_path), db, two_servers, "--timeout", "20")
    code, lines, err = _run_and_fail_halfway(args, a.stop)
    _check_nothing_lost(code, lines, err, db, lost=a, left=b)


def test_a_pool_of_two_models_is_refused(model_path: Path, tmp_path: Path) -> None:
    with (
        llama_servers(model_path, 1, tmp_path / "a", parallel=1, ctx_per_slot=512) as one,
        llama_servers(GEMMA, 1, tmp_path / "b", parallel=1, ctx_per_slot=512) as other,
    ):
        done = run(*_batch_args(_folder(tmp_path, 2), tmp_path / "h.db", [*one, *other]))
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "the servers serve different models" in line and one[0].url in line
    assert other[0].url in line and "Traceback" not in done.stderr
    assert not (tmp_path / "h.db").exists() or not _finished_versions(tmp_path / "h.db")


def test_different_contexts_are_refused_or_the_smallest_is_used(
    model_path: Path, tmp_path: Path
) -> None:
    folder = _folder(tmp_path, 2)
    db = tmp_path / "h.db"
    with (
        llama_servers(model_path, 1, tmp_path / "a", parallel=1, ctx_per_slot=1024) as small,
        llama_servers(model_path, 1, tmp_path / "b", parallel=1, ctx_per_slot=2048) as large,
    ):
        servers = [*small, *large]
        refused = run(*_batch_args(folder, db, servers))
        used = run(*_batch_args(folder, db, servers, "--smallest-context"))
    assert refused.returncode == EXIT_BAD_INPUT, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert f"{small[0].url}: 1,024" in line and f"{large[0].url}: 2,048" in line
    assert "--smallest-context" in line
    assert used.returncode == EXIT_OK, used.stderr
    documents = [json.loads(x) for x in used.stdout.splitlines()][:-1]
    assert [d["status"] for d in documents] == ["done", "done"]
    with sqlite3.connect(db) as con:
        sizes = {json.loads(s)["n_ctx"] for (s,) in con.execute("SELECT settings FROM "
                                                               "prompt_versions")}  # fmt: skip
    assert sizes == {1024}


def test_a_pool_file_and_the_commands_that_take_one_server(tmp_path: Path) -> None:
    """--engines FILE adds its servers (comments and blank lines left out); generate keeps one
    server; a pool file that cannot be read is one sentence. None of these connects."""
    pool = tmp_path / "pool.txt"
    pool.write_text("# the pool\nhttp://127.0.0.1:9\n\n  http://127.0.0.1:10  # second\n",
                    encoding="utf-8")  # fmt: skip
    one = run("generate", "--prompt", "hi", "--engine", "http://127.0.0.1:9", "--engines",
              str(pool))  # fmt: skip
    assert one.returncode == EXIT_BAD_INPUT
    assert one.stderr.strip() == ("error: generate runs on one server: give --engine once (a "
                                  "pool of 3 is for run, compare and batch)")  # fmt: skip
    missing = run("batch", str(tmp_path), "--strategy", "head", "--engines",
                  str(tmp_path / "nope.txt"))  # fmt: skip
    assert missing.returncode == EXIT_BAD_INPUT
    assert missing.stderr.strip().splitlines() == [
        f"error: cannot read the pool file {tmp_path / 'nope.txt'}: No such file or directory"
    ]
    empty = tmp_path / "empty.txt"
    empty.write_text("# nobody\n", encoding="utf-8")
    nobody = run("run", str(pool), "--strategy", "head", "--engines", str(empty))
    assert nobody.returncode == EXIT_BAD_INPUT
    assert f"the pool file {empty} names no server" in nobody.stderr
    alone = run("batch", str(tmp_path), "--strategy", "head", "--smallest-context")
    assert "--smallest-context needs servers" in alone.stderr
