"""The document loader on real files: every good sample loads with its structure, every bad one
ends in one sentence that names the file, and nothing is ever written."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import zipfile
from pathlib import Path

import pypdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.documents import (
    BlockKind,
    Document,
    DocumentError,
    Limits,
    decode_bytes,
    decoding,
    document_from_text,
    load_document,
    reading,
)
from app.core.documents import docx as docx_reader
from app.core.documents import text as text_structure
from app.core.documents.messages import human_size
from tests.core.document_checks import DATA, GOOD, check_invariants

BAD = DATA / "bad"
SRC = DATA / "src"
CJK = (
    Path(sys.base_prefix)
    / "lib"
    / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    / ("test/cjkencodings")
)
SIMPLIFIED = (SRC / "chinese-simplified.txt").read_text(encoding="utf-8")
TRADITIONAL = (SRC / "chinese-traditional.txt").read_text(encoding="utf-8")


def block_texts(doc: Document, kind: BlockKind | None = None) -> list[str]:
    return [doc.text[b.start : b.end] for b in doc.blocks if kind is None or b.kind is kind]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- good samples -------------------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(GOOD))
def test_every_good_sample_loads_with_its_format_and_file_facts(name: str) -> None:
    path = DATA / name
    doc = load_document(path)
    check_invariants(doc)
    assert doc.format == GOOD[name]
    assert doc.path == path and doc.name == name
    assert doc.size == path.stat().st_size
    assert doc.sha256 == file_digest(path)
    assert doc.blocks and doc.text.strip()


@pytest.mark.unit
def test_gbk_text_decodes_exactly_with_paragraphs() -> None:
    doc = load_document(DATA / "chinese-gbk.txt")
    assert doc.encoding in ("gbk", "gb18030")  # charset-normalizer names the superset
    assert not doc.lossy
    assert doc.text == SIMPLIFIED
    paragraphs = block_texts(doc, BlockKind.PARAGRAPH)
    assert "第一章" in paragraphs
    assert paragraphs[paragraphs.index("第一章") + 1].startswith("道可道，非常道；名可名，非常名。")
    assert any(p.endswith("回也不改其乐。贤哉，回也！”") for p in paragraphs)
    assert any("不亦说乎？" in p for p in paragraphs)


@pytest.mark.unit
def test_big5_text_decodes_exactly() -> None:
    doc = load_document(DATA / "chinese-big5.txt")
    assert doc.encoding in ("big5", "big5hkscs", "cp950")
    assert doc.text == TRADITIONAL
    assert "眾妙之門。" in doc.text


@pytest.mark.unit
def test_utf16_with_bom_decodes_exactly_without_the_bom() -> None:
    doc = load_document(DATA / "chinese-utf16.txt")
    assert doc.encoding == "utf-16"
    assert doc.text == SIMPLIFIED and not doc.text.startswith("\ufeff")


@pytest.mark.unit
def test_utf8_bom_is_recognised_and_dropped(tmp_path: Path) -> None:
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf" + "Grüße\n\nzweiter Absatz".encode())
    doc = load_document(path)
    assert (doc.encoding, doc.text, doc.lossy) == ("utf-8-sig", "Grüße\n\nzweiter Absatz", False)
    assert block_texts(doc) == ["Grüße", "zweiter Absatz"]


@pytest.mark.unit
def test_cp1252_text_is_detected() -> None:
    doc = load_document(DATA / "french-cp1252.txt")
    assert doc.encoding == "cp1252" and not doc.lossy
    assert "Les hommes naissent et demeurent libres et égaux en droits." in doc.text
    assert "droits de l’homme" in doc.text  # U+2019 exists in cp1252, not in latin-1


@pytest.mark.unit
def test_utf8_with_stray_latin1_bytes_stays_utf8_and_is_marked_lossy() -> None:
    doc = load_document(DATA / "latin-mixed.txt")
    assert doc.encoding == "utf-8" and doc.lossy
    assert doc.text.count("\ufffd") == 2
    assert "égaux en droits" in doc.text and "Nul corps \ufffdcrit" in doc.text


CJK_SAMPLES = [
    "big5",
    "euc_jp",
    "euc_jisx0213",
    "euc_kr",
    "gb18030",
    "gb2312",
    "gbk",
    "shift_jis",
    "shift_jisx0213",
]


@pytest.mark.unit
@pytest.mark.parametrize("codec", CJK_SAMPLES)
def test_python_cjk_samples_decode_exactly(codec: str) -> None:
    """CPython's own CJK codec test files, when this Python ships them."""
    source = CJK / f"{codec}.txt"
    if not source.exists():
        pytest.skip(f"{source} is not part of this Python installation")
    expected = (CJK / f"{codec}-utf8.txt").read_bytes().decode("utf-8")
    text, encoding, lossy = decode_bytes(source.read_bytes())
    assert text == expected and not lossy
    assert encoding != "utf-8"


