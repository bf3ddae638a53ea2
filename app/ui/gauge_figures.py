"""The gauges' numbers: what each job event says, kept until the gauges next redraw.

Events only store numbers here; the gauges (app/ui/gauges.py) draw from them on a timer. No Qt:
every method takes the time it happens at (``time.monotonic()``). Each figure and where it comes
from:

- KV fill: ``KVLive`` a few times a second while a model call evaluates its prompt and
  generates, and ``KVStats`` at its end — llama.cpp's cells used of n_ctx and the size of the
  sequence's state in bytes. Before a run, 0 of the loaded context (:meth:`set_n_ctx`).
  In a batched map phase (``LanesStarted``) one figure per lane: each lane's prompt (its
  ``ChunkEvaluated`` positions) and reply (``TokenBatch`` counts) as they arrive, set to
  llama.cpp's count by the lane's ``KVStats``.
- Prompt progress: ``EvalProgress`` — the engine's tokens evaluated of the call's total, the
  rate so far and the time left at that rate; multi-pass jobs: ``PassStarted`` — window i of n.
- Generation tokens/s: ``TokenBatch`` token counts over the last second of their arrival times,
  sampled at every redraw while a job runs (:meth:`advance`).
- Prompt tokens/s, live: per model call, the engine's own figure from its ``EvalProgress``
  events. Where none come (a server), the document tokens of its ``ChunkEvaluated`` events
  over the time from the call's last ``ChunkQueued`` (the prompt goes to the engine) to its
  first ``ChunkEvaluated`` (the prompt is in the KV cache). Template tokens are not in those
  events, so this reads slightly low; it needs events delivered as they happen (a gap under
  20 ms is taken for batched delivery and not plotted). When the job ends, ``JobFinished``
  gives the job's own figure: evaluated tokens over the sum of its times to first token.
- CPU threads: llama.cpp's thread count of :meth:`set_threads` (the loaded model's most), each
  ``ThreadsSet`` (the engine gave a thread up while another program used a core, or took it
  back) with its reason, and ``JobResult.threads`` at the end of a job.
- Prompt lengths: ``JobResult.prompt_lengths`` against ``JobResult.n_ctx`` in tenths
  (``telemetry.PromptHistogram``), kept across runs; a refused job counts as "over".

Memory and VRAM are not events: the gauges sample them themselves.
"""

from __future__ import annotations

from collections import deque

from app.core.jobs.events import (
    ChunkEvaluated,
    ChunkQueued,
    EvalProgress,
    JobFinished,
    JobResult,
    KVLive,
    KVStats,
    LanesStarted,
    PassStarted,
    StrategiesFinished,
    ThreadsSet,
    TokenBatch,
)
from app.core.telemetry import PromptHistogram

REDRAW_MS = 100  # the gauges redraw about 10 times a second; a rate is never over less
RATE_WINDOW_S = 1.0  # generation tokens/s over the last second
HISTORY_S = 60.0  # the rates are kept (and plotted) over the last minute
MIN_PROMPT_S = 0.02  # a shorter gap between queued and evaluated is delivery, not prefill
LLAMA_CPP = "llama.cpp"  # who reports the KV figures, unless a server says otherwise

Point = tuple[float, float]  # (seconds since reset, tokens/s)


