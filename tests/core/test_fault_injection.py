"""Fault injection (issue 7, item 3): the engine child dies mid-job, and the job says so.

During real jobs on the real default model and a real document, the engine child kills itself with
SIGKILL, SIGSEGV or SIGABRT (the real signal: its exit status is the signal's) while loading,
while evaluating the prompt, while generating, or while saving the KV state, at a step drawn from
a seeded random generator (the draw is printed). Each time the error is one clear sentence naming
the signal, the text generated before the crash is kept as an output with finish reason
``error``, a new engine starts on the next load, and the next job finishes.

The normal run tries one fault per phase; ``SLOW=1`` tries every phase with every signal and
30 more random draws. The closing summary counts the faults injected (tests/core/conftest.py).

The second part feeds the engine chat templates that try to escape Jinja's sandbox, loop forever
or build huge strings, in real GGUF files (the default model with its template replaced): each
ends in one ChatTemplateError sentence within the template deadline, the child survives, and the
load reports that the model's template cannot be used.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.core.documents import Document, load_document
from app.core.engine.chat_template import ChatTemplateError
from app.core.engine.host import EngineHost
from app.core.engine.types import EngineCrashedError, LoadedModel, LoadSettings
from app.core.jobs.tasks import (
    SUMMARIZE,
    ChunkEvaluated,
    JobError,
    JobFinished,
    JobResult,
    KVLive,
    TokenBatch,
    state_after,
    summarize,
)
from app.core.planning.strategies import Planner
from app.core.tokens import TokenCounter
from tests.conftest import DATA
from tests.core import gguf_cases as gc
from tests.core import gguf_fuzz as fz
from tests.engines import Counters
from tests.fault_injection import (
    Draw,
    arm,
    check_crash_sentence,
    draw,
    draws,
    matrix,
    tally_of,
)

DOC = DATA / "sample.docx"  # the opening of Moby-Dick: 280 tokens, more than the context holds
N_CTX = 256
MAX_TOKENS = 16
# One thread: on a busy two-core machine two llama.cpp threads wait on each other. Batches of 32
# tokens give the prompt (about 238 tokens) eight batches to be killed between.
SETTINGS = LoadSettings(n_ctx=N_CTX, n_batch=32, n_ubatch=32, n_threads=1)
SEED = 20261129

_rng = random.Random(SEED)
FAST = [draw(_rng, "load", "SIGABRT"), draw(_rng, "prompt", "SIGKILL"),
        draw(_rng, "generate", "SIGSEGV"), draw(_rng, "save", "SIGKILL")]  # fmt: skip
SLOW = matrix(SEED + 1) + draws(SEED + 2, 30)


@pytest.fixture(scope="module")
def moby_dick() -> Document:
    """The job's document, loaded: the opening of Moby-Dick (DOC)."""
    return load_document(DOC)


@pytest.fixture(scope="module")
def reply_tokens(model_path: Path, moby_dick: Document, make_counter: Counters) -> int:
    """How long the healthy job's reply is on this machine (generate faults strike within it)."""
    counter = make_counter()
    with EngineHost() as host:
        host.load(model_path, SETTINGS)
        return _job(host, moby_dick, counter)[1].completion_tokens


@dataclass
class Rig:
    """What a fault test works with: a fresh engine host, the model, the document."""

    host: EngineHost
    model: Path
    doc: Document
    counter: TokenCounter
    folder: Path
    monkeypatch: pytest.MonkeyPatch
    config: pytest.Config


@pytest.fixture
def rig(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Rig]:
    host = EngineHost()
    fixture = request.getfixturevalue
    yield Rig(host, fixture("model_path"), fixture("moby_dick"), fixture("make_counter")(),
              tmp_path, monkeypatch, request.config)  # fmt: skip
    host.close()


def _job(host: EngineHost, doc: Document, counter: TokenCounter) -> tuple[list[Any], JobResult]:
    events = list(summarize(host, doc.text, counter, strategy="head", n_ctx=N_CTX,
                            max_tokens=MAX_TOKENS, planner=Planner(doc, counter)))  # fmt: skip
    assert isinstance(events[-1], JobFinished)
    return events, events[-1].result


