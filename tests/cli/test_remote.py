"""The command line with ``--engine URL`` against a real server on loopback (llama-cpp-python's own
on the default model): the same job as the local engine gives the same reply, ``batch`` over a
folder (``--concurrency 2`` kept to the one request the server serves, also on the server as a
person starts it, which cuts a reply short when another request arrives), resumed after a server
that died, API keys from the keyring or the environment (for the server it names), a key about to
go over plain HTTP said first, and what cannot run remotely refused in one sentence."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.common import EXIT_BAD_INPUT, EXIT_CANCELLED, EXIT_ENGINE_CRASHED, EXIT_OK
from app.core.engine.remote import NO_AUDIT, NO_KV_STATE
from app.core.paths import sample_document
from tests.cli.runner import run_here
from tests.default_llama_cpp_server import default_server
from tests.remote_server import ALIAS, SERVER_N_CTX, Server, free_port, running_server, start_server

N_CTX = SERVER_N_CTX  # the shared server's (tests/conftest.py: server)
CLI = [sys.executable, "-m", "app.cli"]


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The command in this process, or in its own where it needs an environment or input of
    its own (the keyring's backend is chosen once per process)."""
    if env is None and stdin is None:
        return run_here(*args)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, input=stdin, check=False)  # fmt: skip


def _lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _plan(done: dict[str, object]) -> dict[str, object]:
    """A done record's plan without its timing."""
    plan = done["plan"]
    assert isinstance(plan, dict)
    return {k: v for k, v in plan.items() if k != "seconds"}


def _excerpt(path: Path, start: int, size: int = 3000) -> Path:
    text = sample_document().read_text(encoding="utf-8")[start : start + size]
    path.write_text(text, encoding="utf-8")
    return path


def test_the_same_run_sends_the_same_prompt_locally_and_on_the_server(
    server: Server, model_path: Path, tmp_path: Path
) -> None:
    """The same plan and the same prompt tokens on both sides. The replies are not compared:
    the server evaluates the prompt in its own batches and threads, and the float differences
    that makes may change a greedy choice (on a machine set up otherwise they parted after 67
    characters); equal replies are not what either side promises."""
    doc = _excerpt(tmp_path / "jargon.txt", 0, 3000)
    common = ["run", str(doc), "--strategy", "head", "--max-tokens", "16", "--n-ctx", str(N_CTX),
              "--model", str(model_path), "--db", str(tmp_path / "h.db"), "--json"]  # fmt: skip
    local = _cli(*common)
    remote = _cli(*common, "--engine", server.url)
    assert local.returncode == EXIT_OK, local.stderr
    assert remote.returncode == EXIT_OK, remote.stderr
    here, there = _lines(local.stdout)[-1], _lines(remote.stdout)[-1]
    assert _plan(here) == _plan(there) and here["prompt_tokens"] == there["prompt_tokens"]
    for side in (here, there):
        assert str(side["outputs"][0]["text"]).strip()  # type: ignore[index]
    info = next(line for line in _lines(remote.stdout) if line["type"] == "server")
    assert info["kind"] == "llama-cpp-python"
    assert info["kv_figures"] == "not reported by this server"
    with sqlite3.connect(tmp_path / "h.db") as db:
        rows = db.execute("SELECT model_path, settings FROM prompt_versions ORDER BY id").fetchall()
    assert rows[0][0] == str(model_path) and json.loads(rows[0][1])["engine"] == "local"
    assert rows[1][0] == f"{server.url} {ALIAS}" and json.loads(rows[1][1])["engine"] == server.url
    resume = _cli("snapshots", "rollback", "2", "--resume", "--db", str(tmp_path / "h.db"))
    assert resume.returncode == EXIT_BAD_INPUT
    assert resume.stderr.strip() == (
        f"error: version 2 ran on the server {server.url}, which keeps no KV state to resume "
        "from; roll back without resuming, then run it again on the server"
    )


def test_ask_with_retrieve_plans_each_question_alike_on_the_server(
    server: Server, model_path: Path, tmp_path: Path
) -> None:
    """`retrieve` plans on this machine (BM25 over the chunks the model's counter cut), so a
    server runs the same plan per question as the local engine, and answers each."""
    doc = _excerpt(tmp_path / "jargon.txt", 0, 20_000)  # some 5,000 tokens: five contexts
    common = ["run", str(doc), "--task", "ask", "--strategy", "retrieve", "--question",
              "Who edited the Jargon File?", "--question", "What is a hacker?", "--max-tokens",
              "8", "--n-ctx", "512", "--model", str(model_path), "--db",
              str(tmp_path / "h.db"), "--json"]  # fmt: skip (512: within the server's context)
    local = _cli(*common)
    remote = _cli(*common, "--engine", server.url)
    assert local.returncode == EXIT_OK, local.stderr
    assert remote.returncode == EXIT_OK, remote.stderr
    ready = [[line for line in _lines(side.stdout) if line["type"] == "plan_ready"]
             for side in (local, remote)]  # fmt: skip
    assert ready[0] == ready[1] and [r["question"] for r in ready[1]] == [
        "Who edited the Jargon File?", "What is a hacker?"]  # fmt: skip
    done = _lines(remote.stdout)[-1]
    assert [o["step"] for o in done["outputs"]] == ["answer 1", "answer 2"]  # type: ignore[union-attr]
    assert _plan(done) == _plan(_lines(local.stdout)[-1])


