"""Re-create the generated sample files in tests/data (run from anywhere with the project venv).

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/data/make_samples.py

The hand-written samples (sample.md, sample.html, sample.py, src/*.txt) are inputs here, not
outputs. Every generated file is small; the ZIP bomb inflates to 50 MB but is about 50 KB on disk.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import struct
import zipfile
import zlib
from pathlib import Path

import docx
from pypdf import PdfWriter
from PySide6.QtCore import QMarginsF, QSizeF
from PySide6.QtGui import QFont, QGuiApplication, QPageLayout, QPageSize, QPdfWriter, QTextDocument

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
BAD = HERE / "bad"
FIXED_TIME = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)

CONTENT_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="rels" '
    b'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    b'<Default Extension="xml" ContentType="application/xml"/>'
    b'<Override PartName="/word/document.xml" ContentType="application/'
    b'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    b"</Types>"
)
ROOT_RELS = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Target="word/document.xml" Type="http://schemas.openxmlformats.org/'
    b'officeDocument/2006/relationships/officeDocument"/>'
    b"</Relationships>"
)
DOCUMENT_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>"
)
DOCUMENT_TAIL = b"</w:t></w:r></w:p></w:body></w:document>"

FOUNDING_TEXTS_HTML = """
<h1>Three Founding Texts</h1>
<h2>The Declaration of Independence</h2>
<p>When in the Course of human events, it becomes necessary for one people to dissolve the
political bands which have connected them with another, and to assume among the powers of the
earth, the separate and equal station to which the Laws of Nature and of Nature's God entitle
them, a decent respect to the opinions of mankind requires that they should declare the causes
which impel them to the separation.</p>
<p>We hold these truths to be self-evident, that all men are created equal, that they are endowed
by their Creator with certain unalienable Rights, that among these are Life, Liberty and the
pursuit of Happiness. That to secure these rights, Governments are instituted among Men,
deriving their just powers from the consent of the governed. That whenever any Form of
Government becomes destructive of these ends, it is the Right of the People to alter or to
abolish it, and to institute new Government, laying its foundation on such principles and
organizing its powers in such form, as to them shall seem most likely to effect their Safety and
Happiness.</p>
<p>Prudence, indeed, will dictate that Governments long established should not be changed for
light and transient causes; and accordingly all experience hath shewn, that mankind are more
disposed to suffer, while evils are sufferable, than to right themselves by abolishing the forms
to which they are accustomed. But when a long train of abuses and usurpations, pursuing
invariably the same Object evinces a design to reduce them under absolute Despotism, it is their
right, it is their duty, to throw off such Government, and to provide new Guards for their
future security.</p>
<p>He has refused his Assent to Laws, the most wholesome and necessary for the public good.</p>
<p>He has forbidden his Governors to pass Laws of immediate and pressing importance, unless
suspended in their operation till his Assent should be obtained; and when so suspended, he has
utterly neglected to attend to them.</p>
<h2 style="page-break-before: always">The Gettysburg Address</h2>
<p>Four score and seven years ago our fathers brought forth on this continent, a new nation,
conceived in Liberty, and dedicated to the proposition that all men are created equal.</p>
<p>Now we are engaged in a great civil war, testing whether that nation, or any nation so
conceived and so dedicated, can long endure. We are met on a great battle-field of that war. We
have come to dedicate a portion of that field, as a final resting place for those who here gave
their lives that that nation might live. It is altogether fitting and proper that we should do
this.</p>
<p>But, in a larger sense, we can not dedicate &mdash; we can not consecrate &mdash; we can not
hallow &mdash; this ground. The brave men, living and dead, who struggled here, have consecrated
it, far above our poor power to add or detract. The world will little note, nor long remember
what we say here, but it can never forget what they did here. It is for us the living, rather,
to be dedicated here to the unfinished work which they who fought here have thus far so nobly
advanced. It is rather for us to be here dedicated to the great task remaining before us &mdash;
that from these honored dead we take increased devotion to that cause for which they gave the
last full measure of devotion &mdash; that we here highly resolve that these dead shall not have
died in vain &mdash; that this nation, under God, shall have a new birth of freedom &mdash; and
that government of the people, by the people, for the people, shall not perish from the
earth.</p>
<h2 style="page-break-before: always">The Constitution of the United States</h2>
<p>We the People of the United States, in Order to form a more perfect Union, establish Justice,
insure domestic Tranquility, provide for the common defence, promote the general Welfare, and
secure the Blessings of Liberty to ourselves and our Posterity, do ordain and establish this
Constitution for the United States of America.</p>
<p>All legislative Powers herein granted shall be vested in a Congress of the United States,
which shall consist of a Senate and House of Representatives.</p>
<p>The House of Representatives shall be composed of Members chosen every second Year by the
People of the several States, and the Electors in each State shall have the Qualifications
requisite for Electors of the most numerous Branch of the State Legislature.</p>
"""

DECLARATION_1789 = (
    "Déclaration des droits de l’homme et du citoyen de 1789\n\n"
    "Art. 1er. – Les hommes naissent et demeurent libres et égaux en droits. Les distinctions "
    "sociales ne peuvent être fondées que sur l’utilité commune.\n\n"
    "Art. 2. – Le but de toute association politique est la conservation des droits naturels et "
    "imprescriptibles de l’homme. Ces droits sont la liberté, la propriété, la sûreté, et la "
    "résistance à l’oppression.\n\n"
    "Art. 3. – Le principe de toute souveraineté réside essentiellement dans la Nation. Nul corps, "
    "nul individu ne peut exercer d’autorité qui n’en émane expressément.\n\n"
    "Art. 4. – La liberté consiste à pouvoir faire tout ce qui ne nuit pas à autrui : ainsi, "
    "l’exercice des droits naturels de chaque homme n’a de bornes que celles qui assurent aux "
    "autres membres de la société la jouissance de ces mêmes droits. Ces bornes ne peuvent être "
    "déterminées que par la loi.\n"
)


def main() -> None:
    BAD.mkdir(exist_ok=True)
    make_encoded_texts()
    make_pdf(HERE / "sample.pdf")
    make_docx(HERE / "sample.docx")
    make_bad_files()


def make_encoded_texts() -> None:
    simplified = (SRC / "chinese-simplified.txt").read_text(encoding="utf-8")
    traditional = (SRC / "chinese-traditional.txt").read_text(encoding="utf-8")
    (HERE / "chinese-gbk.txt").write_bytes(simplified.encode("gbk"))
    (HERE / "chinese-big5.txt").write_bytes(traditional.encode("big5"))
    (HERE / "chinese-utf16.txt").write_bytes(simplified.encode("utf-16"))  # BOM + little-endian
    (HERE / "french-cp1252.txt").write_bytes(DECLARATION_1789.encode("cp1252"))
    # UTF-8 text with two stray Latin-1 bytes, as left behind by a careless edit.
    mixed = (
        DECLARATION_1789.encode("utf-8")
        .replace(b"Nul corps", b"Nul corps \xe9crit")
        .replace(b"la loi.", b"la loi \xbb.")
    )
    (HERE / "latin-mixed.txt").write_bytes(mixed)
    poems = simplified[simplified.index("唐诗四首") :].strip()
    paragraphs = "\n".join(
        f"  <p>{p.replace(chr(10), '<br>')}</p>" for p in poems.split("\n\n")[1:]
    )
    html = (
        '<!DOCTYPE html>\n<html lang="zh-CN">\n<head>\n<meta charset="gbk">\n'
        "<title>唐诗四首</title>\n</head>\n<body>\n  <h1>唐诗四首</h1>\n"
        f"{paragraphs}\n</body>\n</html>\n"
    )
    (HERE / "chinese-gbk-meta.html").write_bytes(html.encode("gbk"))


def make_pdf(path: Path) -> None:
    """Typeset with Qt's PDF engine (PySide6): a real, font-embedding PDF producer."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    app = QGuiApplication.instance() or QGuiApplication([])
    writer = QPdfWriter(str(path))
    writer.setPageSize(QPageSize(QPageSize.PageSizeId.A4))
    writer.setPageMargins(QMarginsF(25, 25, 25, 25), QPageLayout.Unit.Millimeter)
    writer.setResolution(96)  # the document lays out in 96-dpi pixels, as on screen
    writer.setTitle("Three Founding Texts")
    writer.setCreator("ContextLens tests/data/make_samples.py")
    document = QTextDocument()
    font = QFont("DejaVu Serif", 11)
    for tag in ("liga", "clig"):  # plain letters, so extracted text has no ligature glyphs
        font.setFeature(QFont.Tag(tag), 0)
    document.setDefaultFont(font)
    document.setHtml(FOUNDING_TEXTS_HTML)
    page = writer.pageLayout().paintRectPixels(writer.resolution())
    document.setPageSize(QSizeF(page.size()))  # paginated: Qt then prints no page numbers
    document.print_(writer)
    del writer
    app.processEvents()


