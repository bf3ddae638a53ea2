"""PDF text through pypdf, one page at a time, under decompression caps.

A PDF is a container of compressed streams: a few kilobytes can declare gigabytes. pypdf's own
per-stream caps (its ``Configuration``, pypdf 7) are set from ``Limits`` for the duration of the
read only, so other readers in the process keep pypdf's defaults.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from app.core.documents.decoding import strip_surrogates
from app.core.documents.messages import short_reason
from app.core.documents.model import Block, BlockKind, DocumentError, Limits, Parsed
from app.core.documents.text import split_paragraphs

PAGE_SEPARATOR = "\n\n"
# PDF text has no tab stops: pypdf renders the word gaps of some embedded fonts (Qt's and
# wkhtmltopdf's subsets, for two) as tabs, and typesetters draw "fi", "fl"... as ligature glyphs.
_PLAIN = str.maketrans(
    {
        "\t": " ",
        "\x00": None,
        "\ufb00": "ff",
        "\ufb01": "fi",
        "\ufb02": "fl",
        "\ufb03": "ffi",
        "\ufb04": "ffl",
        "\ufb05": "st",
        "\ufb06": "st",
    }
)


# pypdf reports repairable damage ("EOF marker not found") through logging; with no handler set
# Python would print it to stderr next to our one-sentence error. The outcome is what counts.
logging.getLogger("pypdf").addHandler(logging.NullHandler())


def parse_pdf(data: bytes, *, name: str, limits: Limits) -> Parsed:
    # The PDF standard lets the header start anywhere in the first kilobyte.
    if b"%PDF-" not in data[:1024]:
        raise DocumentError(f"{name} is not a PDF file (it does not start with %PDF-).")
    from pypdf.errors import DependencyError, LimitReachedError

    try:
        with _pdf_limits(limits):
            page_texts = _page_texts(data, name, limits)
    except DocumentError:
        raise
    except DependencyError as exc:
        raise DocumentError(
            f"{name} needs a PDF feature this installation lacks ({short_reason(exc)})."
        ) from exc
    except LimitReachedError as exc:
        raise DocumentError(f"{name} exceeds a PDF safety limit ({short_reason(exc)}).") from exc
    except Exception as exc:  # pypdf signals malformed files with many exception types
        raise DocumentError(f"{name} is not a readable PDF ({short_reason(exc)}).") from exc
    if not any(t.strip() for t in page_texts):
        raise DocumentError(
            f"{name} has no text layer (it is probably scanned images); run OCR on it first."
        )
    return _assemble(page_texts)


def _page_texts(data: bytes, name: str, limits: Limits) -> list[str]:
    from pypdf import PasswordType, PdfReader

    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        raise DocumentError(f"{name} is password-protected; remove the password and open it again.")
    count = len(reader.pages)
    if count == 0:
        raise DocumentError(f"{name} has no pages.")
    if count > limits.pdf_max_pages:
        raise DocumentError(f"{name} has {count:,} pages; the limit is {limits.pdf_max_pages:,}.")
    texts: list[str] = []
    for page in reader.pages:
        text, _ = strip_surrogates((page.extract_text() or "").translate(_PLAIN))
        texts.append(text.rstrip())
    return texts


def _assemble(page_texts: list[str]) -> Parsed:
    """Join pages; each page's range runs to the next page's start, so ranges cover the text."""
    text = PAGE_SEPARATOR.join(page_texts)
    starts: list[int] = []
    pos = 0
    for page_text in page_texts:
        starts.append(pos)
        pos += len(page_text) + len(PAGE_SEPARATOR)
    ends = [*starts[1:], len(text)]
    pages = tuple(zip(starts, ends, strict=True))
    blocks = tuple(
        Block(BlockKind.PARAGRAPH, start, end)
        for page_start, page_text in zip(starts, page_texts, strict=True)
        for start, end in split_paragraphs(text, page_start, page_start + len(page_text))
    )
    return Parsed(text=text, blocks=blocks, pages=pages)


@contextmanager
def _pdf_limits(limits: Limits) -> Iterator[None]:
    """pypdf's decompression caps set from ``limits``; restored when the block ends."""
    from pypdf import apply_configuration

    cap = limits.pdf_max_stream_bytes
    with apply_configuration(
        maximum_declared_stream_length=cap,
        array_based_stream_maximum_output_length=cap,
        zlib_maximum_output_length=cap,
        lzw_maximum_output_length=cap,
        run_length_maximum_output_length=cap,
        brotli_maximum_output_length=cap,
        jbig2_maximum_output_length=cap,
        image_maximum_buffer_size=cap,
        stream_decoding_work_maximum_length=cap,
        jbig2dec_binary=None,  # text extraction never needs to run an external program
    ):
        yield