def test_generate_streams_from_the_server(server: Server) -> None:
    done = _cli("generate", "--engine", server.url, "--n-ctx", str(N_CTX), "--raw",
                "--prompt", "The capital of France is", "--max-tokens", "8", "--json")  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    lines = _lines(done.stdout)
    assert "".join(str(line.get("text", "")) for line in lines).strip()
    assert lines[-1]["type"] == "done" and lines[-1]["finish_reason"] in ("stop", "length")


def test_what_needs_the_local_engine_is_refused_in_one_sentence(
    server: Server, tmp_path: Path
) -> None:
    doc = _excerpt(tmp_path / "d.txt", 0, 500)
    base = ["run", str(doc), "--strategy", "head", "--engine", server.url, "--db",
            str(tmp_path / "h.db")]  # fmt: skip
    audit = _cli(*base, "--audit")
    assert audit.returncode == EXIT_BAD_INPUT
    assert audit.stderr.strip() == f"error: --audit needs the local engine: {NO_AUDIT}"
    keep = _cli(*base, "--keep-kv")
    assert keep.stderr.strip() == f"error: --keep-kv needs the local engine: {NO_KV_STATE}"
    unreported = _cli(*base)  # no --n-ctx: this server does not report its context
    assert unreported.returncode == EXIT_BAD_INPUT
    assert "does not report its context size" in unreported.stderr
    nowhere = _cli(*base[:-4], "--engine", "127.0.0.1:9", "--n-ctx", "512", "--retries", "0")
    assert nowhere.returncode == EXIT_ENGINE_CRASHED
    assert nowhere.stderr.strip() == (
        "error: cannot reach the server at http://127.0.0.1:9: the connection was refused "
        "(is the server running?)"
    )


def test_remote_info_says_where_each_figure_comes_from(server: Server) -> None:
    done = _cli("remote", "info", server.url, "--n-ctx", str(N_CTX), "--json")
    assert done.returncode == EXIT_OK, done.stderr
    info = json.loads(done.stdout)
    assert info["model"] == ALIAS and info["n_ctx"] == N_CTX
    assert info["tokenizer"] == "the server (/extras/tokenize)" and info["exact_counts"] is True
    assert info["kv_figures"] == "not reported by this server"
    text = _cli("remote", "info", server.url, "--n-ctx", str(N_CTX))
    assert "KV figures: not reported by this server" in text.stdout


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(3):
        _excerpt(folder / f"part-{i}.txt", 20_000 * (i + 1), 800)
    (folder / "empty.txt").write_bytes(b"")  # unreadable: reported, the others run
    (folder / ".hidden.txt").write_text("not a document of the batch", encoding="utf-8")
    return folder


