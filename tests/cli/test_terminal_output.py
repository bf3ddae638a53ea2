"""What a model file says reaches the terminal as text, never as control sequences (issue 47,
rows 8 and 9).

An architecture of ``llama\\x1b]0;TITLE\\x07\\x1b[2J`` in a GGUF header was printed raw by
``models``: the file set the terminal's title and cleared the screen. Every line the command
line prints from a header, a file name or an error is escaped; and the header's sizes are
bounded before ``info`` multiplies them (it printed "fits: -27,021,597,764,222,976 MiB").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK
from app.core.textutil import terminal_safe
from tests.cli.runner import assert_one_line_error, run
from tests.core import gguf_cases as gc

pytestmark = pytest.mark.unit

ARCH = "llama\x1b]0;TITLE\x07\x1b[2J"
SHOWN = "llama\\x1b]0;TITLE\\x07\\x1b[2J"
# What a terminal acts on: C0 but the line ends, DEL, C1, and the bidirectional overrides.
ACTS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _gguf(path: Path, *, arch: str = "llama", name: str = gc.TINY_NAME, **sizes: int) -> Path:
    """The crafted tiny model with its architecture, name and ``<arch>.<key>`` sizes given."""
    new = {"general.architecture": (gc.STRING, arch), "general.name": (gc.STRING, name)}
    new |= {f"llama.{key}": (gc.INT64, value) for key, value in sizes.items()}
    names = [gc.gstr(key) for key in new]
    kvs = [e for e in gc.tiny_model_kvs(every_type=False)
           if not any(e.startswith(n) for n in names)]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gc.build_gguf([*kvs, *(gc.kv(k, t, v) for k, (t, v) in new.items())],
                                   gc.tiny_tensors()))  # fmt: skip
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with nothing in it but ContextLens's models folder (returned)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("CONTEXTLENS_MODELS", str(tmp_path / "models"))
    return tmp_path / "models"


def test_models_escapes_what_the_header_and_the_file_name_say(home: Path) -> None:
    """The review's architecture, and a file name holding ESC; a file that is not a GGUF is
    skipped in one sentence on stderr, its name escaped too."""
    _gguf(home / "evil\x1b[1m.gguf", arch=ARCH)
    (home / "not\x1b]0;X\x07.gguf").write_bytes(b"nope")
    proc = run("models")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert ACTS.search(proc.stdout) is None and ACTS.search(proc.stderr) is None
    assert "  evil\\x1b[1m.gguf\n" in proc.stdout
    assert f"      {SHOWN} · " in proc.stdout
    assert proc.stderr.startswith("Skipped ") and "not\\x1b]0;X\\x07.gguf" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_info_prints_one_escaped_line_per_field(tmp_path: Path) -> None:
    path = _gguf(tmp_path / "m\x1b[2J.gguf", arch=ARCH, name="Tiny\x1b[31m\nsecond line")
    proc = run("info", str(path))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert ACTS.search(proc.stdout) is None
    lines = proc.stdout.splitlines()
    assert "              name: Tiny\\x1b[31m\\nsecond line" in lines
    assert f"      architecture: {SHOWN}" in lines
    assert lines[0].startswith("              file: ") and "m\\x1b[2J.gguf" in lines[0]


def test_an_error_naming_the_file_is_escaped(tmp_path: Path) -> None:
    proc = run("info", str(tmp_path / "gone\x1b]0;X\x07.gguf"))
    assert proc.returncode == EXIT_BAD_INPUT
    assert_one_line_error(proc)
    assert ACTS.search(proc.stderr) is None
    assert proc.stderr.endswith("gone\\x1b]0;X\\x07.gguf\n"), proc.stderr


def test_info_refuses_negative_sizes_in_one_sentence(tmp_path: Path) -> None:
    """Row 9: the review's header; before, "fits: -27,021,597,764,222,976 MiB of … free"."""
    path = _gguf(tmp_path / "negative.gguf", embedding_length=-(2**62),
                 feed_forward_length=-(2**62), **{"attention.key_length": -(2**62)})  # fmt: skip
    proc = run("info", str(path))
    assert proc.returncode == EXIT_BAD_INPUT
    assert_one_line_error(proc)
    assert proc.stderr == ("error: llama.embedding_length is -4611686018427387904; an embedding "
                           "width is 1 to 1,048,576 in a real model\n")  # fmt: skip


@pytest.mark.parametrize(("text", "shown"), [
    ("plain words, é 日本 🌍", "plain words, é 日本 🌍"),
    (ARCH, SHOWN),
    ("a\nb\r\tc", "a\\nb\\r\\tc"),
    ("\x00\x7f\x9b", "\\x00\\x7f\\x9b"),
    ("abc\u202edcba", "abc\\u202edcba"),
    ("bytes \udc9b", "bytes \\udc9b"),
])  # fmt: skip
def test_terminal_safe_writes_control_characters_as_escapes(text: str, shown: str) -> None:
    assert terminal_safe(text) == shown
    assert ACTS.search(terminal_safe(text)) is None and "\n" not in terminal_safe(text)
