"""A pool of servers: documents per minute on one server and on two, and two with one killed.

Run with ``python tests/benchmarks/bench_pool.py [--quick]`` (part of ``contextlens-cli bench``):
llama.cpp's ``llama-server`` on the default model (``$LLAMA_SERVER``, or the build of
``packaging/build-llama-server.sh``), every server pinned to a core of its own with one thread
and ``--parallel 1``, so that two servers on two cores are a fair comparison with one. The same
folder of ``--docs`` excerpts of the sample text is run by the real ``contextlens-cli batch``
(summarize, ``head``, the GGUF given with ``--model``), each run on servers started for it (no
server answers from a prompt it cached in an earlier run) and into a new history file:

- (a) one server on core 0; (b) two servers on cores 0 and 1 (``--engine A --engine B``);
- (c) the same two, the second SIGKILLed when half the documents are done (counted from the
  ``--json`` lines): the batch must exit 0 with every document recorded exactly once in the
  history with a complete reply (finish reason ``stop`` or ``length``).

Also measured, for what a pool of 100 servers would need (docs/server.md, "A pool of servers"):
the history's one writer in records per second and a check that a document was not done before
(a batch makes one per server of its pool), on a new history file; and the batch process's own
CPU seconds per document (its resource usage, less that of the same command run again, when
every document is skipped).
Goal (issue 50): (b) at least 1.7x the documents per minute of (a).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.cli.documents import read_document  # noqa: E402
from app.core.default_model import default_model_path  # noqa: E402
from app.core.jobs.events import JobResult, OutputSpan  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from app.services.jobs import EngineFacts, JobSpec  # noqa: E402
from app.services.versions import open_history  # noqa: E402
from tests.benchmarks.bench_remote import excerpts, llama_server  # noqa: E402
from tests.benchmarks.report import Row, parse_args, row, write_rows  # noqa: E402
from tests.llama_servers import llama_servers  # noqa: E402

N_CTX = 1024  # per slot: each server runs one slot
BATCH_TIMEOUT_S = 3600  # one batch run, at most
SPEED_UP_GOAL = ">= 1.7"
COMPLETE = ("stop", "length")  # a reply the model ended, not one cut by a lost server
TWO_SERVERS = (
    "Each server runs one thread on a core of its own: two servers can at best double one. The "
    "batch process itself (planning, counting, streaming) shares those two cores, and the last "
    "document of the folder leaves the other server idle."
)
ONE_KILLED = (
    "With the second server killed when half the documents are done, the ideal is 2/3 of two "
    "servers' rate (the second half on one server), less the killed server's document in flight, "
    "which starts again from its beginning on the server left."
)
WRITER = (
    "Every result is recorded by the batch's one writer, one SQLite transaction per document: a "
    "pool whose documents end faster than this waits on the history, however many servers it has."
)
CLIENT = (
    "The batch process plans, counts and streams every document: with its Python threads on one "
    "core at a time, one core feeds about 1/ratio servers as busy as these."
)


@dataclass
class Run:
    """One `contextlens-cli batch` run: its exit status, its `--json` lines, its stderr, the
    history it wrote and the CPU seconds the process used."""

    rc: int
    lines: list[dict[str, Any]]
    stderr: str
    db: Path
    cpu_s: float
    killed: str | None = None  # the server SIGKILLed halfway, if any
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, Any]:
        return self.lines[-1] if self.lines and self.lines[-1].get("type") == "done" else {}

    @property
    def rate(self) -> float:
        return float(self.summary.get("documents_per_minute", 0.0))


def start_servers(count: int, logs: Path) -> Any:
    """``count`` llama-servers on the default model, the i-th pinned to core i, one thread and
    one slot each (tests/llama_servers.py)."""
    return llama_servers(default_model_path(), count, logs, parallel=1, ctx_per_slot=N_CTX,
                         threads=1, cores=list(range(count)))  # fmt: skip


def batch(folder: Path, urls: list[str], db: Path, max_tokens: int, *,
          kill_at: int = 0, kill: Any = None) -> Run:  # fmt: skip
    """`contextlens-cli batch` over ``folder`` on the servers ``urls``; with ``kill_at``, ``kill``
    is called once that many documents are done (read from its `--json` lines as they come)."""
    engines = [arg for url in urls for arg in ("--engine", url)]
    command = [sys.executable, "-m", "app.cli", "batch", str(folder), "--strategy", "head",
               "--max-tokens", str(max_tokens), *engines, "--model", str(default_model_path()),
               "--lanes", "0", "--db", str(db), "--json"]  # fmt: skip
    err_path = db.with_suffix(".stderr")
    lines: list[dict[str, Any]] = []
    done = 0
    killed = None
    with err_path.open("w", encoding="utf-8") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
        assert proc.stdout is not None
        watchdog = threading.Timer(BATCH_TIMEOUT_S, proc.kill)  # a batch that hangs ends here
        watchdog.start()
        for raw in proc.stdout:
            if not raw.strip().startswith("{"):
                continue
            line = json.loads(raw)
            lines.append(line)
            if line.get("type") == "document" and line.get("status") == "done":
                done += 1
                if kill_at and done == kill_at and killed is None:
                    killed = kill()
        _, status, usage = os.wait4(proc.pid, 0)
        watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = err_path.read_text(encoding="utf-8")
    return Run(proc.returncode, lines, stderr, db, usage.ru_utime + usage.ru_stime, killed,
               [x for x in lines if x.get("type") == "server"])  # fmt: skip


def recorded(db: Path) -> dict[str, list[tuple[str, str | None]]]:
    """Each document's file name -> the (finish reason, error) of every run recorded for it."""
    runs: dict[str, list[tuple[str, str | None]]] = {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        for path, reason, error in con.execute(
            "SELECT d.path, r.finish_reason, r.error FROM runs r"
            " JOIN prompt_versions v ON r.version_id = v.id"
            " JOIN sessions s ON v.session_id = s.id JOIN documents d ON s.document_id = d.id"
        ):
            runs.setdefault(Path(path).name, []).append((reason, error))
    return runs


def once_each(folder: Path, db: Path) -> tuple[int, list[str]]:
    """(documents recorded exactly once with a complete reply, what was wrong with the others)."""
    runs = recorded(db)
    good, wrong = 0, []
    for name in sorted(p.name for p in folder.iterdir()):
        got = runs.get(name, [])
        if len(got) == 1 and got[0][0] in COMPLETE and got[0][1] is None:
            good += 1
        else:
            wrong.append(f"{name}: {len(got)} runs {[r for r, _ in got]}")
    return good, wrong


def store_costs(count: int, chars: int, model_db: Path, folder: Path) -> tuple[float, float]:
    """(seconds a record takes on the history's one writer, seconds one check that a document
    was not done before takes), as a batch uses them, over ``count`` new documents recorded one
    after the other on a new history file (a result as big as a real one from ``model_db``). A
    batch checks each document once per server of its pool (a result of any of them counts),
    in its worker threads; it records each on its one writer."""
    with sqlite3.connect(f"file:{model_db}?mode=ro", uri=True) as con:
        plan_json, outputs_json = con.execute("SELECT plan, outputs FROM runs LIMIT 1").fetchone()
    plan = json.loads(plan_json)
    reply = "\n\n".join(str(o.get("text", "")) for o in json.loads(outputs_json)) or "x" * 160
    text = sample_document().read_text(encoding="utf-8")
    stride = (len(text) - chars) // count
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"w-{i:04}.txt").write_text(text[i * stride :][:chars], encoding="utf-8")
    docs = [read_document(str(p)) for p in sorted(folder.iterdir())]
    spec = JobSpec(task="summarize", strategies=("head",), max_tokens=32, lanes=None)
    facts = EngineFacts(model_label="http://127.0.0.1:8080 smollm2", model_sha256="",
                        engine="http://127.0.0.1:8080", kv_cache_type=None)  # fmt: skip
    h = open_history(folder.parent / "writer.db")
    check_s = record_s = 0.0
    try:
        for doc in docs:
            t0 = time.perf_counter()
            assert h.done_before(doc, spec, N_CTX, facts) is None
            t1 = time.perf_counter()
            span = OutputSpan("summary", reply, ((0, len(doc.text)),), 0, "stop")
            h.record_result(doc, spec, JobResult("summarize", "head", "stop", N_CTX,
                                                 prompt_tokens=700, completion_tokens=32,
                                                 outputs=[span], plan=plan), facts)  # fmt: skip
            check_s += t1 - t0
            record_s += time.perf_counter() - t1
    finally:
        h.close()
    return record_s / count, check_s / count


