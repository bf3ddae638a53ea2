"""Chat-template limits that hold against single C-level calls (issue 21, finding 1).

The deadline and the memory ceiling are checked between the lines a template runs, so one
C-level call (a big-integer power, ``replace``, ``expandtabs``, ``join``, printing a list of a
million lists) once ran for minutes or built gigabytes, and Jinja's constant folding ran such
calls while compiling, before any check. Now every such result is bounded before it is computed,
nothing is folded, and templates render in a renderer process that is killed shortly past the
deadline or at once on cancel, under an address-space limit. The load-time part (a model whose
template would run for minutes still loads in seconds; a cancel stops a load) is at the end.
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from app.core.engine import chat_template as ct
from app.core.engine.chat_template import (
    ChatTemplateError,
    check_chat_template,
    compiled_in_sandbox,
    render_chat_template,
    renderer_pid,
)
from app.core.engine.host import LOAD_CANCEL_GRACE_S, EngineHost
from app.core.engine.types import CancelledError, LoadSettings
from tests.core import gguf_cases as gc
from tests.core import gguf_fuzz as fz

MESSAGES = [{"role": "user", "content": "Hello"}]
BIG = "{% set ns = namespace(s='ab ') %}{% for i in range(23) %}{% set ns.s = ns.s ~ ns.s %}" \
      "{% endfor %}"  # fmt: skip  (25 million characters, within the bound on strings)
NESTED = "([['x' * 1000] * 1000000] * 1000000)"  # prints as 10**15 characters

# Each ran as one C-level call (or one folded constant), past any deadline or memory check.
C_LEVEL = {
    "nested-powers": ("{{ ((((9 ** 64) ** 64) ** 64) ** 64) }}", "number that is too large"),
    "int-product": ("{% set n = 2 ** 40000 %}{{ n * n }}", "number that is too large"),
    "replace-filter": ("{{ ('x' * 30000)|replace('x', 'y' * 30000) }}", "implausibly long"),
    "replace-method": ("{{ ('x' * 30000).replace('x', 'y' * 30000) }}", "implausibly long"),
    "expandtabs": ("{{ ('\\t' * 100000).expandtabs(1000000) }}", "implausibly long"),
    "join-method": ("{{ ('y' * 1000).join(['x'] * 1000000) }}", "implausibly long"),
    "join-filter": (f"{{{{ {NESTED}|join }}}}", "implausibly long"),
    "print-nested": (f"{{{{ {NESTED} }}}}", "implausibly long"),
    "string-filter": (f"{{{{ {NESTED}|string }}}}", "implausibly long"),
    "tojson": (f"{{{{ {NESTED}|tojson }}}}", "implausibly long"),
    "concat": (f"{{{{ 'a' ~ {NESTED} }}}}", "implausibly long"),
    "str-format": (f"{{{{ '{{0}}'.format({NESTED}) }}}}", "implausibly long"),
    "percent": (f"{{{{ '%s' % ({NESTED},) }}}}", "implausibly long"),
    "format-fields": ("{{ ('{0}' * 300000).format('x' * 1000000) }}", "implausibly long"),
    "indent": ("{{ ('\\n' * 999999)|indent(999999) }}", "implausibly long"),
    "wordwrap": ("{{ ('x' * 1000000)|wordwrap(1, wrapstring='y' * 1000) }}", "implausibly long"),
    "translate": ("{{ ('x' * 1000000).translate({120: 'y' * 1000000}) }}", "implausibly long"),
    "sum-of-lists": ("{{ ([[1] * 1000] * 1000)|sum(start=[]) }}", "implausibly long"),
    "doubling-plus": (BIG.replace("ns.s ~ ns.s", "ns.s + ns.s").replace("23", "40"),
                      "implausibly long"),
    "doubling-concat": (BIG.replace("23", "40"), "implausibly long"),
    "output": ("{% for i in range(100000) %}{{ 'x' * 1000000 }}{% endfor %}",
               "implausibly long|MiB of memory"),
    "strftime": ("{{ strftime_now('%c' * 100000) }}", "implausible format"),
    "enormous-argument": ("{{ 'x'.ljust(2 ** 4000) }}", "a number too large"),
}  # fmt: skip


@pytest.mark.parametrize(("template", "phrase"), C_LEVEL.values(), ids=C_LEVEL.keys())
def test_a_c_level_result_is_refused_before_it_is_computed(template: str, phrase: str) -> None:
    render_chat_template("{{ 1 }}", MESSAGES)  # the renderer is up: its start is not timed
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError, match=phrase) as err:
        render_chat_template(template, MESSAGES)
    assert time.monotonic() - t0 < 3 * ct.DEFAULT_TIME_LIMIT_S
    assert str(err.value).startswith("the chat template ") and "\n" not in str(err.value)


def test_what_real_templates_do_still_works() -> None:
    template = (
        "{{ bos_token }}{% for m in messages %}{{ '<|' ~ m.role ~ '|>' + m.content|trim }}"
        "{{ ['a', 'b']|join(', ') }}{{ '%s-%d' % ('x', 2) }}{{ '{0}!'.format(m.role) }}"
        "{{ (m.content * 2)|replace('l', 'L')|indent(2) }}{{ 2 ** 10 * 3 // 2 - 1 }}"
        "{{ [1, 2] + [3] }}{{ messages|map(attribute='role')|join }}{{ 'a\tb'.expandtabs(4) }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
    )
    out = render_chat_template(template, MESSAGES, bos_token="<s>")
    assert out == ("<s><|user|>Helloa, bx-2user!HeLLoHeLLo1535[1, 2, 3]usera   b"
                   "<|assistant|>")  # fmt: skip


def test_a_big_result_within_the_bounds_is_made() -> None:
    out = render_chat_template(BIG + "{{ ns.s|length }} {{ (range(100000)|list) * 10 }}", MESSAGES)
    assert out.startswith(f"{3 * 2**23} [0, 1, 2,")


def test_nothing_is_folded_while_compiling() -> None:
    """Constant filter calls ran while compiling: an 88 KiB template of them took 1.9 GiB."""
    literal = "{{ '" + "x" * 3000 + "'|replace('x', '" + "y" * 3000 + "') }}"
    tracemalloc.start()
    try:
        compiled_in_sandbox(literal * 10)  # 60 KiB; folded, 90 million characters
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20
    big = "{{ '" + "x" * 44000 + "'|replace('x', '" + "y" * 44000 + "') }}"  # 88 KiB
    t0 = time.monotonic()
    check_chat_template(big)
    assert time.monotonic() - t0 < ct.DEFAULT_TIME_LIMIT_S
    with pytest.raises(ChatTemplateError, match="implausibly long"):
        render_chat_template(big, MESSAGES)


def test_a_c_level_call_the_bounds_allow_is_killed_past_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Summing a million 65,534-bit integers is one C call of seconds: the renderer running it
    is killed shortly past the deadline, and the next template gets a new one."""
    t0 = time.monotonic()
    sum([2**32767] * 1_000_000)
    if time.monotonic() - t0 < 1.0:
        pytest.skip("this machine sums too fast for the call to outlast the deadline")
    monkeypatch.setattr(ct, "KILL_GRACE_S", 0.1)
    render_chat_template("{{ 1 }}", MESSAGES)
    before = renderer_pid()
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError, match=r"did not finish within 0\.5 s"):
        render_chat_template("{{ ([2 ** 32767] * 1000000)|sum }}", MESSAGES, time_limit_s=0.5)
    assert time.monotonic() - t0 < 2.0
    assert renderer_pid() is None, "the renderer that ran it was killed"
    assert render_chat_template("{{ 'again' }}", MESSAGES) == "again"
    assert renderer_pid() not in (None, before)


