"""Issue 49 row 2: a map-reduce over the sample in 4 lanes said nothing for its first 35 s: the
lanes' prompts were evaluated without a word. Each window's pass now starts with its prompt and
says how far it is, slice by slice, on the real engine."""

from __future__ import annotations

from app.core.jobs.tasks import EvalProgress, PartialResult, PassStarted, TokenBatch, summarize
from app.core.paths import sample_document
from tests.engines import Counters, Hosts

N_CTX = 512


def test_a_map_phase_in_lanes_says_its_prompts_progress_before_any_reply(
    make_host: Hosts, make_counter: Counters
) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    text = sample_document().read_text(encoding="utf-8")[:4000]  # several windows at n_ctx 512
    events = list(summarize(host, text, make_counter(), strategy="map-reduce", n_ctx=N_CTX,
                            max_tokens=8, lanes=2))  # fmt: skip
    first_reply = next(i for i, ev in enumerate(events) if isinstance(ev, TokenBatch))
    first_done = next(i for i, ev in enumerate(events) if isinstance(ev, PartialResult))
    assert first_reply < first_done
    # the first window: its pass starts with its prompt, then the prompt fills slice by slice
    first_pass = next(i for i, ev in enumerate(events) if isinstance(ev, PassStarted))
    progress = [ev for ev in events[first_pass:first_reply] if isinstance(ev, EvalProgress)]
    assert progress and progress[0].evaluated == 0, events[first_pass:first_reply]
    assert any(0 < ev.evaluated < ev.total for ev in progress), progress  # mid-prompt
    passes = [ev for ev in events if isinstance(ev, PassStarted)]
    assert [p.index for p in passes[:2]] == [1, 2]  # each window's pass once, in order
    assert len({p.step for p in passes}) == len(passes)
    assert events[-1].result.finish_reason in ("stop", "length")