@pytest.mark.unit
def test_shift_jis_is_detected_as_a_shift_jis_family_codec() -> None:
    source = CJK / "shift_jis.txt"
    if not source.exists():
        pytest.skip("no CPython CJK samples here")
    _, encoding, _ = decode_bytes(source.read_bytes())
    assert encoding in ("shift_jis", "cp932", "shift_jis_2004", "shift_jisx0213")


@pytest.mark.unit
def test_markdown_blocks_follow_the_commonmark_structure() -> None:
    doc = load_document(DATA / "sample.md")
    kinds = [(b.kind, b.level) for b in doc.blocks]
    assert kinds[:6] == [
        (BlockKind.HEADING, 1),
        (BlockKind.PARAGRAPH, 0),
        (BlockKind.HEADING, 2),
        (BlockKind.PARAGRAPH, 0),
        (BlockKind.HEADING, 3),
        (BlockKind.PARAGRAPH, 0),
    ]
    headings = block_texts(doc, BlockKind.HEADING)
    assert headings[0] == "# Reading long documents with a small model"
    assert "### Overflow strategies" in headings
    lists = block_texts(doc, BlockKind.LIST)
    assert len(lists) == 2 and lists[0].startswith("- **head**") and lists[1].endswith("spent.")
    (table,) = block_texts(doc, BlockKind.TABLE)
    assert table.startswith("| strategy |") and "12,526" in table
    code = block_texts(doc, BlockKind.CODE)
    assert code[0].startswith("```python\ndef fits(") and code[0].endswith("```")
    assert code[1] == "an indented code block\n    keeps its indentation"


@pytest.mark.unit
def test_huge_markdown_uses_the_linear_line_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_structure, "MARKDOWN_PARSE_LIMIT", 10)
    text = (
        "# Title\n\nIntro paragraph.\n\n```sh\n# not a heading\necho hi\n```\n\n"
        "## Part\nbody line one\nbody line two\n\n~~~\nunclosed fence runs to the end\n"
    )
    doc = document_from_text(text, format="markdown")
    check_invariants(doc)
    assert [(b.kind, b.level) for b in doc.blocks] == [
        (BlockKind.HEADING, 1),
        (BlockKind.PARAGRAPH, 0),
        (BlockKind.CODE, 0),
        (BlockKind.HEADING, 2),
        (BlockKind.PARAGRAPH, 0),
        (BlockKind.CODE, 0),
    ]
    assert block_texts(doc, BlockKind.CODE)[0] == "```sh\n# not a heading\necho hi\n```"


@pytest.mark.unit
def test_source_code_is_code_blocks_split_at_blank_lines() -> None:
    doc = load_document(DATA / "sample.py")
    assert doc.encoding == "utf-8"
    assert {b.kind for b in doc.blocks} == {BlockKind.CODE}
    blocks = block_texts(doc)
    assert any(b.startswith("def insort_right(a, x, lo=0, hi=None, *, key=None):") for b in blocks)
    assert blocks[0].endswith('\n"""Bisection algorithms."""')


@pytest.mark.unit
def test_html_keeps_what_a_reader_sees_with_its_structure() -> None:
    doc = load_document(DATA / "sample.html")
    assert doc.encoding == "utf-8"
    assert "SHOULD-NOT-APPEAR" not in doc.text
    assert "a reading guide" not in doc.text  # <head> content, the <title> included
    assert [(doc.text[b.start : b.end], b.level) for b in doc.blocks if b.level] == [
        ("The Gettysburg Address", 1),
        ("The text", 2),
        ("Five known copies", 2),
        ("Counting the words", 2),
        ("A small program", 3),
    ]
    assert block_texts(doc, BlockKind.CODE) == [
        "def count_words(text):\n    words = text.split()\n    return len(words)"
    ]
    assert len(block_texts(doc, BlockKind.LIST)) == 5
    (table,) = block_texts(doc, BlockKind.TABLE)
    assert table == "Word counts by copy\nCopy\tWords\nNicolay\t239\nBliss\t272"
    paragraphs = block_texts(doc, BlockKind.PARAGRAPH)
    assert (
        "Text is in the public domain.\nThis page is a test sample for ContextLens." in paragraphs
    )
    assert any(p.startswith("Four score and seven years ago") for p in paragraphs)
    assert doc.text.count("\n\n") == len(doc.blocks) - 1 + sum(
        b.count("\n\n") for b in block_texts(doc)
    )


