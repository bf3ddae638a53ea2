"""The three-stage buffer panel on events built as jobs.py builds them, and on a real job."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from app.core.engine.host import EngineHost
from app.core.engine.types import LoadSettings
from app.core.jobs.events import KVShifted
from app.core.jobs.ring import Ring, SegmentKind
from app.core.jobs.tasks import (
    ChunkEvaluated,
    ChunkEvicted,
    ChunkQueued,
    JobFinished,
    JobResult,
    KVStats,
    LanesStarted,
    OutputSpan,
    PartialResult,
    PlanReady,
    TokenBatch,
    summarize,
)
from app.core.paths import sample_document
from app.core.tokens import exact_counter, host_tokenize
from app.ui.buffer_panel import NARROW, BarSegment, BufferPanel, ChunkState
from app.ui.gauges import GaugesPanel
from tests.ui.text_probes import linked_fragments, point_of

N_CTX = 512
WINDOW_1 = [(0, 317, 102), (317, 724, 96), (724, 1102, 99), (1102, 1670, 101)]
WINDOW_2 = [(1670, 2095, 91), (2095, 2373, 80)]


def _call(
    ring: Ring,
    step: str,
    chunks: list[tuple[int, int, int]],
    outputs: list[tuple[str, int]],
    *,
    prefix: int = 35,
    carried: int = 0,
    question: int = 5,
) -> list[object]:
    """One model call's events, as ``CallRunner.call`` and ``stream`` emit them, on a real ring."""
    ring.clear()
    ring.append(SegmentKind.SYSTEM, prefix, pinned=True)
    if carried:  # rolling's "summary so far": a segment without a document span
        ring.append(SegmentKind.CHUNK, carried)
    events: list[object] = []
    placed = []
    for start, end, n in chunks:
        placed.append(ring.append(SegmentKind.CHUNK, n, source=(start, end)))
        events.append(ChunkQueued(step, start, end, n))
    ring.append(SegmentKind.QUESTION, question, pinned=True)
    sources = tuple(ring.resident_sources())
    for s in placed:
        assert s.source is not None
        events.append(
            ChunkEvaluated(step, s.source[0], s.source[1], s.tokens, s.pos, s.end, ring.version)
        )
    output = None
    for text, n in outputs:
        grow = min(n, ring.free)
        if grow:
            output = (
                ring.append(SegmentKind.OUTPUT, grow)
                if output is None
                else ring.grow(output.id, grow)
            )
        events.append(TokenBatch(step, text, n, ring.version, sources))
    events.append(KVStats(ring.used, ring.capacity, ring.used * 20_000))
    return events


def _as_bar(ring: Ring) -> list[BarSegment]:
    return [BarSegment(s.kind, s.pos, s.tokens, s.source) for s in ring]


def _feed(panel: BufferPanel, events: list[object]) -> None:
    for ev in events:
        panel.on_event(ev)
        panel.kv.check()


def _panel(qtbot: object) -> BufferPanel:
    panel = BufferPanel(N_CTX)
    qtbot.addWidget(panel)  # type: ignore[attr-defined]
    panel.resize(700, 700)
    panel.show()
    return panel


