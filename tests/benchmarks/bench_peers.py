"""ContextLens against the summarization pipelines people would write instead, end to end.

Run with ``python tests/benchmarks/bench_peers.py [--size BYTES] [--full] [--quick]
[--only NAME[,NAME]] [--n-ctx 2048] [--max-tokens 128] [--model GGUF] [--json PATH]`` (or
``contextlens-cli bench --only peers``; the peers come with the ``bench`` extra). The document is
the Jargon File sample (resources/samples) cut on a paragraph end to ``--size`` bytes (200 kB;
``--quick``: 20 kB); ``--full`` adds the whole 1.6 MB file as a second document. Before any run,
``--needles`` short invented facts (5) are planted in each document, each a paragraph of its
own at a seeded paragraph end (tests/benchmarks/peers_quality.py).

The pipelines, each in a fresh process of its own, one after another, so that its wall time
(process start to summary, model load and imports included) and its peak memory are its own:

- ``langchain-map-reduce``: ``load_summarize_chain(llm, chain_type="map_reduce",
  token_max=BUDGET)`` (langchain_classic) over ``langchain_community.llms.LlamaCpp``, documents
  from ``RecursiveCharacterTextSplitter(chunk_size=BUDGET, chunk_overlap=0)`` measuring length in
  the model's own tokens; its default prompts.
- ``langchain-refine``: the same with ``chain_type="refine"``, its chunks of ROLLING_BUDGET
  tokens: a refine prompt carries the summary so far (up to ``--max-tokens``) next to the chunk,
  which at BUDGET would not fit the context.
- ``llamaindex-tree``: ``TreeSummarize`` with ``llama_index.llms.llama_cpp.LlamaCPP`` over the
  chunks of ``SentenceSplitter(chunk_size=BUDGET, chunk_overlap=0)`` (the model's tokenizer as
  ``Settings.tokenizer``, no embedding model: nothing is downloaded), asked "Summarize the
  document."; TreeSummarize repacks the chunks to fill its context window (with its prompt
  helper's 10 % overlap) before it summarizes.
- ``contextlens-map-reduce``: ``contextlens-cli run DOC --task summarize --strategy map-reduce
  --lanes 4 ... --json`` (a fresh history database in a temporary folder).
- ``contextlens-rolling``: the same with ``--strategy rolling``.

The same for all: the model (``--model``, SmolLM2-135M-Instruct Q4_1 by default), ``--n-ctx``, the
llama.cpp build (the installed llama-cpp-python), greedy decoding (temperature 0, no repetition
penalty: LangChain's default of 1.1 is turned off), at most ``--max-tokens`` reply tokens per call,
and the chunk budget: BUDGET is the document budget ContextLens plans its map-reduce windows with
at that context and reply size, ROLLING_BUDGET its rolling windows' (both from ``contextlens-cli
plan``, which plans as a summarize job does). Threads: by default each pipeline runs with its own
defaults, the peers with llama-cpp-python's (``n_threads`` half the logical cores), ContextLens
with its policy (the physical cores, fewer while other programs keep cores busy:
app/core/engine/threads.py); ``--threads N --contextlens-threads N`` gives every pipeline the same
fixed count, and ``--busy`` runs each beside a program that keeps one core busy
(tests/benchmarks/busy.py). The peers' models otherwise are set as a careful practitioner would set
them: ``n_batch`` 512 (llama-cpp-python's default; LangChain's is 8), ``n_ubatch`` 512 and no flash
attention (the defaults, as ContextLens's engine has them). The peers prompt the model with their
own templates as plain completions (neither applies the model's chat template by default);
ContextLens frames its prompts with the model's chat template.

Figures per pipeline: wall seconds; CPU seconds of its process tree (user + system, from
``getrusage`` of the finished children: less sensitive to other load on the machine than wall
time); prompt tokens llama.cpp evaluated (peers: counted inside their process by wrapping
``llama_cpp.Llama`` — the tokens of each prompt after llama-cpp-python's prefix reuse, see
tests/benchmarks/peers_child.py; ContextLens: its done record's ``prompt_tokens_evaluated``) and
their ratio to the document's tokens (ContextLens's exact count of the planted document);
generated tokens; model calls; the peak RSS of the process tree (sampled every 0.1 s; ContextLens
runs llama.cpp in a child process, counted in); heading coverage and part coverage of the final
summary (peers_quality.py: ``K`` = 10 equal parts, each covered when one of its 10 top tf-idf
terms is among the summary's stemmed words); needles reached (the share of needles whose whole
fact was in a prompt: peers, every prompt text sent; ContextLens, every chunk its JSON events
say it queued into a prompt) and needles whose key word the final summary holds.

Goals: the fastest ContextLens pipeline at equal or better part coverage takes at most 1/1.2 of
the fastest peer's wall time (met only when its part coverage is at least that peer's too); and
``rolling`` evaluates at most 1.1 prompt tokens per document token. A pipeline that fails is a
line of the table with its error; the others still run. Ctrl+C stops the running pipeline and
prints what ran.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.child_process import child_env, module_command  # noqa: E402
from app.core.default_model import default_model_path  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from tests.benchmarks import peers_quality as q  # noqa: E402
from tests.benchmarks.busy import busy_core  # noqa: E402
from tests.benchmarks.report import Row, parse_args, row  # noqa: E402

PEERS = ("langchain-map-reduce", "langchain-refine", "llamaindex-tree")
CONTEXTLENS = {"contextlens-map-reduce": "map-reduce", "contextlens-rolling": "rolling"}
PIPELINES = (*PEERS, *CONTEXTLENS)
CHILD = Path(__file__).with_name("peers_child.py")
CLI = Path(sys.executable).with_name("contextlens-cli")  # the installed command, if there is one
SAMPLE_S = 0.1  # how often the process tree's memory is read
STOP_GRACE_S = 10.0  # after Ctrl+C, how long a pipeline gets to end before it is killed
GOAL_SPEED = ">= 1.2"
GOAL_ROLLING = "<= 1.1"
MB = 1024 * 1024


@dataclass
class Document:
    label: str
    path: Path
    planted: q.Planted
    tokens: int  # ContextLens's exact count of the planted text
    budget: int  # the map-reduce windows' document budget
    rolling_budget: int
    heads: list[q.Heading]
    part_keys: list[list[str]]


@dataclass
class Run:
    """One pipeline on one document."""

    name: str
    doc: str
    error: str | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss: int = 0
    prompt_tokens_evaluated: int | None = None
    prompt_tokens_sent: int | None = None
    generated_tokens: int | None = None
    calls: int | None = None
    summary: str = ""
    prompts: list[str] = field(default_factory=list, repr=False)  # the texts that reached it
    reached_from: str = ""  # where the needle retention was read from
    phases: dict[str, float] = field(default_factory=dict)  # seconds, by phase
    notes: list[str] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)  # the 1-minute load average before and after
    # quality, filled in by judge()
    headings: tuple[int, int] = (0, 0)
    parts: tuple[int, int] = (0, 0)
    reached: list[bool] = field(default_factory=list)
    kept: list[bool] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def part_coverage(self) -> float:
        return self.parts[0] / self.parts[1] if self.parts[1] else 0.0


class Cancelled(Exception):
    """Ctrl+C while a pipeline ran."""


# ----- running a process -----------------------------------------------------------------------


@dataclass
class Watched:
    code: int
    started_at: float  # time.time() at the start
    ended_at: float
    lines: list[tuple[float, str]]  # stdout lines with the time each was read
    peak_rss: int
    cpu_s: float


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in members:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def watch(command: Sequence[str], stderr_path: Path) -> Watched:
    """Run ``command`` in its own session, reading its stdout line by line and sampling its
    process tree's memory; Ctrl+C stops it (SIGINT to its group, then SIGKILL) and raises
    :class:`Cancelled`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines: list[tuple[float, str]] = []
    peak = 0
    with stderr_path.open("wb") as err:
        started = time.time()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=child_env() | {"CONTEXTLENS_CALIBRATE": "0"},
                                text=True, encoding="utf-8", errors="replace")  # fmt: skip
        assert proc.stdout is not None
        stdout = proc.stdout

        def read() -> None:
            for line in stdout:
                lines.append((time.time(), line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            ps = psutil.Process(proc.pid)
            while proc.poll() is None:
                peak = max(peak, tree_rss(ps))
                time.sleep(SAMPLE_S)
        except psutil.NoSuchProcess:
            pass
        except KeyboardInterrupt:
            stop(proc)
            raise Cancelled from None
        code = proc.wait()
        ended = time.time()
        reader.join(timeout=5)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Watched(code, started, ended, lines, peak, cpu)


def stop(proc: subprocess.Popen[str]) -> None:
    for sig, wait in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def last_line(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")


# ----- the documents ---------------------------------------------------------------------------


def cli(*args: str) -> list[str]:
    """``contextlens-cli ARGS``: the installed command, else this Python running the package."""
    return [str(CLI), *args] if CLI.is_file() else module_command("app.cli", *args)


def plan_budget(path: Path, model: Path, strategy: str, *, n_ctx: int,
                max_tokens: int) -> tuple[int, int]:  # fmt: skip
    """(budget, document tokens) as a summarize job under ``strategy`` plans them, read from
    ``contextlens-cli plan`` (which plans as `run` does)."""
    command = cli("plan", str(path), "--model", str(model), "--strategy", strategy,
                  "--n-ctx", str(n_ctx), "--max-tokens", str(max_tokens), "--json")  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False,
                          env=child_env())  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"contextlens-cli plan failed: {done.stderr.strip()[-300:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return int(data["budget"]), int(data["total_tokens"])


def make_document(label: str, text: str, folder: Path, args: argparse.Namespace) -> Document:
    planted = q.plant(text, q.NEEDLES[: args.needles], args.seed)
    path = folder / f"{label.replace(' ', '-')}.txt"
    path.write_text(planted.text, encoding="utf-8", newline="")
    budget, tokens = plan_budget(path, args.model, "map-reduce", n_ctx=args.n_ctx,
                                 max_tokens=args.max_tokens)  # fmt: skip
    rolling_budget, _ = plan_budget(path, args.model, "rolling", n_ctx=args.n_ctx,
                                    max_tokens=args.max_tokens)  # fmt: skip
    return Document(label, path, planted, tokens, budget, rolling_budget,
                    q.headings(planted.text), q.part_key_terms(planted.text))  # fmt: skip


# ----- the pipelines ---------------------------------------------------------------------------


def run_peer(name: str, doc: Document, work: Path, args: argparse.Namespace) -> Run:
    run = Run(name, doc.label)
    out = work / f"{name}-{doc.path.stem}.json"
    budget = doc.rolling_budget if name == "langchain-refine" else doc.budget
    command = [sys.executable, str(CHILD), name, "--doc", str(doc.path), "--model",
               str(args.model), "--n-ctx", str(args.n_ctx), "--max-tokens", str(args.max_tokens),
               "--budget", str(budget), "--threads", str(args.threads),
               "--out", str(out)]  # fmt: skip
    err = work / f"{name}-{doc.path.stem}.err"
    w = watch(command, err)
    run.peak_rss, run.cpu_s = w.peak_rss, w.cpu_s
    try:
        data = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        run.error = last_line(err) or f"exit code {w.code}, no result"
        run.wall_s = w.ended_at - w.started_at
        return run
    run.error = data.get("error") or (None if w.code == 0 else f"exit code {w.code}")
    end = data.get("summary_at") or w.ended_at
    run.wall_s = end - w.started_at
    run.summary = data.get("summary", "")
    run.prompts = data.get("prompts", [])
    run.reached_from = "prompts sent"
    for key in ("prompt_tokens_evaluated", "prompt_tokens_sent", "generated_tokens", "calls"):
        setattr(run, key, data.get(key))
    marks = [(k, data[k]) for k in ("started_at", "imported_at", "loaded_at", "split_at")
             if k in data]  # fmt: skip
    names = {"imported_at": "start and imports", "loaded_at": "model load",
             "split_at": "splitting"}  # fmt: skip
    for (_, a), (k, b) in itertools.pairwise(marks):
        run.phases[names[k]] = b - a
    run.phases["start and imports"] = run.phases.get("start and imports", 0.0) + (
        data["started_at"] - w.started_at)  # the interpreter's own start, before the child's clock
    run.phases["prompt evaluation"] = data.get("prompt_eval_s", 0.0)
    run.phases["generation"] = data.get("generation_s", 0.0)
    run.phases["the rest (library code, tokenizing)"] = max(
        0.0, run.wall_s - sum(run.phases.values()))  # fmt: skip
    if "chunks" in data:
        run.notes.append(f"{data['chunks']} chunks of at most {budget:,} tokens from its splitter")
    return run


def run_contextlens(name: str, doc: Document, work: Path, args: argparse.Namespace) -> Run:
    run = Run(name, doc.label)
    strategy = CONTEXTLENS[name]
    db = work / f"history-{strategy}-{doc.path.stem}.db"
    threads = (["--threads", str(args.contextlens_threads), "--fixed-threads"]
               if args.contextlens_threads else [])  # fmt: skip
    command = cli("run", str(doc.path), "--task", "summarize", "--strategy", strategy,
                  "--lanes", str(args.lanes), "--n-ctx", str(args.n_ctx), "--max-tokens",
                  str(args.max_tokens), "--model", str(args.model), "--json",
                  "--db", str(db), *threads)  # fmt: skip
    err = work / f"{name}-{doc.path.stem}.err"
    w = watch(command, err)
    run.peak_rss, run.cpu_s = w.peak_rss, w.cpu_s
    done: dict[str, Any] | None = None
    done_at = w.ended_at
    chunks: list[tuple[str, int, int]] = []  # (step, start, end) queued into or evaluated in
    replies: dict[tuple[str, Any], list[float]] = {}  # (step, lane): first and last token's time
    planned_at = None
    expected = doc.rolling_budget if strategy == "rolling" else doc.budget
    for at, line in w.lines:
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = ev.get("type")
        if kind in ("chunk_queued", "chunk_evaluated"):
            chunks.append((ev["step"], ev["start"], ev["end"]))
        elif kind == "token_batch":
            span = replies.setdefault((ev.get("step"), ev.get("lane")), [at, at])
            span[1] = at
        elif kind == "plan_ready":
            planned_at = planned_at or at
            if ev.get("budget") != expected:
                run.notes.append(f"the job planned a budget of {ev.get('budget')} tokens, the "
                                 f"benchmark expected {expected:,} (and gave the peers "
                                 f"that)")  # fmt: skip
        elif kind == "error":
            run.error = ev.get("message")
        elif kind == "done":
            done, done_at = ev, at
    run.wall_s = done_at - w.started_at
    if done is None:
        run.error = run.error or last_line(err) or f"exit code {w.code}, no done record"
        return run
    if done.get("error") or done.get("refused"):
        run.error = done.get("error") or done.get("refused")
    run.prompt_tokens_evaluated = done.get("prompt_tokens_evaluated")
    run.prompt_tokens_sent = done.get("prompt_tokens")
    run.generated_tokens = done.get("completion_tokens")
    run.calls = len(done.get("ttft_s") or [])
    outputs = done.get("outputs") or []
    final = [o for o in outputs if o.get("step") == "summary"] or outputs[-1:]
    run.summary = final[-1]["text"] if final else ""
    if chunks:
        run.prompts = q.texts_of_ranges(doc.planted.text, chunks)
        run.reached_from = "the chunks its events say it queued or evaluated"
    else:
        windows = (done.get("plan") or {}).get("windows") or []
        run.prompts = [doc.planted.text[w["start"] : w["end"]] for w in windows]
        run.reached_from = "the plan's windows (no chunk_queued or chunk_evaluated events)"
    # From the events' arrival: until the plan, the replies streaming (lanes overlap: their
    # union), and the rest of the job, which is mostly prompt evaluation.
    start = planned_at - w.started_at if planned_at else 0.0
    generating = union_seconds(list(replies.values()))
    run.phases["start, counting, planning"] = start
    run.phases["prompt evaluation and the rest"] = max(0.0, run.wall_s - start - generating)
    run.phases["generation"] = generating
    if done.get("truncated"):
        run.notes.append("the job says part of the document never reached the model")
    return run


def union_seconds(spans: Sequence[Sequence[float]]) -> float:
    """The time the (start, end) spans cover together."""
    total, end = 0.0, float("-inf")
    for a, b in sorted((s[0], s[1]) for s in spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def judge(run: Run, doc: Document) -> None:
    run.headings = q.heading_coverage(doc.heads, run.summary)
    run.parts = q.part_coverage(doc.part_keys, run.summary)
    run.reached = q.reached(doc.planted.needles, run.prompts)
    run.kept = q.in_summary(doc.planted.needles, run.summary)


# ----- the report ------------------------------------------------------------------------------


def _n(x: int | None) -> str:
    return "—" if x is None else f"{x:,}"


def table(runs: Sequence[Run], doc: Document) -> list[str]:
    head = (f"{'pipeline':23s} {'wall s':>8s} {'cpu s':>8s} {'prompt eval':>11s} {'/doc tok':>8s} "
            f"{'gen tok':>7s} {'calls':>5s} {'peak MB':>7s} {'headings':>9s} {'parts':>6s} "
            f"{'reached':>7s} {'in sum':>6s}")  # fmt: skip
    lines = [head, "-" * len(head)]
    n = len(doc.planted.needles)
    for r in runs:
        if r.error is not None and not r.summary:
            lines.append(f"{r.name:23s} {r.wall_s:>8.1f} {r.cpu_s:>8.1f}  FAILED: {r.error}")
            continue
        ev = r.prompt_tokens_evaluated
        per = f"{ev / doc.tokens:.3f}" if ev is not None and doc.tokens else "—"
        heads = f"{r.headings[0]}/{r.headings[1]}"
        parts = f"{r.parts[0]}/{r.parts[1]}"
        lines.append(f"{r.name:23s} {r.wall_s:>8.1f} {r.cpu_s:>8.1f} {_n(ev):>11s} {per:>8s} "
                     f"{_n(r.generated_tokens):>7s} {_n(r.calls):>5s} {r.peak_rss / MB:>7.0f} "
                     f"{heads:>9s} {parts:>6s} {sum(r.reached)}/{n:<5d} "
                     f"{sum(r.kept)}/{n}")  # fmt: skip
        if r.error is not None:
            lines.append(f"{'':23s} ended with an error: {r.error}")
    return lines


def phases(r: Run) -> str:
    return ", ".join(f"{k} {v:,.1f} s" for k, v in r.phases.items())


def dominant(r: Run) -> str:
    """What took most of a pipeline's time, in words."""
    parts = sorted(r.phases.items(), key=lambda kv: -kv[1])
    top = ", ".join(f"{k} {v:,.0f} s" for k, v in parts[:2])
    return (f"{r.name}: {r.wall_s:,.0f} s ({top}); {_n(r.prompt_tokens_evaluated)} prompt tokens "
            f"evaluated")  # fmt: skip


def goal_rows(runs: Sequence[Run], doc: Document, suffix: str, note: str) -> list[Row]:
    rows: list[Row] = []
    ok = [r for r in runs if r.ok]
    peers = [r for r in ok if r.name in PEERS]
    ours = [r for r in ok if r.name in CONTEXTLENS]
    loads = [x for r in runs for x in r.load if x]
    if loads:
        note += (f"; load average {min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} cores "
                 "while they ran")  # fmt: skip
    if peers and ours:
        peer = min(peers, key=lambda r: r.wall_s)
        level = [r for r in ours if r.part_coverage >= peer.part_coverage]
        mine = min(level or ours, key=lambda r: r.wall_s)
        ratio = peer.wall_s / mine.wall_s if mine.wall_s else 0.0
        cov = (f"part coverage {mine.parts[0]}/{mine.parts[1]} against "
               f"{peer.parts[0]}/{peer.parts[1]}")  # fmt: skip
        r = row(f"ContextLens fastest pipeline vs the fastest peer, end to end{suffix}",
                f"{peer.name} ({peer.wall_s:,.1f} s)", mine.wall_s, ratio, GOAL_SPEED, unit="s",
                note=f"{mine.name}; {cov}; {note}")  # fmt: skip
        failed = []
        if not r["met"]:
            failed.append(f"speed: {mine.name} took {mine.wall_s:,.0f} s against "
                          f"{peer.name}'s {peer.wall_s:,.0f} s")  # fmt: skip
        if not level:
            r["met"] = False
            failed.append(f"coverage: no ContextLens pipeline covers as much as {peer.name} "
                          f"({cov})")  # fmt: skip
        faster = [o for o in ours if o.wall_s < mine.wall_s and o not in level]
        if faster and failed:
            failed.append("; ".join(f"{o.name} took {o.wall_s:,.0f} s but covers "
                                    f"{o.parts[0]}/{o.parts[1]}" for o in faster))  # fmt: skip
        if failed:
            r["why"] = ("; ".join(failed) + f". Time: {dominant(mine)}; {dominant(peer)}.")
        rows.append(r)
    rolling = next((r for r in ok if r.name == "contextlens-rolling"), None)
    if rolling is not None and rolling.prompt_tokens_evaluated is not None and doc.tokens:
        per = rolling.prompt_tokens_evaluated / doc.tokens
        r = row(f"rolling: prompt tokens evaluated per document token{suffix}",
                f"document tokens ({doc.tokens:,})", rolling.prompt_tokens_evaluated, per,
                GOAL_ROLLING, unit="tokens", note=note)  # fmt: skip
        if not r["met"]:
            extra = rolling.prompt_tokens_evaluated - doc.tokens
            r["why"] = (f"rolling evaluated {rolling.prompt_tokens_evaluated:,} prompt tokens for "
                        f"{doc.tokens:,} document tokens in {_n(rolling.calls)} model calls: the "
                        f"{extra:,} beyond the document are instruction frames and summaries so "
                        "far evaluated with its windows, or document tokens evaluated "
                        "again")  # fmt: skip
        rows.append(r)
    return rows


def figures(r: Run, doc: Document) -> dict[str, Any]:
    return {"pipeline": r.name, "document": doc.label, "error": r.error,
            "wall_s": round(r.wall_s, 3), "cpu_s": round(r.cpu_s, 3), "peak_rss_bytes": r.peak_rss,
            "prompt_tokens_evaluated": r.prompt_tokens_evaluated,
            "prompt_tokens_sent": r.prompt_tokens_sent, "document_tokens": doc.tokens,
            "evaluated_per_document_token": (round(r.prompt_tokens_evaluated / doc.tokens, 4)
                                             if r.prompt_tokens_evaluated is not None
                                             and doc.tokens else None),
            "generated_tokens": r.generated_tokens, "calls": r.calls,
            "heading_coverage": list(r.headings), "part_coverage": list(r.parts),
            "needles_reached": sum(r.reached), "needles_in_summary": sum(r.kept),
            "needles": len(doc.planted.needles), "reached_from": r.reached_from,
            "phases_s": {k: round(v, 3) for k, v in r.phases.items()}, "notes": r.notes,
            "summary": r.summary}  # fmt: skip


def write_json(path: str | None, rows: list[Row], pipelines: list[dict[str, Any]]) -> None:
    """report.py's file (``bench`` and ``rows``), plus every pipeline's figures."""
    if path is None:
        return
    data = {"bench": "peers", "rows": rows, "pipelines": pipelines}
    Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def print_document(doc: Document, runs: Sequence[Run]) -> None:
    print()
    print(f"== {doc.label}: {doc.tokens:,} tokens, {len(doc.planted.text):,} characters; "
          f"budget {doc.budget:,} tokens (rolling and refine {doc.rolling_budget:,}); "
          f"{len([h for h in doc.heads if h.key_terms])} headings with key terms, "
          f"{len(doc.part_keys)} parts")  # fmt: skip
    for line in table(runs, doc):
        print(line)
    print("headings: covered/counted; parts: parts covered (the goal's coverage); reached: "
          "needles whose fact was whole in a prompt; in sum: needles whose key word the "
          "summary holds; peak MB: the process tree's RSS")  # fmt: skip
    for r in runs:
        print(f"  {r.name}: {phases(r) or 'no phases'}")
        if r.reached_from:
            print(f"    needles read from {r.reached_from}")
        for note in r.notes:
            print(f"    note: {note}")
        if r.summary:
            text = " ".join(r.summary.split())
            print(f"    summary: {text[:300]!r}{'…' if len(text) > 300 else ''}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=default_model_path())
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=128, help="reply tokens per call")
    parser.add_argument("--size", type=int, default=200_000,
                        help="bytes of the Jargon File to summarize (cut on a paragraph end)")
    parser.add_argument("--full", action="store_true",
                        help="also summarize the whole 1.6 MB file (hours on a CPU)")
    parser.add_argument("--only", default=",".join(PIPELINES),
                        help=f"pipelines, comma-separated (default all: {', '.join(PIPELINES)})")
    parser.add_argument("--needles", type=int, default=5,
                        help=f"facts to plant (at most {len(q.NEEDLES)})")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="where the needles go")
    parser.add_argument("--lanes", type=int, default=4, help="ContextLens's --lanes")
    parser.add_argument("--threads", type=int, default=0,
                        help="the peers' n_threads and n_threads_batch (default 0: their "
                             "library's own, llama-cpp-python's half the cores)")  # fmt: skip
    parser.add_argument("--contextlens-threads", type=int, default=0,
                        help="ContextLens's --threads, fixed (default 0: its own policy, the "
                             "physical cores and fewer while other programs are busy)")
    parser.add_argument("--busy", action="store_true",
                        help="run every pipeline beside a program that keeps one core busy")
    parser.add_argument("--keep", type=Path, help="keep the work folder (documents, results, "
                        "logs) here instead of a temporary one")  # fmt: skip
    args = parse_args(parser, {"size": 20_000})
    if args.quick:
        args.full = False
    names = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := [s for s in names if s not in PIPELINES]:
        parser.error(f"unknown pipelines {unknown} (choose from {', '.join(PIPELINES)})")
    if not 1 <= args.needles <= len(q.NEEDLES):
        parser.error(f"--needles must be between 1 and {len(q.NEEDLES)}")
    if not args.model.is_file():
        parser.error(f"the model {args.model} does not exist")
    t_start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-peers-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    source = sample_document().read_text(encoding="utf-8")
    rows: list[Row] = []
    pipelines: list[dict[str, Any]] = []
    cancelled = False
    try:
        texts = [(f"{args.size // 1000} kB cut", q.cut(source, args.size))]
        if args.full:
            texts.append(("whole file", source))
        print(f"model {args.model.name}, n_ctx {args.n_ctx:,}, replies of at most "
              f"{args.max_tokens} tokens per call, greedy; peers' threads "
              f"{args.threads or 'their default'}, ContextLens's "
              f"{args.contextlens_threads or 'its default'}; "
              f"{'one core kept busy; ' if args.busy else ''}"
              f"{args.needles} needles (seed {args.seed}); pipelines: {', '.join(names)}",
              flush=True)  # fmt: skip
        for label, text in texts:
            doc = make_document(label, text, work, args)
            print(f"{label}: {doc.tokens:,} tokens, budget {doc.budget:,} (rolling "
                  f"{doc.rolling_budget:,})", flush=True)  # fmt: skip
            runs: list[Run] = []
            try:
                for name in names:
                    print(f"running {name} on the {label} …", flush=True)
                    load_before = os.getloadavg()[0]
                    try:
                        with busy_core() if args.busy else contextlib.nullcontext():
                            run = (run_peer(name, doc, work, args) if name in PEERS
                                   else run_contextlens(name, doc, work, args))  # fmt: skip
                    except OSError as exc:
                        run = Run(name, label, error=str(exc))
                    run.load = (load_before, os.getloadavg()[0])
                    run.notes.append(f"load average {run.load[0]:.1f} before, {run.load[1]:.1f} "
                                     f"after (1 min, {os.cpu_count()} cores)")  # fmt: skip
                    judge(run, doc)
                    runs.append(run)
                    print(f"  {name}: {run.wall_s:,.1f} s"
                          + (f", FAILED: {run.error}" if run.error else ""), flush=True)
            except (Cancelled, KeyboardInterrupt):
                cancelled = True
                if len(runs) < len(names):
                    runs.append(Run(names[len(runs)], label, error="cancelled (Ctrl+C)"))
            print_document(doc, runs)
            suffix = "" if label == texts[0][0] else f", {label}"
            note = (f"{label}, {doc.tokens:,} tokens, n_ctx {args.n_ctx:,}, {args.max_tokens} "
                    f"reply tokens, {args.model.name}")  # fmt: skip
            doc_rows = goal_rows(runs, doc, suffix, note)
            rows += doc_rows
            pipelines += [figures(r, doc) for r in runs]
            for r in doc_rows:
                verdict = "met" if r["met"] else "NOT met"
                print(f"goal {r['figure']}: {r['ratio']:.3g} ({r['goal']}) {verdict}"
                      + (f" — {r['why']}" if r.get("why") else ""))
            if cancelled:
                break
    except KeyboardInterrupt:
        cancelled = True
    finally:
        write_json(args.json, rows, pipelines)
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"whole run: {time.perf_counter() - t_start:,.0f} s")
    if cancelled:
        print("cancelled (Ctrl+C): the figures above are what ran", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