@pytest.mark.unit
def test_gbk_html_honours_its_meta_charset() -> None:
    doc = load_document(DATA / "chinese-gbk-meta.html")
    assert doc.encoding == "gbk"
    assert block_texts(doc, BlockKind.HEADING) == ["唐诗四首"]
    assert "静夜思　李白\n床前明月光，疑是地上霜。举头望明月，低头思故乡。" in block_texts(doc)


@pytest.mark.unit
def test_deeply_nested_html_does_not_exhaust_the_stack() -> None:
    markup = "<body>" + "<div>" * 20_000 + "deep" + "</div>" * 20_000 + "<p>after</p></body>"
    doc = document_from_text(markup, format="html")
    assert doc.text == "deep\n\nafter"


@pytest.mark.unit
def test_pdf_pages_partition_the_text() -> None:
    doc = load_document(DATA / "sample.pdf")
    assert (doc.encoding, doc.lossy, len(doc.pages)) == ("utf-8", False, 3)
    pages = [doc.text[start:end] for start, end in doc.pages]
    assert pages[0].startswith("Three Founding Texts\nThe Declaration of Independence\n")
    assert "When in the Course of human events" in pages[0]
    assert pages[1].startswith("The Gettysburg Address\nFour score and seven years ago")
    assert "shall not perish from the earth." in pages[1]
    assert pages[2].startswith("The Constitution of the United States\nWe the People")
    assert "\t" not in doc.text and "\ufb01" not in doc.text
    for block in doc.blocks:  # no paragraph straddles a page break
        assert any(start <= block.start and block.end <= end for start, end in doc.pages)


@pytest.mark.unit
def test_docx_headings_lists_and_tables() -> None:
    doc = load_document(DATA / "sample.docx")
    assert (doc.encoding, doc.lossy) == ("utf-8", False)
    headings = [(doc.text[b.start : b.end], b.level) for b in doc.blocks if b.kind == "heading"]
    assert headings == [
        ("Moby-Dick; or, The Whale", 1),
        ("Chapter 1. Loomings", 1),
        ("Why he goes to sea", 2),
        ("Ships in the story", 2),
    ]
    assert block_texts(doc, BlockKind.LIST) == [
        "Ishmael, the narrator",
        "Queequeg, a harpooneer from the South Seas",
        "Captain Ahab, master of the Pequod",
    ]
    assert block_texts(doc, BlockKind.TABLE) == [
        "Ship\tCaptain\nPequod\tAhab\nRachel\tGardiner\nJeroboam\tMayhew"
    ]
    assert block_texts(doc, BlockKind.PARAGRAPH)[0].startswith("Call me Ishmael. Some years ago")


@pytest.mark.unit
def test_content_wins_over_a_misleading_extension(tmp_path: Path) -> None:
    pdf = tmp_path / "report.txt"
    shutil.copy(DATA / "sample.pdf", pdf)
    assert load_document(pdf).format == "pdf"
    unknown = tmp_path / "report.data"
    shutil.copy(DATA / "sample.docx", unknown)
    assert load_document(unknown).format == "docx"
    assert load_document(DATA / "sample.md", format="text").format == "text"


@pytest.mark.unit
def test_code_blocks_keep_their_first_line_indentation() -> None:
    doc = document_from_text(
        "class A:\n    x = 1\n\n    def f(self):\n        pass\n", format="code"
    )
    assert block_texts(doc) == ["class A:\n    x = 1", "    def f(self):\n        pass"]


@pytest.mark.unit
def test_text_without_blank_lines_has_one_paragraph_per_line() -> None:
    doc = document_from_text("　　第一段。\r\n　　第二段！\r\n　　第三段？\r\n")
    assert block_texts(doc) == ["第一段。", "第二段！", "第三段？"]


@pytest.mark.unit
def test_hard_wrapped_prose_without_blank_lines_is_one_paragraph() -> None:
    text = "\n".join(["The context window is the text a model sees at once; what falls"] * 20)
    doc = document_from_text(text)
    assert [(b.start, b.end) for b in doc.blocks] == [(0, len(text))]


