"""A pool of two real llama-servers in the window on a real X server (Xvfb at 1366x768), driven
by real input through xdotool (tests/ui/pool_probe.py says where each widget is and what each
server's row shows): the two addresses typed into the Server box (the second after a click on
"Add a server"), Connect clicked, a question asked with Ctrl+R; the first server is killed
(SIGKILL) while it generates. Its row in the gauges, on the screen, changes from "up" to "lost",
the reply finishes whole on the second, the status bar says the loss once.

The screenshots go to build/real-display-pool/.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.paths import sample_document
from tests.llama_servers import NO_LLAMA_SERVER, have_llama_server, llama_servers
from tests.ui.real_display import Display, ProbeProcess, home_env, missing_tools, until

pytestmark = [
    pytest.mark.window,
    pytest.mark.serial,  # two servers and the app: every core
    pytest.mark.skipif(
        bool(missing_tools()),
        reason=f"needs {', '.join(missing_tools())} (make setup installs them when run as root)",
    ),
    pytest.mark.skipif(not have_llama_server(), reason=NO_LLAMA_SERVER),
]

SHOTS = Path(__file__).parents[2] / "build" / "real-display-pool"
QUESTION = {"question": "List every term this text defines, and explain each of them in a few "
            "sentences.", "max_tokens": 160}  # fmt: skip
DOCUMENT_CHARS = 1_500  # a short prompt: the job runs twice, once on each server
WHOLE = ("stop", "length", "repetition")  # how a whole reply ends (a loop cut is whole too)


class Probe(ProbeProcess):
    def __init__(self, display: Display, home: Path, document: Path) -> None:
        super().__init__("tests.ui.pool_probe", [str(document)], home_env(display, home),
                         errors=home / "probe-errors.txt")  # fmt: skip

    def ask(self, command: str) -> dict | list:
        answer = self.send(command)
        if isinstance(answer, dict):
            assert "error" not in answer, f"the probe could not answer {command!r}: {answer}"
        assert isinstance(answer, dict | list), answer
        return answer

    def state(self) -> dict:
        answer = self.ask("state")
        assert isinstance(answer, dict)
        return answer

    def widget(self, name: str) -> dict:
        answer = self.ask(f"widget {name}")
        assert isinstance(answer, dict)
        return answer

    def has(self, name: str) -> bool:
        answer = self.send(f"widget {name}")
        return isinstance(answer, dict) and "error" not in answer

    def rows(self) -> list[dict]:
        answer = self.ask("rows")
        assert isinstance(answer, list)
        return answer


@pytest.fixture
def document(tmp_path: Path) -> Path:
    doc = tmp_path / "lexicon.txt"
    text = sample_document().read_text(encoding="utf-8")
    doc.write_text(text[text.index("Verb Doubling") :][:DOCUMENT_CHARS], encoding="utf-8")
    return doc


@pytest.fixture
def display() -> Iterator[Display]:
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    screen = Display("1366x768")
    yield screen
    screen.close()


def click_and_type(display: Display, probe: Probe, name: str, text: str) -> None:
    """Click into the field ``name`` (again while the keyboard is not there yet: a panel laid
    out anew moves it) and type ``text`` over what it holds."""
    for _ in range(5):
        field = probe.widget(name)
        assert field["shown"] and field["enabled"], field
        display.click(field["x"], field["y"])
        time.sleep(0.3)
        if probe.widget(name)["focused"]:
            break
    display.key("ctrl+a")
    display.type(text)
    until(lambda: probe.widget(name)["text"] == text, f"{text} typed into {name}", probe, 10)


def click(display: Display, probe: Probe, name: str) -> None:
    button = probe.widget(name)
    assert button["shown"] and button["enabled"], button
    display.click(button["x"], button["y"])


def test_a_server_killed_mid_reply_shows_lost_in_its_row_and_the_reply_ends_on_the_other(
    display: Display, document: Path, model_path: Path, tmp_path: Path
) -> None:
    with llama_servers(model_path, 2, tmp_path / "servers", parallel=1,
                       ctx_per_slot=2048) as (first, second):  # fmt: skip
        (home := tmp_path / "home").mkdir()
        probe = Probe(display, home, document)
        try:
            window = str(until(lambda: display.window("ContextLens"), "window", probe, 30))
            display.focus(window)
            until(lambda: probe.state()["document"], "document planned", probe, 60)
            click_and_type(display, probe, "serverAddress-1", first.url)
            for _ in range(5):  # as a person clicks again when nothing happened
                click(display, probe, "addServer")
                time.sleep(0.5)
                if probe.has("serverAddress-2"):
                    break
            assert probe.widget("serverAddress-2")["focused"]  # the new line has the keyboard
            click_and_type(display, probe, "serverAddress-2", second.url)
            click(display, probe, "serverConnect")
            until(lambda: (s := probe.state())["connected"] and s["ready"], "pool connected",
                  probe, 90)  # fmt: skip
            rows = until(lambda: len(r := probe.rows()) == 2 and r, "two server rows", probe, 10)
            assert [(r["address"], r["state"], r["shown"]) for r in rows] == [  # type: ignore[union-attr]
                (first.url, "up", True), (second.url, "up", True)]  # fmt: skip
            display.shot(SHOTS / "1-pool-connected.png")

            assert probe.send("ask " + json.dumps(QUESTION)) == "ok"
            display.focus(window)
            display.key("ctrl+r")
            until(lambda: probe.state()["tokens"] > 0, "reply streaming", probe, 90)
            assert probe.rows()[0]["job"] == "running the job"
            first.kill()
            lost = until(lambda: (r := probe.rows())[0]["state"] == "lost" and r,
                         "the first server's row saying lost", probe, 60)  # fmt: skip
            display.shot(SHOTS / "2-first-server-lost.png")
            if probe.state()["running"]:  # the question, from its start, on the second
                assert lost[1]["job"] == f"running the job, moved from {first.url}", lost  # type: ignore[index]
            until(lambda: probe.state()["finished"] == 1, "the job's end", probe, 120)

            rows = probe.rows()
            display.shot(SHOTS / "3-after-the-move.png")
            assert rows[0]["state"] == "lost" and rows[0]["shown"], rows
            assert rows[0]["job"].startswith(f"its job ran again on {second.url}"), rows
            assert rows[1]["state"] == "up" and rows[1]["shown"], rows
            result = probe.ask("result")
            assert isinstance(result, dict)
            assert result["job_error"] is None and result["finish_reason"] in WHOLE
            assert result["text"].strip() and result["engine"] == second.url, result
            said = [s for s in probe.state()["said"] if s.startswith(f"Server {first.url}")]
            assert len(said) == 1 and "stopped answering" in said[0], said  # once
            assert said[0].endswith(f"the job runs again from its start on {second.url}"), said
        finally:
            probe.close()