def make_docx(path: Path) -> None:
    document = docx.Document()
    document.core_properties.created = FIXED_TIME
    document.core_properties.modified = FIXED_TIME
    document.core_properties.title = "Moby-Dick (opening)"
    document.add_heading("Moby-Dick; or, The Whale", level=0)
    document.add_heading("Chapter 1. Loomings", level=1)
    document.add_paragraph(
        "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money "
        "in my purse, and nothing particular to interest me on shore, I thought I would sail "
        "about a little and see the watery part of the world. It is a way I have of driving off "
        "the spleen and regulating the circulation."
    )
    document.add_heading("Why he goes to sea", level=2)
    document.add_paragraph(
        "Whenever I find myself growing grim about the mouth; whenever it is a damp, drizzly "
        "November in my soul; whenever I find myself involuntarily pausing before coffin "
        "warehouses, and bringing up the rear of every funeral I meet; and especially whenever "
        "my hypos get such an upper hand of me, that it requires a strong moral principle to "
        "prevent me from deliberately stepping into the street, and methodically knocking "
        "people’s hats off—then, I account it high time to get to sea as soon as I can."
    )
    for item in (
        "Ishmael, the narrator",
        "Queequeg, a harpooneer from the South Seas",
        "Captain Ahab, master of the Pequod",
    ):
        document.add_paragraph(item, style="List Bullet")
    document.add_heading("Ships in the story", level=2)
    table = document.add_table(rows=1, cols=2)
    table.style = "Table Grid"
    table.rows[0].cells[0].text = "Ship"
    table.rows[0].cells[1].text = "Captain"
    for ship, captain in (("Pequod", "Ahab"), ("Rachel", "Gardiner"), ("Jeroboam", "Mayhew")):
        cells = table.add_row().cells
        cells[0].text = ship
        cells[1].text = captain
    document.add_paragraph("The text is in the public domain.")
    document.save(str(path))


