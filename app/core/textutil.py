"""Text hygiene shared by every path that hands text to a tokenizer, or to a person.

Python strings may hold lone surrogates (from ``surrogateescape`` decoding or pasted text) that
have no UTF-8 form. llama.cpp takes bytes, tiktoken takes str; both must see the same characters
or their token counts disagree, so both go through :func:`scrub` first.

A message that quotes what someone else wrote (a template's ``raise_exception``, a server's
error, a document's) is as long as they made it: 40 million characters reached the load warnings,
and a word-wrapped label given a million kept the window busy 56 s. :func:`clip_message` bounds
one before it is passed on.

A terminal acts on the control characters it is sent: a model's architecture of
``llama\x1b]0;TITLE\x07\x1b[2J`` set the terminal's title and cleared it when the command line
printed it. :func:`terminal_safe` writes them as escapes before anything a file or a server said
reaches the terminal.
"""

from __future__ import annotations

import re

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def scrub(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD; the same object when there is none."""
    if _LONE_SURROGATE.search(text) is None:
        return text
    return _LONE_SURROGATE.sub(REPLACEMENT, text)


def utf8(text: str) -> bytes:
    """The UTF-8 bytes llama.cpp is given for ``text``."""
    return scrub(text).encode("utf-8")


MAX_MESSAGE_CHARS = 600  # a sentence, a quoted name or path, and room to spare


def clip_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text``, cut at ``limit`` characters with how much more there was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()}… ({len(text) - limit:,} more characters)"


# C0 controls, DEL and C1 controls (ESC, BEL, CSI, newlines: a terminal acts on them), the
# bidirectional overrides and isolates, which reorder what follows them on the screen, and lone
# surrogates (a file name's undecodable bytes, which would reach the terminal raw or not at all).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def terminal_safe(text: str) -> str:
    """``text`` as a terminal shows it without acting on it: every control character written as
    its escape (``\\x1b``, ``\\n``, ``\\u202e``); the same object when there is none."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