@pytest.mark.unit
def test_crlf_and_cr_line_endings_split_paragraphs() -> None:
    doc = document_from_text("one\r\nstill one\r\n\r\ntwo\r\n \r\n\r\nthree")
    assert block_texts(doc) == ["one\r\nstill one", "two", "three"]
    doc = document_from_text("mac one\r\rmac two")
    assert block_texts(doc) == ["mac one", "mac two"]


@pytest.mark.unit
def test_document_from_text_hashes_clean_utf8() -> None:
    doc = document_from_text("half a pair \ud800 here", name="pasted.md", format="markdown")
    assert doc.text == "half a pair \ufffd here" and doc.lossy
    assert doc.sha256 == hashlib.sha256(doc.text.encode("utf-8")).hexdigest()
    assert (doc.name, doc.path, doc.format, doc.size) == ("pasted.md", None, "markdown", 20)
    assert document_from_text("x").name == "untitled"
    with pytest.raises(ValueError, match="pdf"):
        document_from_text("x", format="pdf")
    with pytest.raises(ValueError, match="format"):
        load_document(DATA / "sample.md", format="rtf")


# --- bad inputs ---------------------------------------------------------------------------------

BAD_FILES = {
    "empty.txt": "is empty",
    "pixel.png": "is an image",
    "records.bin": "looks like a binary file, not text",
    "old-word.doc": "is an old Word document (.doc); save it as DOCX or PDF",
    "truncated.pdf": "is not a readable PDF (",
    "not-a-pdf.pdf": "is not a PDF file",
    "encrypted.pdf": "is password-protected",
    "scanned-no-text.pdf": "has no text layer",
    "not-a-zip.docx": "is not a valid DOCX file (it is not a ZIP archive)",
    "no-document-xml.docx": "is not a valid DOCX file (it has no word/document.xml)",
    "zip-bomb.docx": "(a ZIP bomb)",
    "lying-size.docx": "is not a valid DOCX file (Bad CRC-32",
}


def assert_one_sentence(err: DocumentError, name: str) -> str:
    message = str(err)
    assert "\n" not in message and "Traceback" not in message
    assert name in message and message.endswith(".")
    return message


@pytest.mark.unit
def test_every_bad_file_is_listed() -> None:
    assert sorted(p.name for p in BAD.iterdir()) == sorted(BAD_FILES)


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_every_bad_file_ends_in_one_sentence_and_stays_untouched(name: str) -> None:
    path = BAD / name
    before = (file_digest(path), path.stat().st_mtime_ns)
    with pytest.raises(DocumentError) as caught:
        load_document(path)
    assert BAD_FILES[name] in assert_one_sentence(caught.value, name)
    assert (file_digest(path), path.stat().st_mtime_ns) == before


@pytest.mark.unit
def test_old_office_file_is_named_even_with_a_text_extension(tmp_path: Path) -> None:
    path = tmp_path / "minutes.txt"
    shutil.copy(BAD / "old-word.doc", path)
    with pytest.raises(DocumentError, match="old Microsoft Office file"):
        load_document(path)


@pytest.mark.unit
def test_zip_that_is_not_a_docx(tmp_path: Path) -> None:
    path = tmp_path / "bundle"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(DocumentError, match="bundle is a ZIP archive"):
        load_document(path)