def _inject(fault: Draw, rig: Rig) -> None:
    host, model_path, doc, counter = rig.host, rig.model, rig.doc, rig.counter
    armed = arm(rig.monkeypatch, rig.folder, fault)
    pid = host.start().pid
    assert not armed.exists(), "the engine child did not take the fault"
    kept = ""  # the text a crash left behind, which the next (healthy) run must begin with
    if fault.phase == "load":
        with pytest.raises(EngineCrashedError) as err:
            host.load(model_path, SETTINGS)
        check_crash_sentence(str(err.value), fault)
        assert "while loading" in str(err.value)
        assert err.value.exitcode == -fault.signum
    elif fault.phase == "save":
        host.load(model_path, SETTINGS)
        _, result = _job(host, doc, counter)
        assert result.finish_reason in ("stop", "length") and result.error is None
        before = result.as_dict()
        saved = 0
        with pytest.raises(EngineCrashedError) as err:
            assert state_after(host, result) is not None  # the first save: the job's own
            saved += 1
            for _ in range(3):
                host.save_state()
                saved += 1
        assert saved == fault.after
        check_crash_sentence(str(err.value), fault)
        assert "while saving the KV state" in str(err.value)
        assert err.value.exitcode == -fault.signum
        assert result.as_dict() == before and result.text  # the job's result stays whole
        kept = result.text
    else:
        host.load(model_path, SETTINGS)
        events, result = _job(host, doc, counter)
        [error] = [ev for ev in events if isinstance(ev, JobError)]
        assert result.finish_reason == "error" and result.error == error.message
        check_crash_sentence(result.error, fault)
        assert "while generating" in result.error
        batches = [ev for ev in events if isinstance(ev, TokenBatch)]
        if fault.phase == "prompt":  # nothing was generated, so there is no output to keep
            assert not batches and not result.outputs
            # chunks are reported evaluated only once llama.cpp held them, before the crash
            held = max((ev.cells_used for ev in events if isinstance(ev, KVLive)), default=0)
            assert all(ev.kv_end <= held for ev in events if isinstance(ev, ChunkEvaluated))
        else:
            assert sum(b.tokens for b in batches) == fault.after  # streamed before the crash
            [out] = result.outputs  # kept, with its provenance
            assert out.finish_reason == "error" and out.source_spans
            assert out.text and out.text == "".join(b.text for b in batches).strip()
            kept = out.text
    assert not host.alive
    tally_of(rig.config).add(fault)

    # The next load starts a new engine (the fault was spent), and the next job works.
    host.load(model_path, SETTINGS)
    assert host.pid != pid and host.alive
    _, again = _job(host, doc, counter)
    assert again.finish_reason in ("stop", "length") and again.error is None, again.error
    assert again.text.startswith(kept)  # greedy decoding: the crash cut the same reply short


@pytest.mark.parametrize("fault", FAST, ids=str)
def test_a_fault_mid_job_ends_in_a_clear_error_and_the_next_job_works(
    fault: Draw, rig: Rig, reply_tokens: int
) -> None:
    _inject(fault.within(reply_tokens), rig)


@pytest.mark.slow
@pytest.mark.parametrize("fault", SLOW, ids=[f"{i:02d}-{f}" for i, f in enumerate(SLOW)])
def test_every_phase_and_signal_and_random_draws(fault: Draw, rig: Rig,
                                                 reply_tokens: int) -> None:  # fmt: skip
    _inject(fault.within(reply_tokens), rig)


def test_the_fault_hook_strikes_at_the_last_step_drawn(rig: Rig) -> None:
    """The bounds the draws use are inside what a load logs: the latest load step still fires."""
    fault = Draw("load", "SIGSEGV", 1999)
    arm(rig.monkeypatch, rig.folder, fault)
    with pytest.raises(EngineCrashedError, match="SIGSEGV") as err:
        rig.host.load(rig.model, SETTINGS)
    assert err.value.exitcode == -signal.SIGSEGV
    tally_of(rig.config).add(fault)
    loaded = rig.host.load(rig.model, SETTINGS)
    assert not [w for w in loaded.warnings if "chat template" in w]  # the default one works


