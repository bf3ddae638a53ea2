"""Text hygiene shared by every path that hands text to a tokenizer, or to a person.

Python strings may hold lone surrogates (from ``surrogateescape`` decoding or pasted text) that
have no UTF-8 form. llama.cpp takes bytes, tiktoken takes str; both must see the same characters
or their token counts disagree, so both go through :func:`scrub` first.

A message that quotes what someone else wrote (a template's ``raise_exception``, a server's
error, a document's) is as long as they made it: 40 million characters reached the load warnings,
and a word-wrapped label given a million kept the window busy 56 s. :func:`clip_message` bounds
one before it is passed on.
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