@pytest.mark.unit
def test_size_cap_is_checked_before_reading(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as caught:
        load_document(DATA / "sample.md", limits=Limits(max_bytes=100))
    message = assert_one_sentence(caught.value, "sample.md")
    assert message == "sample.md is 1.5 KB; the limit is 100 bytes."
    assert human_size(int(312.4 * 1024 * 1024)) == "312.4 MB"
    assert human_size(200 * 1024 * 1024) == "200 MB"


@pytest.mark.unit
def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: _capture(outcome, fifo), daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():  # release the blocked open() before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("loading a FIFO blocked")
    (err,) = outcome
    assert isinstance(err, DocumentError)
    assert assert_one_sentence(err, "pipe.txt") == "pipe.txt is a named pipe, not a document."


def _capture(outcome: list[BaseException], path: Path) -> None:
    try:
        load_document(path)
    except BaseException as exc:
        outcome.append(exc)


@pytest.mark.unit
def test_folders_sockets_devices_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match=r"^notes is a folder, not a document\.$"):
        (tmp_path / "notes").mkdir()
        load_document(tmp_path / "notes")
    missing = tmp_path / "gone.txt"
    with pytest.raises(DocumentError, match=r"gone\.txt does not exist\.$"):
        load_document(missing)
    with pytest.raises(DocumentError, match=r"does not exist\.$"):
        load_document(DATA / "sample.md" / "child.txt")
    with pytest.raises(DocumentError, match="is a device"):
        load_document("/dev/null")
    sock_path = tmp_path / "s.sock"
    if len(os.fsencode(sock_path)) < 100:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(os.fspath(sock_path))
            with pytest.raises(DocumentError, match=r"^s\.sock is a socket"):
                load_document(sock_path)


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.txt"
    path.write_text("hidden")
    path.chmod(0)
    expected = "secret.txt cannot be read: permission denied."
    if os.geteuid() != 0:
        with pytest.raises(DocumentError) as caught:
            load_document(path)
        assert str(caught.value) == expected
        return
    # Root reads everything: try as an unprivileged user, in a child process.
    tmp_path.chmod(0o755)
    code = (
        "from app.core.documents import DocumentError, load_document\n"
        f"try:\n    load_document({os.fspath(path)!r})\n"
        "except DocumentError as err:\n    print(err)\n"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            user=65534,
            cwd=Path(__file__).resolve().parents[2],
            check=False,
        )
    except OSError as exc:  # e.g. the interpreter lives under root's private home
        pytest.skip(f"cannot run Python as an unprivileged user here ({exc})")
    if proc.returncode != 0:
        pytest.skip(f"cannot run as an unprivileged user here: {proc.stderr[-200:]}")
    assert proc.stdout.strip() == expected


@pytest.mark.unit
def test_permission_denied_on_open_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same path as above, reachable even as root: open() refused after a good stat."""

    def refuse(*_args: object, **_kwargs: object) -> int:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(reading.os, "open", refuse)
    with pytest.raises(DocumentError) as caught:
        load_document(DATA / "sample.md")
    assert str(caught.value) == "sample.md cannot be read: permission denied."


@pytest.mark.unit
def test_docx_does_not_resolve_external_entities(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENTS")
    source = DATA / "sample.docx"
    hostile = tmp_path / "xxe.docx"
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(hostile, "w") as copy:
        for entry in original.infolist():
            data = original.read(entry)
            if entry.filename == "word/document.xml":
                head, _, rest = data.partition(b"?>")
                doctype = f'<!DOCTYPE d [<!ENTITY xxe SYSTEM "{secret.as_uri()}">]>'.encode()
                data = head + b"?>" + doctype + rest.replace(b"Call me Ishmael.", b"&xxe;", 1)
            copy.writestr(entry, data)
    try:
        doc = load_document(hostile)
    except DocumentError as err:  # refusing the file is fine too; leaking it is not
        assert "TOP-SECRET" not in str(err)
        return
    assert "TOP-SECRET" not in doc.text


@pytest.mark.unit
def test_docx_entry_and_size_caps() -> None:
    sample = DATA / "sample.docx"
    with pytest.raises(DocumentError, match="archive entries than the limit of 3"):
        load_document(sample, limits=Limits(docx_max_entries=3))
    with pytest.raises(DocumentError, match=r"would inflate to .*; the limit is 4\.9 KB\.$"):
        load_document(sample, limits=Limits(docx_max_uncompressed=5000))


@pytest.mark.unit
def test_docx_counts_the_bytes_actually_inflated() -> None:
    """Headers can lie: the cap also holds for what really comes out of the inflater."""
    data = (DATA / "sample.docx").read_bytes()
    limits = Limits()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entry = archive.getinfo("word/document.xml")
        assert docx_reader._inflate(archive, entry, 0, name="x", limits=limits) == entry.file_size
        with pytest.raises(DocumentError, match=r"^x inflates to more than"):
            docx_reader._inflate(
                archive, entry, limits.docx_max_uncompressed - 10, name="x", limits=limits
            )


@pytest.mark.unit
def test_pdf_caps_apply_only_during_the_read() -> None:
    before = pypdf.get_configuration()
    with pytest.raises(DocumentError, match=r"^sample\.pdf has 3 pages; the limit is 2\.$"):
        load_document(DATA / "sample.pdf", limits=Limits(pdf_max_pages=2))
    with pytest.raises(DocumentError, match="exceeds a PDF safety limit"):
        load_document(DATA / "sample.pdf", limits=Limits(pdf_max_stream_bytes=1000))
    assert pypdf.get_configuration() == before


# --- decoding of arbitrary bytes ----------------------------------------------------------------

BOMS = [b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"]


BODIES = st.one_of(
    st.binary(max_size=400),
    st.binary(min_size=1, max_size=400).map(lambda b: b.replace(b"\x00", b"\x80")),  # not binary
    st.text(max_size=200).map(lambda s: s.encode("utf-16-le", "surrogatepass")),
    st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
)


@pytest.mark.unit
@settings(max_examples=400, deadline=None)
@given(prefix=st.sampled_from(BOMS), body=BODIES)
def test_decode_bytes_returns_clean_text_or_refuses(prefix: bytes, body: bytes) -> None:
    try:
        text, encoding, lossy = decode_bytes(prefix + body)
    except DocumentError as err:
        assert "\n" not in str(err)
        return
    assert isinstance(text, str) and isinstance(encoding, str) and isinstance(lossy, bool)
    text.encode("utf-8")  # raises on a lone surrogate


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.text(max_size=150).map(lambda s: s.encode("utf-8", "surrogatepass")),
        st.text(max_size=150).map(lambda s: s.encode("gb18030", "replace")),
    ),
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-32", "gbk", "big5", "cp1252"]),
    errors=st.sampled_from(["strict", "replace"]),
    slice_bytes=st.integers(1, 7),
)
def test_decoding_in_slices_is_decoding_whole(
    data: bytes, encoding: str, errors: str, slice_bytes: int
) -> None:
    """Slices a few bytes long cut every multi-byte character somewhere: the text (or the
    refusal) must still be the whole decode's."""
    try:
        whole = data.decode(encoding, errors)
    except UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError):
            decoding.decode_in_slices(data, encoding, errors, slice_bytes=slice_bytes)
        return
    assert decoding.decode_in_slices(data, encoding, errors, slice_bytes=slice_bytes) == whole


