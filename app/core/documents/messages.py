"""Wording shared by the readers, so every refusal reads as one plain sentence."""

from __future__ import annotations

from typing import Final

_REASON_CHARS: Final = 120
_UNITS: Final = ("bytes", "KB", "MB", "GB", "TB")


def human_size(size: int) -> str:
    """``312.4 MB``, ``200 MB``, ``12 bytes``: binary multiples, as file managers show them."""
    value = float(size)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    if unit == "bytes":
        return f"{size:,} bytes" if size != 1 else "1 byte"
    return f"{value:.1f} {unit}".replace(".0 ", " ")


def short_reason(exc: BaseException) -> str:
    """The first line of an exception's message, short enough to sit inside a sentence."""
    lines = str(exc).strip().splitlines()
    reason = lines[0].strip().rstrip(".") if lines else ""
    if len(reason) > _REASON_CHARS:
        reason = reason[: _REASON_CHARS - 1] + "…"
    return reason or type(exc).__name__