def test_queue_states_follow_the_calls_in_batched_updates(qtbot) -> None:
    panel = _panel(qtbot)
    model = panel.queue
    inserted: list[tuple[int, int]] = []
    changed: list[tuple[int, int]] = []
    model.rowsInserted.connect(lambda _p, first, last: inserted.append((first, last)))
    model.dataChanged.connect(lambda a, b, _roles=(): changed.append((a.row(), b.row())))
    ring = Ring(N_CTX)
    events = _call(ring, "window 1", WINDOW_1, [("Sum", 2), ("mary", 1)])

    _feed(panel, events[:4])  # ChunkQueued ×4
    assert [s for *_, s in model.states()] == [ChunkState.PENDING] * 4
    qtbot.waitUntil(lambda: model.rowCount() == 4)  # the flush timer inserts them at once
    assert inserted == [(0, 3)]
    assert model.data(model.index(1, 1)) == "317–724"
    assert model.data(model.index(1, 3)) == "pending"

    _feed(panel, events[4:8])  # ChunkEvaluated ×4
    assert [s for *_, s in model.states()] == [ChunkState.IN_KV] * 4
    model.flush()
    assert changed == [(0, 3)], "one dataChanged range for the whole call, not one per row"

    _feed(panel, events[8:])  # tokens, then the call's KVStats
    model.flush()
    assert [s for *_, s in model.states()] == [ChunkState.DONE] * 4
    assert len(changed) == 2, "streamed tokens never touch the table"

    for start, end, _ in WINDOW_1:
        panel.on_event(ChunkEvicted("window 1", start, end))
    _feed(panel, _call(ring, "window 2", WINDOW_2, [("More", 1)]))
    assert [s for *_, s in model.states()] == [ChunkState.EVICTED] * 4 + [ChunkState.DONE] * 2
    model.flush()
    assert model.rowCount() == 6 and model.data(model.index(5, 3)) == "done"
    assert inserted == [(0, 3), (4, 5)]

    with qtbot.waitSignal(panel.source_clicked) as clicked:
        panel.table.clicked.emit(model.index(4, 0))
    assert clicked.args == [[(1670, 2095)]]


def test_kv_bar_mirrors_the_ring_through_append_grow_evict_and_a_new_call(qtbot) -> None:
    panel = _panel(qtbot)
    ring = Ring(N_CTX)
    events = _call(ring, "window 1", WINDOW_1, [("a", 3), ("b", 4), ("c", 2)])
    _feed(panel, events[:8])  # evaluated: the prefix (to the first chunk) and the chunks, exact
    assert panel.kv.segments == [s for s in _as_bar(ring) if s.kind is not SegmentKind.OUTPUT][:5]
    _feed(panel, events[8:10])  # output grows (the question's length is not known yet)
    assert panel.kv.segments[-1] == BarSegment(SegmentKind.OUTPUT, 433, 7)
    _feed(panel, events[10:])  # KVStats: llama.cpp's count places question and output exactly
    assert panel.kv.segments == _as_bar(ring)
    assert panel.kv.used == ring.used == 447 and panel.kv.question_hint == 5
    assert "447 of 512" in panel.kv_label.text()

    victim = next(s for s in ring if s.source == (317, 724))
    ring.evict(victim.id)  # what a KV eviction does: later segments shift down
    panel.on_event(ChunkEvicted("window 1", 317, 724))
    panel.kv.check()
    assert panel.kv.segments == _as_bar(ring)

    # The next call replaces the picture; a carried summary sits in the prefix, and while it
    # streams the question takes the length measured at the previous call.
    events = _call(ring, "window 2", WINDOW_2, [("x", 1)] * 500, prefix=40, carried=20)
    _feed(panel, events)
    assert panel.kv.segments == [
        BarSegment(SegmentKind.SYSTEM, 0, 60),
        *(s for s in _as_bar(ring) if s.kind is SegmentKind.CHUNK and s.source),
        BarSegment(SegmentKind.QUESTION, 231, 5),
        BarSegment(SegmentKind.OUTPUT, 236, N_CTX - 236),  # capped at n_ctx, as the ring caps
    ]
    assert panel.kv.used == ring.used == N_CTX

    # Hover: the tooltip names the segment, its positions and its document span.
    bar = panel.bar
    inner = bar.rect().adjusted(1, 1, -1, -1)
    x = inner.left() + int(100 / N_CTX * inner.width())
    text = bar.describe(bar.segment_at_x(x))
    assert "characters 1,670–2,095" in text and "KV positions 60–150 (91 tokens)" in text
    help_event = QHelpEvent(QEvent.Type.ToolTip, QPoint(x, 5), bar.mapToGlobal(QPoint(x, 5)))
    QApplication.sendEvent(bar, help_event)
    assert QToolTip.text() == text


