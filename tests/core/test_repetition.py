"""The output buffer's loop detector (app/core/engine/repetition.py): loops the default model really
fell into are caught early, and text that only looks regular is left alone."""

from __future__ import annotations

import pytest

from app.core.engine.repetition import Limits, RepetitionDetector, ends_in_loop
from app.core.paths import sample_document

pytestmark = pytest.mark.unit

# Replies the default model gave under greedy decoding (tests/core/test_sampling.py runs one).
POEM = (
    "In the shadows of the internet, a lone figure stood, a hacker, a warrior, a warrior of "
    "the internet. He was a lone figure" + ", a warrior of the internet" * 12
)
NERD = "I'm a nerd. I'm a creative AI designed to help people. " + "I'm a nerd. " * 12
NUMBERED = "1. Kaspersky Labs\n2. Able\n" + "".join(f"{i}. A.I.A.\n" for i in range(3, 40))
APPENDICES = "\n\n".join(
    f"Appendix {c}. A Guide to the Naming of Hackish Languages\n\n[J. Random Hacker]"
    for c in "CDEFGHIJK"
)
PARAGRAPH = (
    "The Jargon File is a binary format that can be used to create a JVM-specific file, which "
    "is then used to create a JVM-specific file. This allows JVM developers to share their own "
    "JVM-specific features and libraries with other developers.\n\n"
) * 4
CHINESE = "他是一个黑客，也是一个书呆子。" * 8


def _streamed(text: str, piece: int) -> tuple[int, tuple[int, int, str]] | None:
    """Where a detector fed ``piece`` characters at a time trips: (offset, what it found)."""
    detector = RepetitionDetector()
    for i in range(0, len(text), piece):
        if detector.feed(text[i : i + piece]):
            assert detector.tripped is not None
            return i + piece, detector.tripped
    return None


@pytest.mark.parametrize("text", [POEM, NERD, NUMBERED, APPENDICES, PARAGRAPH, CHINESE])
def test_loops_are_caught_before_they_run_on(text: str) -> None:
    found = _streamed(text, 3)
    assert found is not None, text
    at, (period, run, _view) = found
    assert at < len(text) and run >= 3 * period
    assert ends_in_loop(text)


def test_how_the_text_arrives_does_not_matter() -> None:
    for text in (POEM, NUMBERED, APPENDICES):
        trips = {_streamed(text, n)[1][:1] for n in (1, 4, 17)}  # type: ignore[index]
        assert len(trips) == 1, trips


def test_the_loop_is_found_at_its_third_copy() -> None:
    at, (period, _run, view) = _streamed(POEM, 1)  # type: ignore[misc]
    assert (period, view) == (len(", a warrior of the internet"), "exact")
    assert POEM[:at].count("a warrior of the internet") == 4  # one before the loop, three in it


NOT_LOOPS = {
    "a short word repeated": "It was very, very, very, very good. Ha ha ha ha ha! No, no, no.",
    "a list of different items": "".join(
        f"- item {w}\n" for w in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta",
                                  "theta", "iota", "kappa", "lambda", "mu")),
    "a markdown table": "| name | size |\n|------|------|\n" + "".join(
        f"| file{i}.txt | {i * 37 % 1000} KB |\n" for i in range(30)),
    "a table rule": "+" + "-" * 120 + "+\n|" + " " * 120 + "|\n+" + "=" * 120 + "+",
    "a row of zeros": "[" + ", ".join(["0"] * 100) + "]",
    "a count": ", ".join(["10"] * 40) + ", " + ", ".join(str(i % 2) for i in range(60)),
    "a matrix of zeros": "\n".join(" ".join(["0"] * 12) for _ in range(12)),
    "code with repeated lines of different content": "".join(
        f"    self.w{i} = nn.Linear({i * 16}, {i * 32})\n" for i in range(1, 20)),
    "code repeating a line three times": "f(\n" + "    _NoArg.NO_ARG,\n" * 3 + ")\n",
    "Duff's device": "switch (count % 8) {\ncase 0: do { *to = *from++;\n" + "".join(
        f"case {i}:      *to = *from++;\n" for i in range(7, 0, -1)) + "} while (--n > 0);\n}",
    "laughter": "哈" * 120,
    "box drawing": "┌" + "─" * 200 + "┐",
    "chapters": "".join(f"Chapter {i}\n" for i in range(1, 8)),
}


@pytest.mark.parametrize("name", list(NOT_LOOPS))
def test_regular_text_is_not_a_loop(name: str) -> None:
    text = NOT_LOOPS[name]
    assert _streamed(text, 4) is None, (name, text)


def test_a_long_real_document_has_no_loop() -> None:
    """60 KB of the Jargon File (prose, lists, a table of ASCII codes, code) streamed as
    tokens would be: no false alarm."""
    text = sample_document().read_text(encoding="utf-8")
    for start in (0, 240_000, 540_000):
        piece = text[start : start + 20_000]
        detector = RepetitionDetector()
        for i in range(0, len(piece), 4):
            assert not detector.feed(piece[i : i + 4]), piece[max(0, i - 400) : i + 4]


def test_limits_are_the_callers_choice() -> None:
    text = "ab ab ab ab "
    assert not ends_in_loop(text)
    assert ends_in_loop(text, Limits(min_chars=8, rich_letters=2))
    with pytest.raises(ValueError):
        RepetitionDetector(Limits(min_repeats=1))


def test_a_tripped_detector_stays_tripped() -> None:
    detector = RepetitionDetector()
    assert detector.feed(POEM) and detector.looping
    assert detector.feed("something new") and detector.feed("")