STRUCTURED_TEXT = st.lists(
    st.sampled_from([*"ab #`~->|*1.\t\u3000\n\r", "```", "# ", "\n\n", "    ", "<p>", "<li>"]),
    max_size=120,
).map("".join)


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(text=STRUCTURED_TEXT, fmt=st.sampled_from(["text", "markdown", "code", "html"]))
def test_structure_of_any_text_keeps_the_block_invariants(text: str, fmt: str) -> None:
    doc = document_from_text(text, format=fmt)
    check_invariants(doc)
    if fmt == "markdown":
        lines_doc = Document(
            **{**_fields(doc), "blocks": text_structure._markdown_blocks_by_lines(text)}
        )
        check_invariants(lines_doc)


def _fields(doc: Document) -> dict[str, object]:
    return {name: getattr(doc, name) for name in Document.__dataclass_fields__}


@pytest.mark.unit
def test_decode_bytes_refusals() -> None:
    with pytest.raises(DocumentError, match="is empty"):
        decode_bytes(b"")
    with pytest.raises(DocumentError, match="binary"):
        decode_bytes(b"abc\x00def")
    assert decode_bytes("a\x00b".encode("utf-16")) == ("a\x00b", "utf-16", False)
    assert decode_bytes(b"\xff\xfe\x00\xd8") == ("\ufffd", "utf-16", True)  # a lone surrogate


# --- memory -------------------------------------------------------------------------------------


def test_100_mb_text_loads_within_a_few_copies(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    paragraph = ("The quick brown fox jumps over the lazy dog. " * 10 + "\n") * 4 + "\n"
    size = 100 * 1024 * 1024
    with path.open("w", encoding="ascii") as out:
        out.write(paragraph * (size // len(paragraph)))
        out.write("x" * (size % len(paragraph)))
    assert path.stat().st_size == size
    code = textwrap.dedent(
        f"""
        import app.core.documents as documents
        def hwm():  # this program's peak in KiB (ru_maxrss survives exec: it counts the parent)
            with open("/proc/self/status") as fh:
                return next(int(l.split()[1]) for l in fh if l.startswith("VmHWM:"))
        base = hwm()
        doc = documents.load_document({os.fspath(path)!r})
        peak = hwm()
        print(len(doc.text), len(doc.blocks), (peak - base) * 1024)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    chars, blocks, grown = map(int, proc.stdout.split())
    assert chars == size
    assert blocks == size // len(paragraph) + 1
    assert grown < 4 * size, f"loading grew the process by {grown / size:.1f}x the file size"
