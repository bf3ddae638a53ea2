"""The document reader's child process: ``python -m app.core.documents.child --fd N --memory B``.

It caps its own address space first (``RLIMIT_AS``: a parser that allocates without end gets a
``MemoryError`` here, or at worst dies, instead of taking the machine's memory), then reads one
request from the inherited socket, loads that one document and sends it back, packed so that the
parent rebuilds it quickly (see :func:`pack`), and exits. The parent kills it to cancel.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from array import array
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

from app.core.documents import DocumentError, load_document
from app.core.documents.model import Block, BlockKind, Document

KINDS: Final = tuple(BlockKind)


def pack(doc: Document) -> dict[str, Any]:
    """The document as plain values: blocks as four arrays, not ~400k pickled objects."""
    blocks = doc.blocks
    return {
        "text": doc.text,
        "path": None if doc.path is None else str(doc.path),
        "sha256": doc.sha256,
        "size": doc.size,
        "format": doc.format,
        "encoding": doc.encoding,
        "lossy": doc.lossy,
        "kinds": bytes(KINDS.index(b.kind) for b in blocks),
        "starts": array("q", (b.start for b in blocks)).tobytes(),
        "ends": array("q", (b.end for b in blocks)).tobytes(),
        "levels": bytes(b.level for b in blocks),
        "pages": array("q", (x for page in doc.pages for x in page)).tobytes(),
        "title": doc.title,
    }


def unpack(packed: dict[str, Any]) -> Document:
    starts, ends, pages = array("q"), array("q"), array("q")
    starts.frombytes(packed["starts"])
    ends.frombytes(packed["ends"])
    pages.frombytes(packed["pages"])
    kinds = [KINDS[k] for k in packed["kinds"]]
    blocks = tuple(map(Block, kinds, starts, ends, packed["levels"]))
    return Document(
        text=packed["text"],
        path=None if packed["path"] is None else Path(packed["path"]),
        sha256=packed["sha256"],
        size=packed["size"],
        format=packed["format"],
        encoding=packed["encoding"],
        lossy=packed["lossy"],
        blocks=blocks,
        pages=tuple(zip(pages[0::2], pages[1::2], strict=True)),
        title=packed["title"],
    )


def limit_memory(limit: int) -> None:
    """Cap this process's address space (where the platform has RLIMIT_AS)."""
    try:
        import resource  # noqa: PLC0415 (POSIX only)
    except ImportError:  # Windows: no rlimits
        return
    if not hasattr(resource, "RLIMIT_AS"):
        return
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    # macOS refuses some values: the read then goes on uncapped, still killable.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def limit_cpu(seconds: int) -> None:
    """Cap this process's processor time: SIGXCPU at ``seconds``, SIGKILL a second later."""
    try:
        import resource  # noqa: PLC0415 (POSIX only)
    except ImportError:  # Windows: no rlimits
        return
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = seconds if hard == resource.RLIM_INFINITY else min(seconds, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard if hard != resource.RLIM_INFINITY
                                                 else soft + 1))  # fmt: skip


def end_with_parent(interval_s: float = 0.5) -> None:
    """Exit as soon as the parent is gone (a SIGKILLed app cannot kill its reader): a thread
    that looks twice a second. The parsers release the GIL in their long C loops."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve(conn: Connection) -> None:
    try:
        request = conn.recv()
    except (EOFError, OSError):
        return
    gc.disable()  # hundreds of thousands of objects, none of them garbage; the process ends
    try:
        doc = load_document(request["path"], limits=request["limits"], format=request["format"])
        reply: tuple[Any, ...] = ("ok", pack(doc))
        del doc
    except DocumentError as exc:
        reply = ("document", str(exc))
    except MemoryError:
        reply = ("memory", "")
    except RecursionError:
        reply = ("other", "its structure is nested too deeply")
    except Exception as exc:  # the parent names the file and says it in one sentence
        reply = (
            "other",
            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
        )
    try:
        conn.send(reply)
    except MemoryError:
        conn.send(("memory", ""))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="contextlens-reader")
    parser.add_argument("--fd", type=int, required=True, help="inherited socket for messages")
    parser.add_argument("--memory", type=int, required=True, help="address-space cap in bytes")
    parser.add_argument("--cpu", type=int, default=120, help="processor-time cap in seconds")
    args = parser.parse_args(argv)
    end_with_parent()
    limit_memory(args.memory)
    limit_cpu(args.cpu)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in a terminal is the parent's
    conn = Connection(args.fd)
    try:
        serve(conn)
    finally:
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
