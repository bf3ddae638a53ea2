"""Which reader a file needs: its contents when they are unmistakable, else its extension.

Binary formats announce themselves in their first bytes, so a PDF saved as ``.txt`` still opens
as a PDF, and a picture renamed ``.txt`` is named for what it is instead of decoded as gibberish.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Final

from app.core.documents.model import DocumentError

FORMATS: Final = ("text", "markdown", "code", "html", "pdf", "docx")
SUPPORTED: Final = "plain text, Markdown, source code, HTML, PDF and DOCX files"

_BY_EXTENSION: Final[dict[str, str]] = {
    **dict.fromkeys(("", ".txt", ".text", ".log", ".rst", ".csv", ".tsv", ".srt"), "text"),
    **dict.fromkeys((".md", ".markdown", ".mdown", ".mkd"), "markdown"),
    **dict.fromkeys((".html", ".htm", ".xhtml"), "html"),
    ".pdf": "pdf",
    ".docx": "docx",
    **dict.fromkeys(
        (
            ".py",
            ".pyi",
            ".c",
            ".h",
            ".cpp",
            ".hpp",
            ".cc",
            ".cxx",
            ".hh",
            ".rs",
            ".go",
            ".java",
            ".js",
            ".mjs",
            ".cjs",
            ".ts",
            ".tsx",
            ".jsx",
            ".rb",
            ".sh",
            ".bash",
            ".zsh",
            ".fish",
            ".ps1",
            ".bat",
            ".cs",
            ".kt",
            ".kts",
            ".swift",
            ".php",
            ".sql",
            ".toml",
            ".yaml",
            ".yml",
            ".json",
            ".jsonl",
            ".ini",
            ".cfg",
            ".conf",
            ".css",
            ".scss",
            ".less",
            ".lua",
            ".r",
            ".m",
            ".mm",
            ".scala",
            ".pl",
            ".pm",
            ".hs",
            ".ml",
            ".mli",
            ".ex",
            ".exs",
            ".erl",
            ".clj",
            ".dart",
            ".vue",
            ".svelte",
            ".xml",
            ".cmake",
            ".gradle",
            ".mk",
            ".proto",
            ".zig",
            ".nim",
            ".jl",
            ".f90",
            ".v",
            ".vhd",
            ".asm",
            ".s",
            ".tex",
            ".el",
            ".vim",
            ".diff",
            ".patch",
        ),
        "code",
    ),
}

# Documents that another program can turn into DOCX or PDF get that advice in the message.
_CONVERTIBLE: Final = (
    "an old Word document (.doc)",
    "an old Word template (.dot)",
    "an RTF document",
    "an OpenDocument text",
    "an Apple Pages document",
    "an old Microsoft Office file (.doc, .xls or .ppt)",
)
_UNSUPPORTED_EXTENSIONS: Final[dict[str, str]] = {
    ".doc": "an old Word document (.doc)",
    ".dot": "an old Word template (.dot)",
    ".rtf": "an RTF document",
    ".odt": "an OpenDocument text",
    ".pages": "an Apple Pages document",
    ".epub": "an e-book (EPUB)",
    **dict.fromkeys((".xls", ".xlsx", ".ods", ".numbers"), "a spreadsheet"),
    **dict.fromkeys((".ppt", ".pptx", ".odp", ".key"), "a presentation"),
    **dict.fromkeys(
        (
            ".png",
            ".jpg",
            ".jpeg",
            ".gif",
            ".bmp",
            ".tif",
            ".tiff",
            ".webp",
            ".heic",
            ".ico",
            ".svg",
            ".psd",
        ),
        "an image",
    ),
    **dict.fromkeys(
        (".zip", ".gz", ".tgz", ".tar", ".bz2", ".xz", ".zst", ".7z", ".rar"), "an archive"
    ),
    **dict.fromkeys(
        (".mp3", ".wav", ".flac", ".ogg", ".m4a", ".mp4", ".mov", ".mkv", ".avi", ".webm"),
        "an audio or video file",
    ),
    **dict.fromkeys((".exe", ".dll", ".so", ".dylib", ".o", ".a", ".pyc", ".class"), "a program"),
    ".gguf": "a model file",
    ".sqlite": "a database",
    ".db": "a database",
}

# Signatures of files that are certainly not a supported document, checked on every input.
_UNSUPPORTED_MAGIC: Final[tuple[tuple[bytes, str], ...]] = (
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Microsoft Office file (.doc, .xls or .ppt)"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"\x28\xb5\x2f\xfd", "a Zstandard archive"),
    (b"\x7fELF", "a program (ELF executable)"),
    (b"GGUF", "a GGUF model file"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"{\\rtf", "an RTF document"),
)
_ZIP_MAGIC: Final = (b"PK\x03\x04", b"PK\x05\x06")
_DOCX_MAIN_PART: Final = b"word/document.xml"


def format_for_name(path: PurePath, name: str) -> str | None:
    """The format an extension promises; None when the extension says nothing."""
    suffix = path.suffix.lower()
    what = _UNSUPPORTED_EXTENSIONS.get(suffix)
    if what is not None:
        raise DocumentError(_unsupported(name, what))
    return _BY_EXTENSION.get(suffix)


def resolve_format(data: bytes, by_name: str | None, *, name: str) -> str:
    """The reader for these bytes: unmistakable contents first, then the extension, then text."""
    head = data[:1024]
    for magic, what in _UNSUPPORTED_MAGIC:
        if head.startswith(magic):
            raise DocumentError(_unsupported(name, what))
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(_ZIP_MAGIC):
        # Part names are stored uncompressed in the archive, so no unzipping is needed to look.
        if by_name == "docx" or _DOCX_MAIN_PART in data:
            return "docx"
        raise DocumentError(_unsupported(name, "a ZIP archive"))
    return by_name or "text"


def _unsupported(name: str, what: str) -> str:
    if what in _CONVERTIBLE:
        return f"{name} is {what}; save it as DOCX or PDF, which ContextLens reads."
    return f"{name} is {what}; ContextLens reads {SUPPORTED}."
