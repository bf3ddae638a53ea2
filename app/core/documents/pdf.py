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
from typing import Any

from pypdf import PasswordType, PdfReader, apply_configuration
from pypdf.errors import DependencyError, LimitReachedError
from pypdf.generic import ArrayObject, IndirectObject, StreamObject

from app.core.documents.decoding import strip_surrogates
from app.core.documents.messages import human_size, short_reason
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

    try:
        with _pdf_limits(limits):
            page_texts = _page_texts(data, name, limits)
    except (DocumentError, MemoryError):
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
    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        raise DocumentError(f"{name} is password-protected; remove the password and open it again.")
    count = len(reader.pages)
    if count == 0:
        raise DocumentError(f"{name} has no pages.")
    if count > limits.pdf_max_pages:
        raise DocumentError(f"{name} has {count:,} pages; the limit is {limits.pdf_max_pages:,}.")
    pages = list(reader.pages)
    work = _Work(limits.pdf_work_base + int(limits.pdf_work_ratio * len(data)), name, len(data))
    forms: dict[int, tuple[object, str]] = {}  # every form's text, read once for the document
    texts: list[str] = []
    read: dict[object, str] = {}  # pages drawn by the same content with the same resources
    try:
        keys = _check_work(pages, work)
        for page, key in zip(pages, keys, strict=True):
            if key in read:
                work.add(len(read[key]))  # the text again: no parsing, but it is all kept
            else:
                _read_forms_once(page, forms, work)
                text, _ = strip_surrogates((page.extract_text() or "").translate(_PLAIN))
                read[key] = text.rstrip()
            texts.append(read[key])
    except _TooMuchWork as stop:
        raise stop.error from None
    return texts


# ----- bounding the work -----------------------------------------------------------------------
#
# pypdf reads a page by parsing its content streams and running their operators (~1 µs a byte),
# after building every font of its resources (their ToUnicode maps parsed again for each page),
# and runs a form XObject's content each time a page draws it. A stream is stored once however
# many pages or forms use it, so a 10 KiB file whose pages all share one 3 MiB stream (each
# page ~15 s) or draw one big form could keep pypdf busy for hours. Here the work is counted
# before any page is read, as the decoded bytes pypdf will go through, and refused past
# ``Limits.pdf_work_base + pdf_work_ratio * file size``. What makes it honest: pages that share
# their content and resources are read once (the same text), each form once for the document
# (its text does not depend on the page that draws it), and a content stream that draws no text
# is never parsed by pypdf, so it costs a scan only.

_FONT_ENTRY_WORK = 2048  # building a font: its dictionaries, widths and encoding
_ARRAY_ITEM_WORK = 8  # a /Widths, /W or /Differences item
_SCAN_SHARE = 64  # a stream scanned for text operators but not parsed: 1/64 of its bytes
_FONT_FILE_SHARE = 64  # a font program is hashed on each use, parsed once


def _check_work(pages: list[Any], work: _Work) -> list[object]:
    """Each page's reading key; refuse the file if reading it all would cost more than allowed."""
    keys: list[object] = []
    for page in pages:
        resources = _resolved(page.get_inherited("/Resources", None))
        key = (_contents_key(_raw(page, "/Contents")), id(resources))
        keys.append(key)
        if key in work.pages:
            continue
        work.pages[key] = resources  # kept: the id in the key stays this object's
        work.add(_contents_work(page))
        work.add_resources(resources)
    return keys


class _TooMuchWork(BaseException):
    """Raised through pypdf, which turns an ``Exception`` while it reads a form into a warning
    and reads on; caught in ``_page_texts`` and given as its ``DocumentError``."""

    def __init__(self, error: DocumentError) -> None:
        super().__init__(str(error))
        self.error = error


class _Work:
    def __init__(self, budget: int, name: str, size: int) -> None:
        self.budget = budget
        self.name = name
        self.size = size
        self.total = 0
        self.pages: dict[object, object] = {}
        self.fonts: dict[int, tuple[object, int]] = {}  # a resources dict's font work, by id
        self.forms: set[int] = set()
        self.kept: list[object] = []  # objects whose ids are in the sets above

    def add(self, amount: int) -> None:
        self.total += amount
        if self.total > self.budget:
            raise _TooMuchWork(
                DocumentError(
                    f"{self.name} would take too long to read: its pages go through more than "
                    f"{human_size(self.budget)} of content, far more than a "
                    f"{human_size(self.size)} PDF holds (pages or forms that reuse one stream)."
                )
            )

    def add_resources(self, resources: Any) -> None:
        """A page's or form's resources: its fonts each time, each form once per document."""
        if resources is None:
            return
        self.add(self._font_work(resources))
        stack = [resources]
        while stack:  # every form is counted once, so this ends however forms nest or loop
            below: list[Any] = []
            for res in stack:
                for form in _forms(res):
                    if id(form) in self.forms:
                        continue
                    self.forms.add(id(form))
                    self.kept.append(form)
                    self.add(_stream_work(form))
                    form_resources = _resolved(_get(form, "/Resources"))
                    if form_resources is not None:
                        self.add(self._font_work(form_resources))
                        below.append(form_resources)
            stack = below

    def _font_work(self, resources: Any) -> int:
        found = self.fonts.get(id(resources))
        if found is not None:
            return found[1]
        amount = 0
        fonts = _resolved(_get(resources, "/Font"))
        if isinstance(fonts, dict):
            for value in fonts.values():
                amount += _font_cost(_resolved(value))
        self.fonts[id(resources)] = (resources, amount)
        return amount


