"""Several replies from an inference server at once: the remote form of the local engine's lanes.

Apart from the engine (``remote.py``) because it is the one place with threads of its own: each
lane, a thread, takes the next request left, streams its reply and reports it as lane events; the
caller's thread yields them as they arrive, re-raises the first failure (after stopping every
lane), and stops every lane when it lets go of the iterator. The engine builds the requests and
says how the lanes end (``LanesFinished``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.engine.remote_stream import Reply
from app.core.engine.repetition import RepetitionDetector
from app.core.engine.types import GenerationStats, LaneDelta, LaneFinished, LaneStarted

LaneEvent = LaneStarted | LaneDelta | LaneFinished


@dataclass(frozen=True)
class _LaneDone:
    lane: int


def stream_lanes(
    bodies: Sequence[dict[str, Any]],
    prompt_lens: Sequence[int],
    width: int,
    *,
    stream: Callable[[dict[str, Any], Reply], Generator[tuple[str, int], None, None]],
    stats: Callable[[Reply, int], GenerationStats],
    abort: Callable[[], None],
    cancel: threading.Event,
    stop_on_repetition: bool,
) -> Generator[LaneEvent, None, bool]:
    """The lane events of the replies to ``bodies`` (prompts of ``prompt_lens`` tokens), on
    ``width`` threads; returns whether a reply ended cancelled. ``stream`` gives a request's
    (text, tokens) pieces, ``stats`` a finished reply's figures; ``abort`` closes every stream,
    ``cancel`` is the engine's (set when the caller lets go early)."""
    events: queue.Queue[Any] = queue.Queue()
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(bodies)):
        todo.put(i)
    stopping = threading.Event()
    cells = [0] * width

    def run_lane(lane: int) -> None:
        try:
            while not stopping.is_set():
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                prompt_len = prompt_lens[i]
                reply = Reply(time.perf_counter())
                started = False
                looping = RepetitionDetector() if stop_on_repetition else None
                with contextlib.closing(stream(bodies[i], reply)) as pieces:
                    for text, n in pieces:
                        if not started:
                            started = True
                            events.put(LaneStarted(i, lane, prompt_len, prompt_len))
                        cells[lane] = prompt_len + reply.tokens
                        events.put(LaneDelta(i, lane, text, (-1,) * n))
                        if looping is not None and looping.feed(text):
                            reply.finish = "repetition"
                            break
                if not started:
                    events.put(LaneStarted(i, lane, prompt_len, prompt_len))
                finished = stats(reply, prompt_len)
                cells[lane] = finished.n_past
                events.put(LaneFinished(i, lane, finished, tuple(cells)))
                if finished.finish_reason == "cancelled":
                    return
        except BaseException as exc:  # reaches the caller's thread, which re-raises it
            events.put(exc)
        finally:
            events.put(_LaneDone(lane))

    threads = [threading.Thread(target=run_lane, args=(lane,), name=f"remote-lane-{lane}",
                                daemon=True) for lane in range(width)]  # fmt: skip
    for t in threads:
        t.start()
    running, failure = width, None
    cancelled = False
    try:
        while running:
            ev = events.get()
            if isinstance(ev, _LaneDone):
                running -= 1
            elif isinstance(ev, BaseException):
                failure = failure or ev
                stopping.set()
                abort()
            else:
                if isinstance(ev, LaneFinished) and ev.stats.finish_reason == "cancelled":
                    cancelled = True
                yield ev
    finally:
        if running:  # the caller let go of the iterator: stop every lane
            stopping.set()
            cancel.set()
            abort()
        for t in threads:
            t.join(timeout=30)
    if failure is not None:
        raise failure
    return cancelled
