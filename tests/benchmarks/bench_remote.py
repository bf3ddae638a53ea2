"""Remote engines: documents per minute with 1, 2 and 4 in flight, and what the HTTP path costs.

Run with ``make bench`` (or ``python tests/benchmarks/bench_remote.py [--quick]``), default model,
servers on loopback started here:

- Throughput: the real ``contextlens-cli batch`` (summarize, ``head``) over a folder of
  ``--docs`` documents with ``--concurrency`` 1, 2 and 4, each into a new history file; the
  figure is the command's own documents per minute, the baseline the same server with one in
  flight. First against llama-cpp-python's server (``python -m llama_cpp.server``), which runs
  one request at a time; then against llama.cpp's ``llama-server`` with ``--parallel 4`` when
  one is found (``$LLAMA_SERVER``, or ``packaging/build-llama-server.sh``'s build), which batches
  the requests it has in flight.
- Overhead: the same job (summarize, ``head``, one document per round, a new document each
  round so neither side reuses the last one's cache) on the local engine host and through the
  remote engine on llama-cpp-python's server, same model, threads and context, alternating
  rounds, medians of the job's seconds: remote / local.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import platformdirs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from app.core.default_model import default_model_path  # noqa: E402
from app.core.engine.host import EngineHost  # noqa: E402
from app.core.engine.remote import RemoteEngine  # noqa: E402
from app.core.engine.remote_http import Connection  # noqa: E402
from app.core.engine.types import LoadSettings, default_threads  # noqa: E402
from app.core.jobs.tasks import JobFinished, summarize  # noqa: E402
from app.core.paths import APP_NAME, cache_dir, sample_document  # noqa: E402
from app.core.tokens import exact_counter, host_tokenize  # noqa: E402
from tests.benchmarks.report import parse_args, row, write_rows  # noqa: E402
from tests.remote_server import free_port, running_server  # noqa: E402

N_CTX = 1024  # per request (llama-server: per slot)
PARALLEL = 4
OVERHEAD_GOAL = "<= 1.10"
MAX_EXCERPTS = 60  # documents the sample is cut into: six batches of up to 8, and the rounds
ONE_SLOT = (
    "llama-cpp-python's server runs one request at a time (one model, one slot): requests in "
    "flight wait in its queue, so documents per minute can only hold, not rise."
)
BATCHED = (
    "llama-server batches the requests in flight into one decode per step; on a 2-core CPU that "
    "shares only the weight passes of generation, while each document's prompt costs the same."
)


def excerpts(folder: Path, count: int, chars: int, first: int) -> Path:
    """``count`` documents of ``chars`` characters of the sample, the ``first``-th excerpt on:
    every run gets documents of its own, so no server answers one from its prompt cache
    (llama-server keeps processed prompts for later requests)."""
    text = sample_document().read_text(encoding="utf-8")
    stride = (len(text) - 40_000) // MAX_EXCERPTS
    folder.mkdir(parents=True)
    for i in range(count):
        start = 40_000 + (first + i) * stride
        (folder / f"part-{i:02}.txt").write_text(text[start : start + chars], encoding="utf-8")
    return folder


def batch_rate(url: str, folder: Path, concurrency: int, max_tokens: int) -> float:
    """Documents per minute of one `contextlens-cli batch` run (its own summary figure). The
    model's GGUF is given, as docs/server.md advises: counts are made here, so planning the
    next documents does not wait behind the server's generation (llama-cpp-python's server
    answers /extras/tokenize only between completions)."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "batch", str(folder), "--strategy", "head",
             "--max-tokens", str(max_tokens), "--engine", url, "--n-ctx", str(N_CTX),
             "--model", str(default_model_path()), "--concurrency", str(concurrency),
             "--lanes", "0", "--db", f"{tmp}/h.db", "--json"],
            capture_output=True, text=True, cwd=ROOT, check=False, timeout=3600,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"batch failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return float(summary["documents_per_minute"])


# `make setup` keeps the path of its llama-server build here (tests run with a HOME and a cache
# folder of their own, where the build is not)
SETUP_LLAMA_SERVER = ROOT / ".venv" / ".llama-server"


def llama_server() -> Path | None:
    """llama.cpp's server binary: $LLAMA_SERVER, else the set-up's build of
    build-llama-server.sh, else one in the cache folder (or the user's own), else PATH."""
    given = os.environ.get("LLAMA_SERVER")
    if given:
        return Path(given)
    with contextlib.suppress(OSError):
        recorded = Path(SETUP_LLAMA_SERVER.read_text(encoding="utf-8").strip())
        if recorded.is_file():
            return recorded
    folders = dict.fromkeys([cache_dir(), Path(platformdirs.user_cache_dir(APP_NAME))])
    built = sorted(p for f in folders for p in (f / "llama-server").glob("*/bin/llama-server"))
    found = built[-1] if built else shutil.which("llama-server")
    return Path(found) if found else None