def test_batch_records_each_document_and_resumes(server: Server, tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    db = tmp_path / "batch.db"
    args = ["batch", str(folder), "--strategy", "head", "--max-tokens", "16", "--engine",
            server.url, "--n-ctx", str(N_CTX), "--concurrency", "2", "--db", str(db),
            "--json"]  # fmt: skip
    first = _cli(*args)
    assert first.returncode == EXIT_BAD_INPUT, first.stderr  # one document could not be read
    lines = _lines(first.stdout)
    status = {Path(str(line["path"])).name: line["status"] for line in lines[:-1]}
    assert status == {"part-0.txt": "done", "part-1.txt": "done", "part-2.txt": "done",
                      "empty.txt": "unreadable"}  # fmt: skip
    summary = lines[-1]
    assert summary["done"] == 3 and summary["unreadable"] == 1 and summary["not_run"] == 0
    assert "4 documents: 3 done, 0 skipped" in first.stderr
    assert "serves 1 request at a time: 1 document in flight, not the 2" in first.stderr
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (3,)

    again = _cli(*args)
    statuses = [line["status"] for line in _lines(again.stdout)[:-1]]
    assert sorted(statuses) == ["skipped", "skipped", "skipped", "unreadable"]
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (3,)  # nothing run twice

    longer = _cli(*[a if a != "16" else "24" for a in args])  # another job: not "done before"
    assert sorted(line["status"] for line in _lines(longer.stdout)[:-1]) == [
        "done", "done", "done", "unreadable"]  # fmt: skip


def test_a_batch_stops_when_the_server_dies_and_resumes_where_it_stopped(
    model_path: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(5):
        _excerpt(folder / f"doc-{i}.txt", 10_000 * (i + 1), 800)
    db = tmp_path / "b.db"
    srv = start_server(model_path, tmp_path / "s1.log", n_ctx=N_CTX)
    args = ["batch", str(folder), "--strategy", "head", "--max-tokens", "16", "--n-ctx",
            str(N_CTX), "--db", str(db), "--json", "--retries", "1"]  # fmt: skip
    proc = subprocess.Popen([*CLI, *args, "--engine", srv.url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    done_before = []
    for line in proc.stdout:
        record = json.loads(line)
        if record.get("status") == "done":
            done_before.append(Path(record["path"]).name)
            if len(done_before) == 2:
                srv.kill()
                break
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_ENGINE_CRASHED, err
    assert "the engine stopped answering; run the same command again" in err
    with sqlite3.connect(db) as con:
        recorded = con.execute("SELECT count(*) FROM runs WHERE error IS NULL").fetchone()[0]
    assert recorded >= 2

    port = int(srv.url.rsplit(":", 1)[1])  # the same address: the same server, restarted
    with running_server(model_path, tmp_path / "s2.log", n_ctx=N_CTX, port=port) as again:
        resumed = _cli(*args, "--engine", again.url)
    assert resumed.returncode == EXIT_OK, resumed.stderr
    status = {Path(str(r["path"])).name: r["status"] for r in _lines(resumed.stdout)[:-1]}
    assert all(status[name] == "skipped" for name in done_before)
    assert sorted(status.values()).count("done") == 5 - recorded


def test_ctrl_c_stops_a_batch_and_keeps_what_is_done(server: Server, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(4):
        _excerpt(folder / f"doc-{i}.txt", 15_000 * (i + 1), 1000)
    args = ["batch", str(folder), "--strategy", "head", "--max-tokens", "32", "--engine",
            server.url, "--n-ctx", str(N_CTX), "--db", str(tmp_path / "h.db"),
            "--json"]  # fmt: skip
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    assert first["status"] == "done"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_CANCELLED, err
    assert "cancelled; run the same command again to go on where it stopped" in err
    summary = _lines(out)[-1]
    assert summary["type"] == "done" and summary["done"] >= 1 and summary["done"] < 4
    again = _cli(*args)
    statuses = [line["status"] for line in _lines(again.stdout)[:-1]]
    assert statuses.count("skipped") == summary["done"] and again.returncode == EXIT_OK


def test_batch_refuses_what_it_cannot_do_in_one_sentence(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    local = _cli("batch", str(folder), "--strategy", "head", "--concurrency", "2")
    assert local.returncode == EXIT_BAD_INPUT
    assert local.stderr.strip() == ("error: --concurrency above 1 needs --engine URL: the local "
                                    "engine runs one request at a time")  # fmt: skip
    missing = _cli("batch", str(tmp_path / "nope"), "--strategy", "head")
    assert missing.stderr.strip() == f"error: {tmp_path / 'nope'} is not a folder"
    unknown = _cli("batch", str(folder), "--strategy", "sideways")
    assert unknown.stderr.strip().startswith("error: unknown strategy 'sideways'")


def test_the_api_key_comes_from_the_keyring_and_is_never_stored(
    model_path: Path, tmp_path: Path
) -> None:
    key = "sk-local-7c1e9d"
    env = {**os.environ, "PYTHON_KEYRING_BACKEND": "tests.file_keyring.FileKeyring",
           "CONTEXTLENS_TEST_KEYRING": str(tmp_path / "keyring.json")}  # fmt: skip
    env.pop("CONTEXTLENS_API_KEY", None)
    with running_server(model_path, tmp_path / "keyed.log", n_ctx=N_CTX, api_key=key) as srv:
        doc = _excerpt(tmp_path / "d.txt", 0, 1500)
        run = ["run", str(doc), "--strategy", "head", "--max-tokens", "8", "--engine", srv.url,
               "--n-ctx", str(N_CTX), "--db", str(tmp_path / "h.db")]  # fmt: skip
        refused = _cli(*run, env=env)
        assert refused.returncode == EXIT_ENGINE_CRASHED and "it needs an API key" in refused.stderr
        saved = _cli("remote", "key", srv.url, env=env, stdin=key + "\n")
        assert saved.returncode == EXIT_OK, saved.stderr
        assert "kept in the system keyring" in saved.stderr
        ran = _cli(*run, env=env)
        assert ran.returncode == EXIT_OK, ran.stderr
        # a key in the environment goes to the server $CONTEXTLENS_API_HOST names, no other
        elsewhere = {**env, "CONTEXTLENS_API_KEY": key, "PYTHON_KEYRING_BACKEND":
                     "keyring.backends.fail.Keyring"}  # fmt: skip
        unscoped = _cli(*run, env=elsewhere)
        assert unscoped.returncode == EXIT_ENGINE_CRASHED and "it needs an API key" in (
            unscoped.stderr)  # fmt: skip
        assert unscoped.stderr.startswith(
            f"warning: $CONTEXTLENS_API_KEY is not sent to {srv.url}: it goes only to the server "
            "$CONTEXTLENS_API_HOST names, and $CONTEXTLENS_API_HOST is not set (set "
            f"$CONTEXTLENS_API_HOST={srv.url} to use it there)\n"
        )
        other = _cli(*run, env={**elsewhere, "CONTEXTLENS_API_HOST": "https://api.example.com"})
        assert other.returncode == EXIT_ENGINE_CRASHED
        assert "$CONTEXTLENS_API_HOST names another server (https://api.example.com)" in (
            other.stderr)  # fmt: skip
        port = srv.url.rsplit(":", 1)[1]
        scoped = _cli(*run, env={**elsewhere, "CONTEXTLENS_API_HOST": f"127.0.0.1:{port}/v1"})
        assert scoped.returncode == EXIT_OK, scoped.stderr
        assert "warning: the API key" not in scoped.stderr  # loopback: nothing to warn of
        exported = tmp_path / "s.ctxlens"
        export = _cli("snapshots", "export", "1", str(exported), "--db", str(tmp_path / "h.db"),
                      env=env)  # fmt: skip
        assert export.returncode == EXIT_OK, export.stderr
    for stored in (tmp_path / "h.db", exported):
        assert key.encode() not in stored.read_bytes()
    assert json.loads((tmp_path / "keyring.json").read_text()) == {f"ContextLens\n{srv.url}": key}
    forget = _cli("remote", "key", srv.url, "--forget", env=env)
    assert forget.returncode == EXIT_OK and "was removed" in forget.stderr
    again = _cli("remote", "key", srv.url, "--forget", env=env)
    assert again.returncode == EXIT_OK and "no API key kept for" in again.stderr
    nowhere = {k: v for k, v in env.items() if k != "PYTHON_KEYRING_BACKEND"}
    nowhere["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    refused = _cli("remote", "key", srv.url, env=nowhere, stdin=key + "\n")
    assert refused.returncode == EXIT_BAD_INPUT
    assert refused.stderr.strip().startswith("error: cannot save the API key: this system has no "
                                             "keyring")  # fmt: skip


def _own_address() -> str | None:
    """This machine's address on its network (not loopback), or None when it has none."""

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_a_key_about_to_go_over_plain_http_to_another_machine_is_said_first(
    tmp_path: Path,
) -> None:
    own = _own_address()
    if own is None:
        pytest.skip("this machine has no network address but loopback")
    url = f"http://{own}:{free_port()}"  # nothing listens: refused at once, after the warning
    env = {**os.environ, "CONTEXTLENS_API_KEY": "sk-test", "CONTEXTLENS_API_HOST": url}
    done = _cli("remote", "info", url, "--n-ctx", "512", "--retries", "0", env=env)
    assert done.returncode == EXIT_ENGINE_CRASHED
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"warning: the API key goes to {own}:{url.rsplit(':', 1)[1]} over plain HTTP, "
        "unencrypted, where anyone on the network in between can read it (use https:// if the "
        "server offers it)",
        f"error: cannot reach the server at {url}: the connection was refused (is the server "
        "running?)",
    ]
    keyless = _cli("remote", "info", url, "--n-ctx", "512", "--retries", "0",
                   env={**env, "CONTEXTLENS_API_KEY": ""})  # fmt: skip
    assert "warning" not in keyless.stderr  # no key: nothing to warn of


def test_a_batch_finishes_every_document_on_a_one_slot_server_with_its_defaults(
    model_path: Path, tmp_path: Path
) -> None:
    """llama-cpp-python's server as a person starts it cuts a streaming reply short when another
    request arrives: two documents in flight lost two of three. The batch keeps to the one
    request it serves (said once) and every request of a document takes its turn."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(3):
        _excerpt(folder / f"tiny-{i}.txt", 20_000 * (i + 1), 500)
    with default_server(model_path, tmp_path / "server.log", n_ctx=2048) as srv:
        done = _cli("batch", str(folder), "--strategy", "head", "--max-tokens", "8",
                    "--engine", srv.url, "--n-ctx", "2048", "--concurrency", "2", "--db",
                    str(tmp_path / "h.db"), "--json", timeout=120)  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    summary = _lines(done.stdout)[-1]
    assert summary["done"] == 3 and summary["failed"] == 0, done.stdout
    note = (f"warning: {srv.url} (llama-cpp-python) serves 1 request at a time: 1 document in "
            "flight, not the 2 of --concurrency")  # fmt: skip
    assert done.stderr.count(note) == 1