def test_a_sliding_window_model_shows_what_its_windowed_layers_no_longer_see(qtbot) -> None:
    """Gemma 3: 15 of 18 layers attend to the last 512 positions only. Once the cache holds
    more, the bar hatches the positions behind the window, the label says how many, and a
    chunk there says which layers still see it; a full-attention model shows none of this."""
    panel = _panel(qtbot)
    panel.set_sliding_window(64, 15, 18)
    ring = Ring(N_CTX)
    _feed(panel, _call(ring, "window 1", WINDOW_1, [("a", 3)]))
    used = panel.kv.used  # prefix, chunks, question and reply
    assert used > 400 and panel.kv.outside_window == used - 64
    label = panel.kv_label.text()
    assert "sliding window of 64 on 15 of 18 layers" in label
    assert f"{used - 64:,} positions only the other 3 see" in label
    bar = panel.bar
    first = bar.describe(panel.kv.segments[1])  # the first chunk, wholly behind the window
    assert "Behind the sliding window: 15 of 18 layers" in first and "3 layer(s)" in first
    last = bar.describe(panel.kv.segments[-1])  # the reply: inside the window
    assert "sliding window" not in last
    hatched = bar.grab().toImage()

    panel.set_sliding_window(0, 0, 0)
    assert panel.kv.outside_window == 0 and "sliding" not in panel.kv_label.text()
    assert "sliding" not in bar.describe(panel.kv.segments[1])
    plain = bar.grab().toImage()
    behind = range(2, int(bar.width() * (used - 64) / N_CTX) - 2)  # the hatch is painted there
    assert any(hatched.pixel(x, y) != plain.pixel(x, y) for x in behind for y in range(2, 10))
    ahead = range(int(bar.width() * used / N_CTX) - 4, int(bar.width() * used / N_CTX) - 1)
    assert all(hatched.pixel(x, 6) == plain.pixel(x, 6) for x in ahead)  # not in the window


def _anchor_point(panel: BufferPanel, index: int) -> QPoint:
    """The viewport point of the middle of the first fragment linked to output span ``index``."""
    frag = next((f for f in linked_fragments(panel, f"span:{index}") if f.length() > 1), None)
    if frag is None:
        raise AssertionError(f"no text linked to span {index}")
    return point_of(panel, frag)  # scrolled into view


def test_output_streams_per_call_and_a_click_emits_that_spans_sources(qtbot) -> None:
    panel = _panel(qtbot)
    ring = Ring(N_CTX)
    panel.on_event(PlanReady("rolling", 413, 690, 690, 2, 1.0, 0))
    assert "690 of 690 tokens kept" in panel.plan_label.text()
    first = _call(ring, "window 1", WINDOW_1, [("漢字", 2), (" and 🌟", 4), ("", 1)])
    _feed(panel, first)
    for start, end, _ in WINDOW_1:
        panel.on_event(ChunkEvicted("window 1", start, end))
    panel.on_event(PartialResult("window 1", "漢字 and 🌟", ((0, 1670),)))
    second = _call(ring, "window 2", WINDOW_2, [("Alpha beta gamma", 3), (" delta", 1)])
    _feed(panel, second)
    panel.on_event(object())  # unknown events are ignored
    panel.on_event("not an event")
    result = JobResult("summarize", "rolling", "stop", N_CTX, prompt_tokens=800,
                       evaluated_tokens=780, completion_tokens=11, kv_peak_cells=450,
                       seconds=3.5)  # fmt: skip
    w2_sources = ((1670, 2095), (2095, 2373))
    result.outputs = [
        OutputSpan("window 1", "漢字 and 🌟", tuple(s[:2] for s in WINDOW_1), 9, "stop"),
        OutputSpan("window 2", "Alpha beta gamma delta", w2_sources, 20, "stop"),
        OutputSpan("summary", "Alpha beta gamma delta", ((0, 1670), (1670, 2373)), 20, "stop"),
    ]
    panel.on_event(JobFinished(result))

    for out in result.outputs:
        assert panel.output_text(out.step) == out.text
    assert panel.output_text() == "\n\n".join(o.text for o in result.outputs)
    shown = panel.output.toPlainText()
    assert shown.startswith("window 1\n漢字 and 🌟\nwindow 2\nAlpha beta gamma delta\nsummary\n")
    assert "Finished: stop" in shown and "11 generated" in shown
    assert [step for step, _ in panel.spans()] == ["window 1", "window 2", "summary"]

    qtbot.waitUntil(lambda: panel.output.anchorAt(_anchor_point(panel, 1)) == "span:1")
    with qtbot.waitSignal(panel.source_clicked) as clicked:
        qtbot.mouseClick(panel.output.viewport(), Qt.MouseButton.LeftButton,
                         pos=_anchor_point(panel, 1))  # fmt: skip
    assert clicked.args == [list(w2_sources)]
    with qtbot.waitSignal(panel.source_clicked) as clicked:
        qtbot.mouseClick(panel.output.viewport(), Qt.MouseButton.LeftButton,
                         pos=_anchor_point(panel, 2))  # fmt: skip
    assert clicked.args == [[(0, 1670), (1670, 2373)]]

    panel.reset(1024)
    assert panel.output_text() == "" and panel.kv.n_ctx == 1024 and panel.queue.states() == []