class GaugeFigures:
    """The latest figures of a run, and what outlives runs (the histogram, the threads)."""

    def __init__(self, n_ctx: int, now: float) -> None:
        self.histogram = PromptHistogram()
        self.threads_max = self.threads = 0  # llama.cpp's most threads, and now (0: unknown)
        self.threads_change: ThreadsSet | None = None  # the last change, shown with its reason
        self.reset(n_ctx, now)

    def reset(self, n_ctx: int, now: float) -> None:
        """Clear the live figures for a new run (the prompt-length histogram is kept)."""
        self.n_ctx = max(1, n_ctx)
        self.no_model = n_ctx <= 0  # nothing loaded: no context to show
        self.cells = self.kv_bytes = 0
        self.kv_source = LLAMA_CPP  # who reports the KV figures (a server may not)
        self.t0 = now
        self._arrivals: deque[tuple[float, int]] = deque()  # (time, tokens) of TokenBatch
        self._call_first_token: float | None = None
        self.gen: deque[Point] = deque()  # generation tokens/s, one point per redraw
        self.prompt: deque[Point] = deque()  # prompt tokens/s, one point per model call
        self._queued_at: float | None = None  # the current call's last ChunkQueued
        self._prompt_tokens = 0  # the current call's evaluated chunk tokens
        self._evaluated_at: float | None = None
        self.running = False  # a job's events are arriving
        self.lane_cells: list[int] = []
        self.eval: EvalProgress | None = None  # the current call's prompt, as the engine said
        self._eval_x: float | None = None  # where the current call's live prompt rate is drawn
        self._engine_rate = False  # the current call's prompt rate comes from the engine
        self.pass_: PassStarted | None = None
        self.last_job: JobResult | None = None  # what the "Last job" line describes

    def set_n_ctx(self, n_ctx: int) -> bool:
        """The context just loaded (0: none): the KV figure is 0 of it until a run reports.
        False while a run is going on (its own figures stand)."""
        if self.running:
            return False
        self.no_model = n_ctx <= 0
        self.n_ctx = max(1, n_ctx)
        self.cells = self.kv_bytes = 0
        self.kv_source = LLAMA_CPP
        return True

    def set_threads(self, n_threads: int) -> None:
        """The loaded model's most threads (0: none loaded, or a server's, which does not
        say); the engine starts each model at that count."""
        self.threads_max = self.threads = max(0, n_threads)
        self.threads_change = None

    def clear_progress(self) -> None:
        """No prompt or pass figures: a run that evaluates no prompt of its own (a rollback
        resumed from its KV state) must not show the last run's as its own."""
        self.eval, self.pass_ = None, None

    def on_event(self, ev: object, now: float) -> bool:
        """Store the numbers ``ev`` carries; False when it carries none of the gauges'."""
        match ev:
            case LanesStarted():
                self.lane_cells = [0] * ev.lanes
                self.n_ctx, self.no_model = max(1, ev.n_ctx), False
            case TokenBatch(lane=int(lane)) if lane < len(self.lane_cells):
                self.running = True
                self.lane_cells[lane] += ev.tokens
                self._arrivals.append((now, ev.tokens))
            case ChunkEvaluated(lane=int(lane)) if lane < len(self.lane_cells):
                self.running = True
                self.lane_cells[lane] = ev.kv_end  # the lane's new prompt, so far
            case KVStats(lane=int(lane)) | KVLive(lane=int(lane)) if lane < len(self.lane_cells):
                self.lane_cells[lane] = ev.cells_used
            case KVLive(lane=None):
                self.running = True
                self.cells, self.kv_bytes = ev.cells_used, ev.state_bytes
                self.kv_source = LLAMA_CPP
                self.n_ctx, self.no_model = max(1, ev.n_ctx), False
            case EvalProgress():
                self.running = True
                self._on_eval(ev, now)
            case PassStarted():
                self.running = True
                self.pass_ = ev
            case TokenBatch():
                self.running = True
                if self._call_first_token is None:
                    self._call_first_token = now
                self._arrivals.append((now, ev.tokens))
            case ChunkQueued():
                self.running = True
                if self._evaluated_at is not None:  # a new call begins
                    self._evaluated_at, self._prompt_tokens = None, 0
                self._queued_at = now
            case ChunkEvaluated():
                self.running = True
                if self._evaluated_at is None:
                    self._evaluated_at = now
                self._prompt_tokens += ev.tokens
                if not self._engine_rate:  # no figure from the engine (a server): timed here
                    self._record_prompt_rate()
            case KVStats():
                self.lane_cells = []  # a call in the loaded context: the lanes are over
                self.cells, self.kv_bytes = ev.cells_used, ev.state_bytes
                self.kv_source = ev.reported_by
                self.n_ctx, self.no_model = max(1, ev.n_ctx), False
                self._call_first_token = None
                self._queued_at = self._evaluated_at = None
                self._prompt_tokens = 0
                self._eval_x, self._engine_rate = None, False
            case ThreadsSet():
                self.threads, self.threads_change = ev.after, ev
                self.threads_max = max(self.threads_max, ev.before, ev.after)
            case JobFinished():
                if ev.result.threads:
                    self.threads = ev.result.threads
                self._finished(ev.result)
            case StrategiesFinished():
                self.running = False
            case _:
                return False
        return True

    def advance(self, now: float) -> float:
        """A redraw at ``now``: the generation rate's point for it (while a job runs, and until
        the rate is back at 0), points older than HISTORY_S dropped. Returns the seconds since
        the reset, where ``now`` is on the rates' time axis."""
        t = now - self.t0
        if self.running or (self.gen and self.gen[-1][1] > 0):
            self.gen.append((t, self._gen_rate(now)))
        for points in (self.gen, self.prompt):
            while points and points[0][0] < t - HISTORY_S:
                points.popleft()
        return t

    def _on_eval(self, ev: EvalProgress, now: float) -> None:
        """The engine's prompt figures; its rate is the call's point on the prompt curve."""
        if self.eval is None or ev.step != self.eval.step or ev.evaluated < self.eval.evaluated:
            self._eval_x = None  # another call
        self.eval, self._engine_rate = ev, True
        if ev.seconds < MIN_PROMPT_S or ev.evaluated <= 0:
            return
        point = (self._eval_x if self._eval_x is not None else now - self.t0, ev.tokens_per_s)
        if self._eval_x is not None and self.prompt and self.prompt[-1][0] == self._eval_x:
            self.prompt[-1] = point
        else:
            self.prompt.append(point)
        self._eval_x = point[0]

    def _record_prompt_rate(self) -> None:
        if self._queued_at is None or self._evaluated_at is None:
            return
        seconds = self._evaluated_at - self._queued_at
        if seconds < MIN_PROMPT_S:  # the events came in one batch: no prefill time to measure
            return
        point = (self._evaluated_at - self.t0, self._prompt_tokens / seconds)
        if self.prompt and self.prompt[-1][0] == point[0]:
            self.prompt[-1] = point  # the same call: its later chunks raise the count
        else:
            self.prompt.append(point)

    def _finished(self, result: JobResult) -> None:
        self.running = False
        for n in result.prompt_lengths:
            self.histogram.add(n, result.n_ctx)
        if result.refused:
            self.histogram.over += 1
        self.last_job = result

    def _gen_rate(self, now: float) -> float:
        while self._arrivals and self._arrivals[0][0] < now - RATE_WINDOW_S:
            self._arrivals.popleft()
        if not self._arrivals:
            return 0.0
        started = self._call_first_token or self._arrivals[0][0]
        window = min(RATE_WINDOW_S, max(now - started, REDRAW_MS / 1000))
        return sum(n for _, n in self._arrivals) / window
