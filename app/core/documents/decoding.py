"""Bytes to text: byte-order marks, then UTF-8, then charset-normalizer's best guess.

Chinese and other non-Latin text is first-class, so GBK, Big5, Shift-JIS and UTF-16 files must
decode without the person choosing an encoding. A file that is not text at all gets one clear
sentence, never a page of mojibake.
"""

from __future__ import annotations

import codecs

from charset_normalizer import from_bytes

from app.core.documents.model import DocumentError
from app.core.textutil import scrub

# Longest first: the UTF-32 LE mark starts with the UTF-16 LE one.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_REPLACEMENT_UTF8 = "\ufffd".encode()
# A UTF-8 file with a few stray bytes is still UTF-8: decoding it as a legacy code page would
# garble every correct character to save a handful of wrong ones. "Mostly" means at least this
# many bytes of valid multi-byte sequences per undecodable sequence.
_MOSTLY_UTF8_RATIO = 10
DECODE_SLICE = 1 << 20  # bytes decoded at a time (about a millisecond) by decode_in_slices
# Decoded whole: their incremental decoders refuse text without a byte-order mark, which a
# whole decode reads as little-endian.
_WHOLE = frozenset({"utf-16", "utf-32"})


def decode_bytes(data: bytes, *, name: str = "the input") -> tuple[str, str, bool]:
    """Return ``(text, encoding, lossy)``; ``lossy`` means some bytes became U+FFFD.

    ``name`` only words the error (the loader passes the file name).
    """
    if not data:
        raise DocumentError(f"{name} is empty.")
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode(data, encoding, name)
    if b"\x00" in data:
        raise DocumentError(f"{name} looks like a binary file, not text.")
    try:
        return decode_in_slices(data, "utf-8"), "utf-8", False
    except UnicodeDecodeError:
        pass
    mostly_utf8 = _mostly_utf8(data)
    if mostly_utf8 is not None:
        return mostly_utf8, "utf-8", True
    detected = _detect(data)
    if detected is None:
        raise DocumentError(_unrecognised(name))
    return _decode(data, detected, name)


def canonical_encoding(label: str) -> str | None:
    """Python's own name for an encoding label (``"GB2312"`` -> ``"gb2312"``), or None."""
    try:
        return codecs.lookup(label).name
    except (LookupError, TypeError, ValueError):
        return None


def decode_in_slices(
    data: bytes, encoding: str, errors: str = "strict", *, slice_bytes: int = DECODE_SLICE
) -> str:
    """``data.decode(encoding, errors)``, a slice at a time.

    One ``decode`` of 50 MB holds the GIL for ~90 ms, and the window's GUI thread waits that
    long to paint; between slices the GIL can change hands. The incremental decoder carries a
    character split across two slices over, so the text is the same.
    """
    if len(data) <= slice_bytes or canonical_encoding(encoding) in _WHOLE:
        return data.decode(encoding, errors)
    decoder = codecs.getincrementaldecoder(encoding)(errors)
    view = memoryview(data)
    parts = [decoder.decode(view[i : i + slice_bytes]) for i in range(0, len(data), slice_bytes)]
    parts.append(decoder.decode(b"", final=True))
    return "".join(parts)


def strip_surrogates(text: str) -> tuple[str, bool]:
    """Replace lone surrogates (which cannot be encoded or shown) with U+FFFD; say if any were."""
    clean = scrub(text)
    return clean, clean is not text


def _decode(data: bytes, encoding: str, name: str) -> tuple[str, str, bool]:
    try:
        text, lossy = decode_in_slices(data, encoding), False
    except UnicodeError:
        try:
            text, lossy = decode_in_slices(data, encoding, errors="replace"), True
        except (UnicodeError, LookupError) as exc:  # a codec that cannot even replace
            raise DocumentError(_unrecognised(name)) from exc
    text, replaced = strip_surrogates(text)  # only odd codecs (UTF-7) can produce them
    return text, canonical_encoding(encoding) or encoding, lossy or replaced


def _unrecognised(name: str) -> str:
    return f"{name} is not in any text encoding ContextLens recognises."


def _mostly_utf8(data: bytes) -> str | None:
    """The replacement-decoded text when the bytes are UTF-8 with a few bad sequences."""
    text = decode_in_slices(data, "utf-8", errors="replace")
    bad = text.count("\ufffd") - data.count(_REPLACEMENT_UTF8)
    # Every valid multi-byte character adds its extra bytes to len(data) - len(text).
    multibyte = len(data) - len(text)
    if bad > 0 and multibyte >= bad * _MOSTLY_UTF8_RATIO:
        return text
    return None


def _detect(data: bytes) -> str | None:
    try:
        best = from_bytes(data).best()
    except Exception:  # a detector bug must still end as one sentence, not a traceback
        return None
    if best is None or canonical_encoding(best.encoding) is None:
        return None
    return str(best.encoding)