def _raw(obj: Any, key: str) -> Any:
    try:
        return obj.raw_get(key)
    except (KeyError, AttributeError):
        return None


def _get(obj: Any, key: str) -> Any:
    try:
        return obj.get(key)
    except Exception:  # a malformed dictionary reads as missing, as pypdf reads it
        return None


def _resolved(value: Any) -> Any:
    try:
        return value.get_object() if value is not None else None
    except Exception:
        return None


def _contents_key(raw: Any) -> object:
    """The streams a page draws, by object number: pages naming the same ones draw the same."""
    if isinstance(raw, IndirectObject):
        target = _resolved(raw)
        if isinstance(target, ArrayObject):
            return tuple(_contents_key(item) for item in target)
        return (raw.idnum, raw.generation)
    if isinstance(raw, ArrayObject):
        return tuple(_contents_key(item) for item in raw)
    return id(raw) if raw is not None else None


def _contents_work(page: Any) -> int:
    contents = _resolved(_raw(page, "/Contents"))
    if contents is None:
        return 0
    streams = contents if isinstance(contents, list) else [contents]
    return sum(_stream_work(_resolved(stream)) for stream in streams)


def _stream_work(stream: Any) -> int:
    data = _stream_data(stream)
    if not data:
        return 0
    return len(data) if _draws_text(data) else len(data) // _SCAN_SHARE


def _stream_data(stream: Any) -> bytes:
    if not isinstance(stream, StreamObject):
        return b""
    try:
        return stream.get_data()
    except LimitReachedError:
        raise
    except Exception:  # undecodable: pypdf gets no text from it either
        return b""


def _draws_text(data: bytes) -> bool:
    try:
        from pypdf._text_extraction import _has_text_operator  # noqa: PLC0415 (private: may move)
    except ImportError:  # pypdf moved it: count every stream as parsed
        return True
    return _has_text_operator(data)


def _forms(resources: Any) -> list[Any]:
    xobjects = _resolved(_get(resources, "/XObject"))
    if not isinstance(xobjects, dict):
        return []
    found = []
    for value in xobjects.values():
        xobject = _resolved(value)
        if isinstance(xobject, StreamObject) and _get(xobject, "/Subtype") == "/Form":
            found.append(xobject)
    return found


def _font_cost(font: Any) -> int:
    """What building one font costs pypdf, in the bytes it goes through."""
    if not isinstance(font, dict):
        return 0
    cost = _FONT_ENTRY_WORK
    fonts = [font]
    descendants = _resolved(_get(font, "/DescendantFonts"))
    if isinstance(descendants, list):
        fonts += [_resolved(d) for d in descendants[:4]]
    for item in fonts:
        if not isinstance(item, dict):
            continue
        for key in ("/Widths", "/W"):
            array = _resolved(_get(item, key))
            if isinstance(array, list):
                cost += _ARRAY_ITEM_WORK * len(array)
        descriptor = _resolved(_get(item, "/FontDescriptor"))
        if isinstance(descriptor, dict):
            for key in ("/FontFile", "/FontFile2", "/FontFile3"):
                program = _resolved(_get(descriptor, key))
                cost += len(_stream_data(program)) // _FONT_FILE_SHARE
    for key in ("/ToUnicode", "/Encoding"):
        value = _resolved(_get(font, key))
        cost += len(_stream_data(value))
        if isinstance(value, dict):
            differences = _resolved(_get(value, "/Differences"))
            if isinstance(differences, list):
                cost += _ARRAY_ITEM_WORK * len(differences)
    return cost


def _read_forms_once(page: Any, forms: dict[int, tuple[object, str]], work: _Work) -> None:
    """Make ``page`` read each form XObject once for the whole document.

    pypdf reads a form it meets through the page's ``extract_xform_text``, with a fresh text
    state: the text depends on the form alone. Shadowing the method on this page object keeps
    each form's text the first time and gives it back after, counting it again as work (a
    page may draw a form thousands of times, and its text is kept each time)."""
    read_form = page.extract_xform_text

    def once(xform: Any, *args: Any, **kwargs: Any) -> str:
        found = forms.get(id(xform))
        if found is not None and found[0] is xform:
            work.add(len(found[1]))
            return found[1]
        text: str = read_form(xform, *args, **kwargs)
        forms[id(xform)] = (xform, text)
        return text

    page.extract_xform_text = once


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