def say(name: str, run: Run, docs: int) -> None:
    servers = run.summary.get("servers", {})
    each = ", ".join(f"{url}: {s.get('documents')} documents, lost {s.get('lost')} times"
                     for url, s in servers.items())  # fmt: skip
    print(f"{name}: {run.rate:.2f} docs/min, exit {run.rc}, batch process {run.cpu_s:.1f} CPU s "
          f"({run.cpu_s / docs:.2f} s a document){'; ' + each if each else ''}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=24, help="documents in the folder")
    parser.add_argument("--chars", type=int, default=2500, help="characters per document")
    parser.add_argument("--max-tokens", type=int, default=32, help="summary length")
    parser.add_argument("--records", type=int, default=500, help="records timed for the writer")
    args = parse_args(parser, {"docs": 8, "chars": 1200, "max_tokens": 16, "records": 100})
    if os.cpu_count() is None or (os.cpu_count() or 0) < 2:
        raise SystemExit("bench_pool needs two cores: one server pinned to each")
    if not 4 <= args.docs <= 60:
        parser.error("--docs must be between 4 and 60")
    if llama_server() is None:
        print("llama-server: not found (set LLAMA_SERVER, or run "
              "packaging/build-llama-server.sh); no rows")  # fmt: skip
        write_rows(args.json, "bench_pool", [])
        return 0
    print(f"{args.docs} documents of {args.chars:,} characters, summaries of {args.max_tokens} "
          f"tokens; llama-server --parallel 1 --threads 1, n_ctx {N_CTX}, "
          "pinned a core each")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        folder = excerpts(base / "docs", args.docs, args.chars, 0)

        def on(count: int, name: str, kill_at: int = 0, again: bool = False) -> list[Run]:
            """The batch on ``count`` new servers (and, with ``again``, the same command once
            more on them: every document skipped, what the batch process costs without any)."""
            with start_servers(count, base / f"logs-{name}") as servers:
                urls = [s.url for s in servers]

                def kill() -> str:
                    servers[-1].kill()
                    return str(servers[-1].url)

                runs = [batch(folder, urls, base / f"{name}.db", args.max_tokens,
                              kill_at=kill_at, kill=kill)]  # fmt: skip
                if again:
                    runs.append(batch(folder, urls, base / f"{name}.db", args.max_tokens))
                return runs

        [one] = on(1, "one")
        say("(a) one server", one, args.docs)
        two, rerun = on(2, "two", again=True)
        say("(b) two servers", two, args.docs)
        skipped = rerun.summary.get("skipped", 0)
        print(f"    the same command again: {skipped} of {args.docs} skipped, exit {rerun.rc}, "
              f"{rerun.cpu_s:.1f} CPU s")  # fmt: skip
        for name, run in (("one server", one), ("two servers", two)):
            if run.rc != 0 or not run.rate:
                raise SystemExit(f"the batch on {name} failed ({run.rc}): {run.stderr[-400:]}")
        half = args.docs // 2
        [lost] = on(2, "killed", kill_at=half)
        say(f"(c) two servers, the second killed after {half} documents", lost, args.docs)
        good, wrong = once_each(folder, lost.db)
        lost_lines = [e for e in lost.events if e.get("event") == "lost"]
        said = lost.killed is not None and f"server {lost.killed} lost" in lost.stderr
        moved = Counter(url for x in lost.lines for url in x.get("moved_from", []))
        print(f"    {good}/{args.docs} documents recorded exactly once with a complete reply; "
              f"{len(lost_lines)} 'lost' line(s) in --json, {sum(moved.values())} document(s) "
              f"moved; the progress {'named' if said else 'did NOT name'} "
              "the lost server")  # fmt: skip
        for line in wrong:
            print(f"    wrong: {line}")
        record_s, check_s = store_costs(args.records, args.chars, two.db, base / "w" / "docs")
    speed_up = two.rate / one.rate
    per_s = two.rate / 60
    per_doc_cpu = max(0.0, two.cpu_s - rerun.cpu_s) / args.docs  # less the start and the skips
    client = per_doc_cpu / (60 / one.rate)
    print(f"two servers / one: {speed_up:.2f}x (goal {SPEED_UP_GOAL}); one killed / two: "
          f"{lost.rate / two.rate:.2f}x")  # fmt: skip
    records = 1 / record_s
    print(f"one writer: {records:.0f} records/s ({record_s * 1000:.1f} ms a record; a check "
          f"that a document was not done before {check_s * 1000:.1f} ms, one per server), "
          f"{records / per_s:.0f}x the two servers' {per_s:.2f} documents/s")  # fmt: skip
    print(f"batch process: {per_doc_cpu:.3f} CPU s a document, {client:.3f} of a core per busy "
          "server")  # fmt: skip
    note = f"{args.docs} documents of {args.chars:,} characters, {args.max_tokens}-token summaries"
    rows: list[Row] = [
        row("documents/min, two servers (a core each)", "one server, same folder", two.rate,
            speed_up, SPEED_UP_GOAL, unit="docs/min", note=note, why=TWO_SERVERS),
        row("documents/min, two servers, one killed halfway", "two servers, none killed",
            lost.rate, lost.rate / two.rate, ">= 0.5", unit="docs/min",
            note=f"exit {lost.rc}; {len(lost_lines)} server(s) lost", why=ONE_KILLED),
        row("documents recorded exactly once, complete, one server killed", "documents in the "
            "folder", good, good / args.docs, ">= 1", unit="docs",
            note=("; ".join(wrong)[:300] or f"exit {lost.rc}")
                 + f"; the lost server {'named' if said else 'NOT named'} on stderr"),
        row("batch exit status, one server killed halfway", "0: every document done", lost.rc,
            lost.rc, "<= 0", note="3 would mean every server of the pool was lost"),
        row("the history's one writer, records/s", "two servers' documents/s", records,
            records / per_s, ">= 50", unit="records/s", why=WRITER,
            note=f"{args.records} records, {check_s * 1000:.1f} ms a check per server; 50x: "
                 "the writer keeps up with 100 such servers"),
        row("batch process CPU per document", "a document's seconds on one server",
            per_doc_cpu, client, "<= 0.05", unit="s", why=CLIENT,
            note=f"{two.cpu_s:.1f} CPU s, less {rerun.cpu_s:.1f} s of the same command again "
                 "(every document skipped)"),
    ]  # fmt: skip
    write_rows(args.json, "bench_pool", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