def test_a_call_without_document_chunks_takes_its_sources_from_the_result(qtbot) -> None:
    """map-reduce's last call combines partial summaries: no chunk events, and the job gives the
    summary the windows it combined as sources."""
    panel = _panel(qtbot)
    ring = Ring(N_CTX)
    _feed(panel, _call(ring, "part 1", WINDOW_1[:2], [("one", 1)]))
    combine = _call(ring, "summary", [], [("All", 1), (" of it", 2)], prefix=60)
    _feed(panel, combine)
    assert panel.kv.segments == [
        BarSegment(SegmentKind.SYSTEM, 0, 65),  # the whole prompt, placed by KVStats
        BarSegment(SegmentKind.OUTPUT, 65, 3),
    ]
    result = JobResult("summarize", "map-reduce", "stop", N_CTX)
    windows = ((0, 317), (317, 724))
    result.outputs = [
        OutputSpan("part 1", "one", windows, 5, "stop"),
        OutputSpan("summary", "All of it", windows, 9, "stop"),
    ]
    panel.on_event(JobFinished(result))
    assert panel.spans()[1] == ("summary", windows)
    assert [s for *_, s in panel.queue.states()] == [ChunkState.DONE] * 2


def test_a_click_on_a_combine_step_emits_the_sources_it_was_made_from(qtbot) -> None:
    """map-reduce's combining rounds stream with no document resident (their token batches name
    none), one after another or in lanes; the finished job names what each was made from, and
    a click on a combine output emits exactly those spans."""
    panel = _panel(qtbot)
    ring = Ring(N_CTX)
    parts = {"part 1": WINDOW_1[:2], "part 2": WINDOW_1[2:], "part 3": WINDOW_2[:1],
             "part 4": WINDOW_2[1:]}  # fmt: skip
    for step, chunks in parts.items():
        _feed(panel, _call(ring, step, chunks, [(f"{step} said", 2)]))
    # level 1 in two lanes; level 2, a single call, and the summary one call after another
    panel.on_event(LanesStarted(2, 2, N_CTX))
    for lane, step in enumerate(("combine 1.1", "combine 1.2")):
        panel.on_event(TokenBatch(step, f"{step} ", 1, 1, (), lane))
        panel.on_event(TokenBatch(step, "text", 2, 2, (), lane))
    for lane in (1, 0):  # the lanes finish in any order
        panel.on_event(KVStats(70, N_CTX, 0, lane))
    _feed(panel, _call(ring, "combine 2.1", [], [("Both ", 1), ("halves", 1)], prefix=60))
    _feed(panel, _call(ring, "summary", [], [("All of it", 3)], prefix=60))
    shown = dict(panel.spans())
    combines = ("combine 1.1", "combine 1.2", "combine 2.1", "summary")
    assert all(shown[step] == () for step in combines)  # streamed: nothing was resident

    def spans(*steps: str) -> tuple[tuple[int, int], ...]:
        return tuple(sorted({(a, b) for s in steps for a, b, _ in parts[s]}))

    made_from = {"combine 1.1": spans("part 1", "part 2"), "combine 1.2": spans("part 3", "part 4"),
                 "combine 2.1": spans(*parts), "summary": spans(*parts)}  # fmt: skip
    result = JobResult("summarize", "map-reduce", "stop", N_CTX)
    result.outputs = [OutputSpan(step, panel.output_text(step), spans(step), 5, "stop")
                      for step in parts]  # fmt: skip
    result.outputs += [OutputSpan(step, panel.output_text(step), made_from[step], 9, "stop")
                       for step in combines]  # fmt: skip
    panel.on_event(JobFinished(result))
    assert len(panel.spans()) == len(result.outputs)  # each output shown once
    assert dict(panel.spans()) == {o.step: o.source_spans for o in result.outputs}

    def click(step: str) -> list[object]:
        index = [s for s, _ in panel.spans()].index(step)
        link = f"span:{index}"
        qtbot.waitUntil(lambda: panel.output.anchorAt(_anchor_point(panel, index)) == link)
        with qtbot.waitSignal(panel.source_clicked) as clicked:
            qtbot.mouseClick(panel.output.viewport(), Qt.MouseButton.LeftButton,
                             pos=_anchor_point(panel, index))  # fmt: skip
        return clicked.args

    for step in ("combine 1.2", "combine 2.1", "summary"):
        assert click(step) == [list(made_from[step])]


