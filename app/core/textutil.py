"""Text hygiene shared by every path that hands text to a tokenizer.

Python strings may hold lone surrogates (from ``surrogateescape`` decoding or pasted text) that
have no UTF-8 form. llama.cpp takes bytes, tiktoken takes str; both must see the same characters
or their token counts disagree, so both go through :func:`scrub` first.
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