# ----- hostile chat templates ---------------------------------------------------------------

ESCAPES = {
    "mro-subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "cycler-globals-popen": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "joiner-globals": "{{ joiner.__init__.__globals__ }}",
    "lipsum-globals-system": "{{ lipsum.__globals__['os'].system('touch {marker}') }}",
    "namespace-globals": "{{ namespace.__init__.__globals__ }}",
    "self-init-globals": "{{ self.__init__.__globals__ }}",
    "messages-append": "{% set x = messages.append(1) %}",
    "growing-list": "{% set xs = [0] %}{% for x in xs %}{% set _ = xs.append(x) %}{% endfor %}",
}
LOOPS = {
    "nested-range": (
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        "did not finish within",
    ),
    "recursive-macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "too deeply"),
    "recursive-loop": ("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}", "too deeply"),
    "macro-fan-out": (
        "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}"
        "{{ f(0) }}",
        "did not finish within",
    ),
    "huge-range": ("{% for i in range(10**9) %}{% endfor %}", "number too large"),
}
# Sizes computed from the messages (so that they are reached while rendering) and constant
# (so that they are folded while compiling, at load: in the same sandbox, see the last test).
HUGE = {
    "repeat": ("{{ 'x' * (messages|length * 1000000000) }}", "too long"),
    "repeat-messages": ("{{ (messages|string) * 100000 }}", "too long"),
    "power": ("{{ 2 ** (messages|length * 100000) }}", "too large"),
    # 2**26 characters by doubling: past the longest plausible prompt, bounded in memory
    "doubling": (
        "{% set ns = namespace(s='x') %}{% for i in range(26) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s }}",
        "implausibly long",
    ),
    "center": ("{{ 'x'|center(messages|length * 10**10) }}", "number too large"),
    "ljust": ("{{ 'x'.ljust(10**10) }}", "number too large"),
    "format-filter": ("{{ '%1000000000s'|format('x') }}", "width that is too large"),
    "str-format": ("{{ '{:>1000000000}'.format('x') }}", "width that is too large"),
    "percent": ("{{ '%1000000000s' % 'x' }}", "width that is too large"),
    "concat-doubling": (
        "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        # the length bound at 2**22 doublings, or whichever limit this machine reaches first
        "implausibly long|did not finish within|MiB of memory",
    ),
}
# Jinja's sandbox would hide these private attributes as undefined (rendered empty); ours
# refuses them, so a template that reaches for them is told so.
SILENT = {
    "template-reference-context": "{{ self._TemplateReference__context }}",
    "attr-filter-class": "{{ ''|attr('__class__') }}",
}
FAST_TEMPLATES = {"cycler-globals-popen", "lipsum-globals-system", "nested-range", "doubling"}
WARNING = "the model's chat template cannot be used ("


def _cases() -> list[Any]:
    cases = [(name, t, "SecurityError") for name, t in ESCAPES.items()]
    cases += [(name, t, phrase) for name, (t, phrase) in (LOOPS | HUGE).items()]
    return [pytest.param(n, t, p, id=n, marks=() if n in FAST_TEMPLATES else pytest.mark.slow)
            for n, t, p in cases]  # fmt: skip


def _with_template(model: Path, template: str, out: Path, *, weights: bool = False) -> Path:
    """The default model with ``template`` as its chat template; its weights copied, or a sparse
    hole (enough for the tokenizer and the template, a 1.8 MB write)."""
    base = fz.real_base(model)
    entry = gc.kv("tokenizer.chat_template", gc.STRING, template)
    case = fz.FuzzCase(out.stem, "template", "real", (fz.PutEntry("tokenizer.chat_template",
                                                                  entry),))  # fmt: skip
    image = base.image(case)
    image.write(out)
    if weights:
        with model.open("rb") as src, out.open("r+b") as dst:
            src.seek(base.layout.data_offset)
            dst.seek(len(image.head))
            shutil.copyfileobj(src, dst, 1 << 20)
    return out