def test_a_real_rolling_job_through_both_panels(qtbot, model_path: Path) -> None:
    panel = _panel(qtbot)
    gauges = GaugesPanel(N_CTX)
    qtbot.addWidget(gauges)
    gauges.show()
    gauges.start()
    text = sample_document().read_text(encoding="utf-8")[:1900]  # two windows at n_ctx 512
    host = EngineHost()
    try:
        host.load(model_path, LoadSettings(n_ctx=N_CTX))
        gauges.set_engine_pid(host.pid)
        counter = exact_counter(model_path, host_tokenize(host))
        events = []
        for ev in summarize(host, text, counter, strategy="rolling", n_ctx=N_CTX, max_tokens=16):
            events.append(ev)
            panel.on_event(ev)
            gauges.on_event(ev)
            panel.kv.check()  # contiguous, never past n_ctx
            assert panel.kv.used <= N_CTX
            if isinstance(ev, KVShifted):  # room made in the ring: the bar is the ring, exactly
                bar = [(s.kind.value, s.pos, s.tokens, s.source) for s in panel.kv.segments]
                assert bar == list(ev.layout)
    finally:
        host.close()
    done = events[-1]
    assert isinstance(done, JobFinished)
    result = done.result
    assert result.finish_reason in ("stop", "length") and len(result.outputs) >= 3
    shifted = [ev for ev in events if isinstance(ev, KVShifted)]
    assert shifted and any(kind == "notes" for kind, *_ in shifted[-1].layout)
    # the window 1 notes stay in the cache through window 2, drawn as notes
    assert any(s.kind is SegmentKind.NOTES for s in panel.kv.segments)
    states = panel.queue.states()
    assert states and all(s in (ChunkState.DONE, ChunkState.EVICTED) for *_, s in states)
    queued = {(ev.start, ev.end) for ev in events if isinstance(ev, ChunkQueued)}
    assert {(a, b) for a, b, _ in states} == queued
    for out in result.outputs:  # each call's streamed text, as the job recorded it
        assert panel.output_text(out.step).strip() == out.text
    last_kv = [ev for ev in events if isinstance(ev, KVStats)][-1]
    assert panel.kv.used <= last_kv.cells_used <= N_CTX
    qtbot.waitUntil(lambda: f"{last_kv.cells_used:,} of {N_CTX:,} cells" in gauges.kv_text.text())
    assert sum(gauges.histogram().bins) == len(result.prompt_lengths) >= 2
    gauges.stop()


