"""The document reader's child, where hostile HTML, PDF and DOCX are parsed (review round 3, row
7): it got the whole environment (``CONTEXTLENS_API_KEY`` included), had no processor-time limit
and outlived a SIGKILLed app by 8 s. Now it gets only what starting Python needs, stops at
``READER_CPU_S`` of processor time, and ends within a second of its parent."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import psutil
import pytest

from app.core.child_process import minimal_env
from app.core.documents import isolated
from app.core.paths import project_root
from tests.conftest import DATA


@pytest.mark.unit
def test_the_reader_s_environment_holds_no_key_or_token() -> None:
    base = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "CONTEXTLENS_API_KEY": "secret",
            "HF_TOKEN": "hf_secret", "CONTEXTLENS_DB": "/home/me/h.db",
            "HOME": "/home/me"}  # fmt: skip
    env = minimal_env(base)
    assert env["PATH"] == "/usr/bin" and env["LANG"] == "C.UTF-8"
    assert env["PYTHONSAFEPATH"] == "1" and env["PYTHONPATH"]
    assert not {"CONTEXTLENS_API_KEY", "HF_TOKEN", "CONTEXTLENS_DB", "HOME"} & set(env)


def test_a_real_read_starts_its_child_with_that_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTEXTLENS_API_KEY", "secret")
    seen: list[dict[str, str]] = []
    real = subprocess.Popen

    def spy(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        seen.append(kwargs["env"])
        return real(*args, **kwargs)

    monkeypatch.setattr(isolated.subprocess, "Popen", spy)
    doc = isolated.read_document(DATA / "sample.html")
    assert doc.text and seen and "CONTEXTLENS_API_KEY" not in seen[0]


def test_processor_time_is_capped() -> None:
    spin = "from app.core.documents.child import limit_cpu\nlimit_cpu(1)\nwhile True: pass\n"
    done = subprocess.run([sys.executable, "-c", spin], cwd=project_root(), timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode in (-signal.SIGXCPU, -signal.SIGKILL)


PARENT = textwrap.dedent("""
    import socket, subprocess, sys, time
    ours, theirs = socket.socketpair()
    child = subprocess.Popen([sys.executable, "-m", "app.core.documents.child", "--fd",
                              str(theirs.fileno()), "--memory", str(1 << 30)],
                             pass_fds=(theirs.fileno(),), start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(600)  # never sends a request: the child waits, as one mid-parse would
""")


def test_the_reader_ends_with_its_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=project_root(),
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        time.sleep(1.0)  # its watch has started
        assert child.is_running()
        parent.kill()
        parent.wait(10)
        _gone, alive = psutil.wait_procs([child], timeout=5)
        assert not alive, "the reader outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_reader_cpu_cap_is_in_the_sentence() -> None:
    """A reader stopped for its processor time says so in one sentence."""

    class _Stopped:
        def wait(self) -> int:
            return -signal.SIGXCPU

    sentence = isolated._died("book.pdf", _Stopped(), isolated.Limits())  # type: ignore[arg-type]
    assert sentence == (f"book.pdf could not be read: it took more than "
                        f"{isolated.READER_CPU_S} s of processor time, far more than any "
                        "document needs.")  # fmt: skip