@pytest.fixture(scope="module")
def template_host() -> Iterator[EngineHost]:
    """One engine child for every hostile template: it must survive them all."""
    h = EngineHost()
    h.start()
    yield h
    h.close()


@dataclass
class TemplateRig:
    host: EngineHost
    model: Path
    folder: Path

    def load(self, template: str, *, weights: bool = False) -> LoadedModel:
        path = _with_template(self.model, template, self.folder / "template.gguf",
                              weights=weights)  # fmt: skip
        return self.host.load(path, SETTINGS)


@pytest.fixture
def tpl(template_host: EngineHost, model_path: Path, tmp_path: Path) -> Iterator[TemplateRig]:
    """The shared engine, with a hang guard (not a timing check): a template the deadline misses
    gets the child killed, and the call fails with EngineCrashedError instead of hanging."""
    pid = template_host.pid
    timer = threading.Timer(60, lambda: pid and os.kill(pid, signal.SIGKILL))
    timer.start()
    yield TemplateRig(template_host, model_path, tmp_path)
    timer.cancel()


@pytest.mark.parametrize(("name", "template", "phrase"), _cases())
def test_a_hostile_chat_template_ends_in_one_clear_error_and_the_engine_lives_on(
    name: str, template: str, phrase: str, tpl: TemplateRig
) -> None:
    host = tpl.host
    marker = tpl.folder / "escaped"
    pid = host.pid
    loaded = tpl.load(template.replace("{marker}", str(marker)))
    [warning] = [w for w in loaded.warnings if w.startswith(WARNING)]
    assert re.search(phrase, warning) and warning.endswith("; prompts are sent without it")
    with pytest.raises(ChatTemplateError, match=phrase) as err:
        host.apply_chat_template([{"role": "user", "content": "Hello"}])
    message = str(err.value)
    assert message.startswith("the chat template ") and "\n" not in message, message
    assert not marker.exists(), "the template ran a shell command"
    # The same child, alive and usable.
    assert host.pid == pid and host.alive
    assert host.tokenize("Hello there", add_special=False)
    _, fin = host.generate_text(host.tokenize("Hello"), max_tokens=2)
    assert fin.stats.finish_reason in ("stop", "length")


@pytest.mark.parametrize("template", SILENT.values(), ids=SILENT.keys())
def test_private_attributes_are_refused(template: str, tpl: TemplateRig) -> None:
    tpl.load(template)
    with pytest.raises(ChatTemplateError, match="unsafe"):
        tpl.host.apply_chat_template([{"role": "user", "content": "Hello"}])


@pytest.mark.parametrize(
    ("template", "phrase"),
    [("{{ 2 ** 100000 }}", "too large"), ("{{ 'x' * 300000000 }}", "too long"),
     ("{{ '%1000000000s'|format('x') }}", "width that is too large")],
)  # fmt: skip
def test_a_template_whose_constants_explode_loads_and_is_reported_as_unusable(
    tpl: TemplateRig, template: str, phrase: str
) -> None:
    """llama-cpp-python compiled every template at load with its own Jinja, folding constants
    outside any cap; the engine compiles them in its sandbox instead."""
    loaded = tpl.load(template)
    assert [w for w in loaded.warnings if w.startswith(WARNING) and phrase in w], loaded.warnings


def test_a_job_on_a_model_whose_template_fails_runs_with_a_plain_prompt_and_says_so(
    tpl: TemplateRig, moby_dick: Document, make_counter: Counters
) -> None:
    counter = make_counter()
    host = tpl.host
    loaded = tpl.load(ESCAPES["cycler-globals-popen"], weights=True)
    assert [w for w in loaded.warnings if w.startswith(WARNING) and "SecurityError" in w]
    _, result = _job(host, moby_dick, counter)
    assert result.finish_reason in ("stop", "length") and result.text
    prompt = host.detokenize(result.final_prompt, special=True)
    assert prompt.startswith(SUMMARIZE) and "<|im_start|>" not in prompt