def test_a_real_map_phase_in_lanes_through_both_panels(qtbot, model_path: Path) -> None:
    panel = _panel(qtbot)
    gauges = GaugesPanel(N_CTX)
    qtbot.addWidget(gauges)
    gauges.show()
    gauges.start()
    text = sample_document().read_text(encoding="utf-8")[:4000]  # several windows at n_ctx 512
    host = EngineHost()
    lanes_seen: list[int] = []
    try:
        host.load(model_path, LoadSettings(n_ctx=N_CTX, n_threads=1))
        counter = exact_counter(model_path, host_tokenize(host))
        events = []
        for ev in summarize(host, text, counter, strategy="map-reduce", n_ctx=N_CTX,  # type: ignore[arg-type]
                            max_tokens=16, lanes=2):  # fmt: skip
            events.append(ev)
            panel.on_event(ev)
            gauges.on_event(ev)
            if panel.lane_bars:
                lanes_seen.append(len(panel.lane_bars))
                assert panel.bar.isHidden() and not panel.lanes_box.isHidden()
                for bar in panel.lane_bars:
                    bar.kv.check()  # each lane contiguous, never past n_ctx
                    assert bar.kv.used <= N_CTX
        qtbot.waitUntil(lambda: gauges.lane_bars == [] or gauges.lanes_row.isHidden())
    finally:
        host.close()
        gauges.stop()
    started = next(ev for ev in events if isinstance(ev, LanesStarted))
    assert started.lanes == 2 and set(lanes_seen) == {2}
    result = events[-1].result
    assert result.lanes == 2 and result.finish_reason in ("stop", "length")
    # the summary call ran in the loaded context: the lanes gave way to the one bar
    assert not panel.lane_bars and not panel.bar.isHidden()
    for out in result.outputs:  # each lane's reply, whole, as the job recorded it
        assert panel.output_text(out.step).strip() == out.text
    assert [step for step, _ in panel.spans()] == [o.step for o in result.outputs]
    assert all(s is ChunkState.DONE for *_, s in panel.queue.states())


def test_the_thread_goes_under_the_reply_in_a_narrow_panel(qtbot) -> None:
    """In the dock at 1366x768 (about 470 px) the reply and the thread each get the full width,
    one above the other; in a wide panel they sit side by side."""
    panel = _panel(qtbot)
    panel.thread.show()
    output, thread = panel.output, panel.thread
    qtbot.waitUntil(lambda: thread.x() > output.x(), timeout=2_000)  # 700 px: side by side
    panel.resize(NARROW - 170, 700)
    qtbot.waitUntil(lambda: thread.y() > output.y(), timeout=2_000)
    assert thread.x() == output.x() and output.width() > NARROW - 260
    panel.resize(NARROW + 60, 700)
    qtbot.waitUntil(lambda: thread.x() > output.x(), timeout=2_000)


def test_each_answer_is_headed_by_its_question(qtbot) -> None:
    panel = _panel(qtbot)
    panel.set_questions(["Who wrote it?", "", "When?"])  # blank lines are no question
    for step, text in (("answer 1", "Raymond."), ("answer 2", "In 1975."), ("summary", "S.")):
        panel.on_event(TokenBatch(step, text, 2, 0, ()))
        panel.on_event(KVStats(40, N_CTX, 1_000))
    shown = panel.output.toPlainText()  # the headings and the texts, as shown
    assert "Answer to “Who wrote it?”\nRaymond." in shown
    assert "Answer to “When?”\nIn 1975." in shown
    assert "\nsummary\nS." in shown and "answer 1" not in shown
    panel.set_questions([])  # a summary, or an answer past the questions: the step's name
    panel.on_event(TokenBatch("answer 3", "Three.", 1, 0, ()))
    assert "answer 3\nThree." in panel.output.toPlainText()
