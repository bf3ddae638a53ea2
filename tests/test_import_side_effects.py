"""Importing the app's packages changes nothing process-wide: what the window needs of the
process (the thread switch interval) is set by its entry point, so a test, a benchmark or the
command line that imports a module of app.ui gets the interpreter as it was."""

from __future__ import annotations

import importlib
import sys

import pytest

from app.ui.switch_interval import GUI_SWITCH_INTERVAL_S, shorten_switch_interval

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("package", ["app", "app.ui", "app.cli", "app.core", "app.services"])
def test_importing_a_package_keeps_the_thread_switch_interval(package: str) -> None:
    was = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # the interpreter's default
    try:
        importlib.reload(importlib.import_module(package))
        assert sys.getswitchinterval() == pytest.approx(0.005)
    finally:
        sys.setswitchinterval(was)


def test_the_window_entry_point_shortens_it() -> None:
    was = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        shorten_switch_interval()
        assert sys.getswitchinterval() == pytest.approx(GUI_SWITCH_INTERVAL_S)
        sys.setswitchinterval(0.0001)  # a shorter one is left as it is
        shorten_switch_interval()
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    finally:
        sys.setswitchinterval(was)
