"""PDFs made on the fly to hurt a reader: pages sharing one content stream, a form drawn on
every page, forms nested to draw one another twice (tests/core/test_documents_hostile.py), and a
page that takes pypdf seconds (the cancel tests of the core and of the window)."""

from __future__ import annotations

import zlib
from pathlib import Path

TEXT_OPS = b"BT /F1 12 Tf 72 700 Td (Hello) Tj ET\n"


FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def make_pdf(objects: list[bytes]) -> bytes:
    """Objects 1..n as given (1: the catalog), with a cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def stream(content: bytes, extra: bytes = b"") -> bytes:
    packed = zlib.compress(content, 9)
    head = b"<< %s /Length %d /Filter /FlateDecode >>\nstream\n" % (extra, len(packed))
    return head + packed + b"\nendstream"


def shared_stream_pdf(pages: int, size: int, *, shared_resources: bool) -> bytes:
    """Every page draws object 4, one stream of ``size`` bytes of text operators."""
    kids = b" ".join(b"%d 0 R" % (6 + i) for i in range(pages))
    resources = b"5 0 R" if shared_resources else b"<< /Font << /F1 3 0 R >> >>"
    page = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources %s "
            b"/Contents 4 0 R >>") % resources  # fmt: skip
    return make_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        FONT,
        stream(TEXT_OPS * (size // len(TEXT_OPS))),
        b"<< /Font << /F1 3 0 R >> >>",
        *[page] * pages,
    ])  # fmt: skip


def shared_form_pdf(pages: int, form_size: int, draws: int) -> bytes:
    """Every page's own content draws form 4 (``form_size`` bytes of text) ``draws`` times."""
    kids = b" ".join(b"%d 0 R" % (6 + 2 * i) for i in range(pages))
    form_dict = b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources 5 0 R"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        FONT,
        stream(b"BT /F1 9 Tf 72 760 Td (Letterhead " + b"x" * form_size + b") Tj ET", form_dict),
        b"<< /Font << /F1 3 0 R >> /XObject << /X1 4 0 R >> >>",
    ]
    for i in range(pages):
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources 5 0 R "
                       b"/Contents %d 0 R >>" % (7 + 2 * i))  # fmt: skip
        objects.append(stream(b"BT /F1 12 Tf 72 700 Td (Page %d) Tj ET\n" % (i + 1)
                              + b"/X1 Do\n" * draws))  # fmt: skip
    return make_pdf(objects)


def nested_forms_pdf(depth: int, size: int) -> bytes:
    """One page drawing form 1; form k draws form k+1 twice; the last holds ``size`` bytes of
    text: 2^depth draws of it, were every draw read."""
    first = 4
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R"
        b" >> /XObject << /X %d 0 R >> >> /Contents %d 0 R >>" % (first + depth, first,
                                                                 first + depth + 1),
    ]  # fmt: skip
    for level in range(depth):
        number = first + level
        last = level == depth - 1
        resources = b"<< /Font << /F1 %d 0 R >>%s >>" % (
            first + depth,
            b"" if last else b" /XObject << /X %d 0 R >>" % (number + 1),
        )
        content = TEXT_OPS * (size // len(TEXT_OPS)) if last else b"/X Do /X Do"
        objects.append(stream(content, b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] "
                                       b"/Resources " + resources))  # fmt: skip
    objects.append(FONT)
    objects.append(stream(b"BT /F1 12 Tf 72 700 Td (Nested) Tj ET /X Do"))
    return make_pdf(objects)


def write_slow_pdf(path: Path) -> Path:
    """One page of 4 MB of text operators (within the work budget): seconds of pypdf."""
    path.write_bytes(shared_stream_pdf(1, 4_000_000, shared_resources=True))
    return path