def start_llama_server(binary: Path, model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    out = log.open("wb")
    proc = subprocess.Popen(
        [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
         "--parallel", str(PARALLEL), "--ctx-size", str(N_CTX * PARALLEL),
         "--threads", str(default_threads()), "--no-webui"],
        stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited: {log.read_text(errors='replace')[-500:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).is_success:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("llama-server did not start")


def job_seconds(engine: object, text: str, counter: object, max_tokens: int) -> float:
    t0 = time.perf_counter()
    for ev in summarize(engine, text, counter, strategy="head", n_ctx=N_CTX,  # type: ignore[arg-type]
                        max_tokens=max_tokens):  # fmt: skip
        if isinstance(ev, JobFinished):
            assert ev.result.error is None and ev.result.outputs, ev.result.error
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=8, help="documents in the batch")
    parser.add_argument("--chars", type=int, default=2500, help="characters per document")
    parser.add_argument("--max-tokens", type=int, default=32, help="summary length")
    parser.add_argument("--rounds", type=int, default=3, help="overhead rounds per engine")
    args = parse_args(parser, {"docs": 4, "chars": 1500, "max_tokens": 16, "rounds": 2})
    model = default_model_path()
    rows = []
    if args.docs * 6 + args.rounds > MAX_EXCERPTS:
        parser.error(f"at most {(MAX_EXCERPTS - args.rounds) // 6} documents per batch")
    with tempfile.TemporaryDirectory() as tmp:
        batches = iter(range(6))

        def folder() -> Path:
            n = next(batches)
            return excerpts(Path(tmp) / f"docs-{n}", args.docs, args.chars, n * args.docs)

        print(f"{args.docs} documents of {args.chars:,} characters, summaries of "
              f"{args.max_tokens} tokens, n_ctx {N_CTX}, {default_threads()} threads")  # fmt: skip
        with running_server(model, Path(tmp) / "python.log", n_ctx=N_CTX) as srv:
            rates = {c: batch_rate(srv.url, folder(), c, args.max_tokens) for c in (1, 2, 4)}
            print(
                "llama-cpp-python's server: "
                + ", ".join(f"{c} in flight {r:.2f} docs/min" for c, r in rates.items())
            )
            for c in (2, 4):
                rows.append(row(f"documents/min, {c} in flight, llama-cpp-python's server",
                                "1 in flight, same server", rates[c], rates[c] / rates[1],
                                ">= 0.9", unit="docs/min", why=ONE_SLOT))  # fmt: skip
            rows.append(overhead(srv.url, model, args))
        binary = llama_server()
        if binary is None:
            print("llama-server: not found (set LLAMA_SERVER, or run "
                  "packaging/build-llama-server.sh); its rows are left out")  # fmt: skip
        else:
            proc, url = start_llama_server(binary, model, Path(tmp) / "llama-server.log")
            try:
                rates = {c: batch_rate(url, folder(), c, args.max_tokens) for c in (1, 2, 4)}
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            print(
                f"llama-server --parallel {PARALLEL}: "
                + ", ".join(f"{c} in flight {r:.2f} docs/min" for c, r in rates.items())
            )
            for c in (2, 4):
                rows.append(row(f"documents/min, {c} in flight, llama-server --parallel "
                                f"{PARALLEL}", "1 in flight, same server", rates[c],
                                rates[c] / rates[1], "> 1.0", unit="docs/min",
                                why=BATCHED))  # fmt: skip
    write_rows(args.json, "bench_remote", rows)
    return 0


def overhead(url: str, model: Path, args: argparse.Namespace) -> dict[str, object]:
    """The same job on the local engine host and through the server, alternating rounds."""
    text = sample_document().read_text(encoding="utf-8")
    stride = (len(text) - 40_000) // MAX_EXCERPTS
    docs = [text[40_000 + (MAX_EXCERPTS - 1 - i) * stride :][: args.chars * 2]
            for i in range(args.rounds)]  # fmt: skip
    local_s, remote_s = [], []
    with EngineHost() as host, RemoteEngine(Connection(url), n_ctx=N_CTX,
                                            model_path=model) as remote:  # fmt: skip
        host.load(model, LoadSettings(n_ctx=N_CTX))
        counter = exact_counter(model, host_tokenize(host))
        remote.connect()
        for i, doc in enumerate(docs):
            local_s.append(job_seconds(host, doc, counter, args.max_tokens))
            remote_s.append(job_seconds(remote, doc, remote.counter(), args.max_tokens))
            print(f"  round {i + 1}: local {local_s[-1]:.2f} s, remote {remote_s[-1]:.2f} s")
    local, there = statistics.median(local_s), statistics.median(remote_s)
    print(f"job seconds, remote / local (median of {args.rounds}): {there / local:.3f}")
    return row("summarize job through the server (seconds)", "the same job on the local engine",
               there, there / local, OVERHEAD_GOAL, unit="s",
               why="The remote path adds a request per model call, the server's tokenizing of "
                   "the prompt text and one SSE event per token; it reuses the server's prompt "
                   "cache as the local engine reuses its KV cache.")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