def test_cancel_stops_a_render_at_once() -> None:
    slow = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    render_chat_template("{{ 1 }}", MESSAGES)
    t0 = time.monotonic()
    with pytest.raises(CancelledError):
        render_chat_template(slow, MESSAGES, time_limit_s=30,
                             cancelled=lambda: time.monotonic() - t0 > 0.3)  # fmt: skip
    assert time.monotonic() - t0 < 2
    assert render_chat_template("{{ 'after' }}", MESSAGES) == "after"


def test_the_renderer_has_an_address_space_limit_and_no_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTEXTLENS_TEST_SECRET", "hunter2")
    ct.close_renderer()  # the next one starts with this environment
    render_chat_template("{{ 1 }}", MESSAGES)
    pid = renderer_pid()
    assert pid is not None
    limits = Path(f"/proc/{pid}/limits").read_text()
    [line] = [ln for ln in limits.splitlines() if ln.startswith("Max address space")]
    soft = line.split()[3]
    assert soft != "unlimited" and int(soft) < 4 * 2**30, line
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"hunter2" not in environ and b"PYTHONSAFEPATH=1" in environ


def test_a_template_that_runs_out_of_memory_costs_only_the_renderer() -> None:
    """Memory grown by lines the sandbox runs: the ceiling or the address-space limit ends it
    with one sentence, the caller's memory unchanged, the next template served."""
    grow = "{% set ns = namespace(xs=[]) %}{% for i in range(100000) %}" \
           "{% set ns.xs = ns.xs + [('x' * 1000000) ~ i] %}{% endfor %}"  # fmt: skip
    with pytest.raises(ChatTemplateError, match=r"memory|implausibly long|did not finish"):
        render_chat_template(grow, MESSAGES)
    assert render_chat_template("{{ 'fine' }}", MESSAGES) == "fine"


