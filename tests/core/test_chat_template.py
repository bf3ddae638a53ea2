"""A GGUF's chat template is foreign code: it renders in a capped sandbox with a deadline."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from app.core.engine import chat_template as ct
from app.core.engine.chat_template import ChatTemplateError, render_chat_template, render_here
from app.core.engine.reply_text import StopMatcher
from app.core.textutil import MAX_MESSAGE_CHARS, clip_message

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MESSAGES = [{"role": "user", "content": "你好"}]


def test_renders_a_real_template() -> None:
    out = render_chat_template(CHATML, MESSAGES)
    assert out == "<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize(
    ("template", "phrase"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         "did not finish"),
        ("{{ 'x' * 1000000000 }}", "too long"),
        ("{{ 2 ** 100000 }}", "too large"),
        ("{{ ().__class__.__bases__[0].__subclasses__() }}", "failed"),
        ("{{ messages.append(1) }}", "failed"),
        ("{{ raise_exception('only user and assistant roles') }}", "only user and assistant"),
        ("{% for %}", "does not compile"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "too deeply"),
    ],
)  # fmt: skip
def test_hostile_templates_end_in_a_clear_error(template: str, phrase: str) -> None:
    with pytest.raises(ChatTemplateError, match=phrase) as err:
        render_chat_template(template, MESSAGES, time_limit_s=0.5)
    assert "\n" not in str(err.value)


# CVE-2025-27516: on Jinja 3.1.5, |attr('format') handed the template str.format itself, whose
# field syntax walks attributes unsandboxed: this printed the environment variable.
CVE_2025_27516 = "{{ '{0.__init__.__globals__[os].environ[CONTEXTLENS_TEST_SECRET]}'|attr('format')(cycler) }}"  # noqa: E501


@pytest.mark.unit
def test_jinja_is_at_least_3_1_6() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    [jinja] = [Requirement(d) for d in pyproject["project"]["dependencies"]
               if d.startswith("jinja2")]  # fmt: skip
    assert "3.1.5" not in jinja.specifier and "3.1.6" in jinja.specifier
    assert tuple(int(p) for p in version("jinja2").split(".")[:3]) >= (3, 1, 6)


@pytest.mark.parametrize("where", ["sandbox", "renderer"])
def test_the_attr_format_escape_prints_no_secret(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.setenv("CONTEXTLENS_TEST_SECRET", "hunter2")
    if where == "renderer":
        ct.close_renderer()  # its next process starts with the secret in this environment
    render = render_here if where == "sandbox" else render_chat_template
    with pytest.raises(ChatTemplateError, match="SecurityError") as err:
        render(CVE_2025_27516, MESSAGES)
    assert "hunter2" not in str(err.value)


@pytest.mark.unit
def test_messages_are_checked() -> None:
    with pytest.raises(ChatTemplateError, match="role"):
        render_chat_template(CHATML, [{"content": "x"}])


@pytest.mark.unit
def test_stop_matcher_holds_back_a_possible_stop_string() -> None:
    m = StopMatcher(["</end>"])
    assert m.feed("hello </e") == ("hello ", False)
    assert m.feed("n") == ("", False)
    assert m.feed("d> tail") == ("", True)
    m = StopMatcher(["STOP"])
    assert m.feed("no st") == ("no st", False)
    assert m.feed("op here") == ("op here", False)
    assert m.flush() == ""
    m = StopMatcher([])
    assert m.feed("anything") == ("anything", False)


def test_a_template_s_own_error_message_is_capped_before_anyone_shows_it() -> None:
    """Review round 3, row 4: ``raise_exception`` with a 40,000,040-character message reached
    the load warnings whole, and a word-wrapped label given a million characters kept the window
    busy 56 s. The renderer sends at most MAX_MESSAGE_CHARS of it, and says how much more."""
    with pytest.raises(ChatTemplateError) as err:
        render_chat_template("{{ raise_exception('x' * 900000 ~ 'y' * 900000) }}", MESSAGES,
                             time_limit_s=5)
    message = str(err.value)
    assert len(message) < MAX_MESSAGE_CHARS + 50
    assert message.endswith("more characters)") and "x" * 1000 not in message
    assert clip_message("short") == "short"
