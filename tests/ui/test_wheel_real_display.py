"""The real mouse wheel over every spin box and combo box of the window, on a real X server,
without a click: no value changes. Qt gives such a widget the focus on the wheel's first notch
from a real mouse (its ``WheelFocus`` policy), which synthesized Qt events never showed: the
guard passed the wheel through and two notches over Context size turned 4,096 into 6,144.

The window runs in a process of its own on Xvfb (tests/ui/wheel_probe.py says where each widget
is and what it holds); xdotool turns the wheel as a person's mouse does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.ui.real_display import Display, ProbeProcess, missing_tools

pytestmark = pytest.mark.skipif(
    bool(missing_tools()),
    reason=f"needs {', '.join(missing_tools())} (make setup installs them when run as root)",
)

WHEEL_DOWN, WHEEL_UP = "5", "4"  # X's buttons for one notch of the wheel
SETTLE_S = 0.5  # for the window to take the last events xdotool sent before it is asked


class Probe(ProbeProcess):
    def __init__(self, display: Display) -> None:
        super().__init__("tests.ui.wheel_probe", [], display.env)

    def ask(self, command: str) -> object:
        return self.send(command)

    def widgets(self) -> list[dict]:
        answer = self.ask("list")
        assert isinstance(answer, list)
        return answer


@pytest.fixture
def probe() -> Iterator[tuple[Display, Probe]]:
    screen = Display("1366x768")
    p = Probe(screen)
    try:
        window = ""
        for _ in range(40):
            window = screen.window("wheel probe")
            if window:
                break
            time.sleep(0.25)
        assert window, "the window was never mapped"
        screen.focus(window)
        yield screen, p
    finally:
        p.close()
        screen.close()


def test_the_wheel_changes_no_value_without_a_click(probe: tuple[Display, Probe]) -> None:
    display, p = probe
    before = p.widgets()
    assert len(before) >= 8, before
    turned = []
    for i, widget in enumerate(before):
        p.ask(f"show {i}")  # scrolled into view as a person would scroll to it
        now = p.widgets()[i]
        if not now["shown"]:
            continue
        x, y = str(now["x"]), str(now["y"])
        display.xdotool("mousemove", "--sync", x, y, "click", WHEEL_UP, "click", WHEEL_DOWN,
                        "click", WHEEL_DOWN)  # fmt: skip
        turned.append(widget["name"])
    time.sleep(SETTLE_S)
    after = p.widgets()
    changed = [(b["name"], b["value"], a["value"]) for b, a in zip(before, after, strict=True)
               if a["value"] != b["value"]]  # fmt: skip
    assert not changed, f"the wheel changed values it had no focus for: {changed}"
    assert not any(a["focused"] for a in after), "the wheel gave a widget the focus"
    assert len(turned) >= 8, turned

    # a click gives one the focus, and then the wheel is its own: the wheel did reach them
    spin = next(i for i, w in enumerate(after) if w["name"].startswith("QSpinBox"))
    p.ask(f"show {spin}")
    target = p.widgets()[spin]
    display.xdotool("mousemove", "--sync", str(target["x"]), str(target["y"]), "click", "1")
    display.xdotool("click", WHEEL_UP)
    end = time.monotonic() + 10
    while (clicked := p.widgets()[spin])["value"] == target["value"] and time.monotonic() < end:
        time.sleep(0.1)
    assert clicked["focused"] and clicked["value"] != target["value"], (target, clicked)