# ----- while a model loads ---------------------------------------------------------------------

SETTINGS = LoadSettings(n_ctx=256, n_batch=32, n_ubatch=32, n_threads=1)
WARNING = "the model's chat template cannot be used ("


def _with_template(model: Path, template: str, out: Path) -> Path:
    """The default model's header with ``template`` as its chat template, weights a hole."""
    entry = gc.kv("tokenizer.chat_template", gc.STRING, template)
    case = fz.FuzzCase(out.stem, "template", "real",
                       (fz.PutEntry("tokenizer.chat_template", entry),))  # fmt: skip
    fz.real_base(model).image(case).write(out)
    return out


@pytest.mark.parametrize(
    ("template", "phrase"),
    [("{{ ((((9 ** 64) ** 64) ** 64) ** 64) }}", "too large"),  # once 151 s
     ("{{ ('x' * 30000)|replace('x', 'y' * 30000) }}", "implausibly long"),
     ("{% for i in range(4) %}{{ (([2 ** 32767] * 1000000)|sum) > 0 }}{% endfor %}",
      "did not finish")],
    ids=["nested-powers", "replace", "c-level-sum"],
)  # fmt: skip
def test_a_model_whose_template_would_run_for_minutes_loads_in_seconds(
    idle_host: EngineHost, model_path: Path, tmp_path: Path, template: str, phrase: str
) -> None:
    path = _with_template(model_path, template, tmp_path / "slow-template.gguf")
    t0 = time.monotonic()
    loaded = idle_host.load(path, SETTINGS)
    assert time.monotonic() - t0 < 15  # llama.cpp's own load, plus at most 2 s + 1 s
    [warning] = [w for w in loaded.warnings if w.startswith(WARNING)]
    assert phrase in warning, warning


def test_cancel_stops_a_load(idle_host: EngineHost, model_path: Path, tmp_path: Path) -> None:
    slow = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    path = _with_template(model_path, slow, tmp_path / "slow-template.gguf")
    idle_host.start()
    cancelled_at: list[float] = []

    def cancel_soon() -> None:
        time.sleep(0.5)
        cancelled_at.append(time.monotonic())
        idle_host.cancel()

    threading.Thread(target=cancel_soon, daemon=True).start()
    with pytest.raises(CancelledError, match="cancelled"):
        idle_host.load(path, SETTINGS)
    assert time.monotonic() - cancelled_at[0] < LOAD_CANCEL_GRACE_S + 1.5
    assert idle_host.model is None
    loaded = idle_host.load(model_path, SETTINGS)  # the next load works
    assert not [w for w in loaded.warnings if w.startswith(WARNING)]
    assert idle_host.tokenize("Hello", add_special=False)


def test_a_load_that_ignores_the_cancel_ends_with_its_engine(
    idle_host: EngineHost, model_path: Path
) -> None:
    """What cannot stop by itself (llama.cpp reading a file) ends with the child: shown with a
    request the child does not check the cancel flag in, given the load's grace."""
    idle_host.load(model_path, SETTINGS)
    pid = idle_host.pid
    text = "Hello there, how are you today? " * 300_000  # ten seconds of tokenizing, or more
    threading.Timer(0.3, idle_host.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(CancelledError, match="the engine stopped with it"):
        idle_host._call("tokenize", "tokenizing", cancel_grace=0.2, text=text)
    assert time.monotonic() - t0 < 5
    assert not idle_host.alive and pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert idle_host.load(model_path, SETTINGS).n_ctx == 256