def make_bad_files() -> None:
    (BAD / "empty.txt").write_bytes(b"")
    (BAD / "pixel.png").write_bytes(_png_1x1())
    (BAD / "records.bin").write_bytes(bytes(range(1, 256)) + bytes(256))
    (BAD / "old-word.doc").write_bytes(
        bytes.fromhex("d0cf11e0a1b11ae1")
        + bytes(16)
        + bytes.fromhex("3e000300feff0900")
        + bytes(512 - 32)
    )
    pdf = (HERE / "sample.pdf").read_bytes()
    (BAD / "truncated.pdf").write_bytes(pdf[: len(pdf) // 2])
    (BAD / "not-a-pdf.pdf").write_text(
        "This is a plain text note that someone renamed to .pdf.\n", encoding="utf-8"
    )
    _write_encrypted_pdf(BAD / "encrypted.pdf")
    _write_blank_pdf(BAD / "scanned-no-text.pdf")
    (BAD / "not-a-zip.docx").write_text("Just some text, not a ZIP archive.\n", encoding="utf-8")
    with zipfile.ZipFile(BAD / "no-document-xml.docx", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", CONTENT_TYPES)
        archive.writestr("docProps/app.xml", b"<Properties/>")
    _write_bomb(BAD / "zip-bomb.docx", 50 * 1024 * 1024)
    _write_lying_size(BAD / "lying-size.docx")


def _png_1x1() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def _write_encrypted_pdf(path: Path) -> None:
    writer = PdfWriter(clone_from=HERE / "sample.pdf")
    writer.encrypt(user_password="contextlens", algorithm="RC4-128")
    with path.open("wb") as out:
        writer.write(out)


def _write_blank_pdf(path: Path) -> None:
    writer = PdfWriter()
    writer.add_blank_page(width=595, height=842)
    with path.open("wb") as out:
        writer.write(out)


def _write_bomb(target: Path | io.BytesIO, inflated: int) -> None:
    """A valid DOCX skeleton whose main part is ``inflated`` bytes of spaces (about 1000:1)."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", CONTENT_TYPES)
        archive.writestr("_rels/.rels", ROOT_RELS)
        info = zipfile.ZipInfo("word/document.xml", date_time=(2024, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=False) as part:
            part.write(DOCUMENT_HEAD)
            left = inflated - len(DOCUMENT_HEAD) - len(DOCUMENT_TAIL)
            block = b" " * (1024 * 1024)
            while left > 0:
                part.write(block[: min(left, len(block))])
                left -= len(block)
            part.write(DOCUMENT_TAIL)


def _write_lying_size(path: Path) -> None:
    """A 5 MB main part whose headers claim 2,000 bytes, so declared-size checks all pass."""
    buffer = io.BytesIO()
    _write_bomb(buffer, 5 * 1024 * 1024)
    data = bytearray(buffer.getvalue())
    name = b"word/document.xml"
    local = data.find(b"PK\x03\x04")
    while local != -1:
        if data[local + 30 : local + 30 + len(name)] == name:
            struct.pack_into("<I", data, local + 22, 2000)
        local = data.find(b"PK\x03\x04", local + 4)
    central = data.find(b"PK\x01\x02")
    while central != -1:
        if data[central + 46 : central + 46 + len(name)] == name:
            struct.pack_into("<I", data, central + 24, 2000)
        central = data.find(b"PK\x01\x02", central + 4)
    path.write_bytes(bytes(data))


if __name__ == "__main__":
    main()
