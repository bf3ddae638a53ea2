"""The GGUF reader's memory is bounded whatever the header claims (issue 21, finding 12).

A header of 64 strings of 16 MiB each was accepted and held whole: 2.1 GiB for one look at a
file. Here such headers are crafted as sparse files (the strings are holes: gigabytes that cost
nothing on disk) and read in a child process whose address space is capped (RLIMIT_AS) at what
it had after importing plus 512 MiB: long strings nobody asked for are skipped without being
read, and what would be kept past the cap is refused in one sentence, never a MemoryError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.core.child_process import package_root
from app.core.engine.gguf import (
    MAX_HEADER_MEMORY,
    MAX_TEMPLATE_BYTES,
    MAX_TEMPLATES_BYTES,
    GGUFError,
    read_gguf,
)
from tests.core import gguf_cases as gc

MIB = 1 << 20
HEADROOM = 512 * MIB  # the address space the reader may add to what Python and numpy take

# Runs in the child: import, cap the address space, read, say what happened as one JSON line.
_READER = """
import json, resource, sys
from app.core.engine.gguf import ArrayValue, GGUFError, SkippedString, read_gguf

def status(field):  # this program's own figures (ru_maxrss survives exec: it counts the parent)
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith(field + ":"))

def vm_size():
    return status("VmSize")

path, keep, headroom = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + headroom, resource.RLIM_INFINITY))
before = status("VmHWM")
try:
    gf = read_gguf(path, keep_arrays=keep)
except GGUFError as exc:
    result = {"error": str(exc)}
except MemoryError:
    result = {"error": "MemoryError"}
else:
    kinds = {}
    for key, value in gf.metadata.items():
        if isinstance(value, SkippedString):
            kinds[key] = ["skipped", value.n_bytes]
        elif isinstance(value, ArrayValue):
            kinds[key] = ["array", value.count, value.items is not None]
        elif isinstance(value, str):
            kinds[key] = ["string", len(value)]
    result = {"metadata": kinds}
result["grew_kib"] = (status("VmHWM") - before) // 1024
print(json.dumps(result))
"""


def _read_capped(path: Path, keep: Sequence[str] = ()) -> dict:
    proc = subprocess.run(
        [sys.executable, "-P", "-c", _READER, str(path), json.dumps(list(keep)), str(HEADROOM)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": package_root()},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _sparse_strings(path: Path, sizes: Sequence[tuple[str, int]], *, marks: bool = False) -> Path:
    """A metadata-only GGUF whose string values are holes of the given sizes (``marks``: each
    starts with a distinct byte, so none equals another)."""
    with path.open("wb") as fh:
        fh.write(gc.header(0, len(sizes)))
        for i, (key, size) in enumerate(sizes):
            fh.write(gc.gstr(key) + gc.u32(gc.STRING) + gc.u64(size))
            hole = size
            if marks and size:
                fh.write(bytes([65 + i % 26]))
                hole -= 1
            fh.seek(hole, 1)
        fh.truncate()
    return path


def _sparse_array(path: Path, key: str, item_type: int, sizes: Sequence[int]) -> Path:
    """A metadata-only GGUF with one array: of strings of ``sizes`` (distinct first bytes), or
    of ``sizes[0]`` numbers of ``item_type``, all holes."""
    with path.open("wb") as fh:
        fh.write(gc.header(0, 1) + gc.gstr(key) + gc.u32(gc.ARRAY) + gc.u32(item_type))
        if item_type == gc.STRING:
            fh.write(gc.u64(len(sizes)))
            for i, size in enumerate(sizes):
                fh.write(gc.u64(size) + i.to_bytes(4, "little"))
                fh.seek(size - 4, 1)
        else:
            fh.write(gc.u64(sizes[0]))
            fh.seek(sizes[0] * 8, 1)
        fh.truncate()
    return path


def test_long_strings_nobody_asked_for_are_skipped_unread(tmp_path: Path) -> None:
    """The finding's header: 64 strings of 16 MiB (1 GiB) cost next to nothing."""
    sizes = [(f"general.note{i}", gc.MAX_STRING_BYTES) for i in range(64)]
    got = _read_capped(_sparse_strings(tmp_path / "long.gguf", sizes))
    assert "error" not in got, got
    assert got["metadata"] == {k: ["skipped", n] for k, n in sizes}
    assert got["grew_kib"] < 64 * 1024


def test_long_strings_asked_for_stop_at_the_cap_in_one_sentence(tmp_path: Path) -> None:
    sizes = [(f"general.note{i}", gc.MAX_STRING_BYTES) for i in range(64)]
    path = _sparse_strings(tmp_path / "long.gguf", sizes)
    got = _read_capped(path, keep=[k for k, _ in sizes])
    assert got["error"].startswith(
        f"the header takes more than {MAX_HEADER_MEMORY // MIB:,} MiB of memory to read"
    ), got
    assert got["grew_kib"] < (MAX_HEADER_MEMORY + 64 * MIB) // 1024


def test_many_strings_short_enough_to_keep_stop_at_the_cap(tmp_path: Path) -> None:
    sizes = [(f"general.note{i}", MIB) for i in range(400)]  # kept one by one: 400 MiB
    got = _read_capped(_sparse_strings(tmp_path / "many.gguf", sizes))
    assert "the header takes more than" in got["error"], got
    assert got["grew_kib"] < (MAX_HEADER_MEMORY + 64 * MIB) // 1024


def test_a_vocabulary_of_huge_tokens_stops_at_the_cap(tmp_path: Path) -> None:
    """The vocabulary is read whole for its duplicate check, kept or not: it counts too."""
    path = _sparse_array(tmp_path / "vocab.gguf", "tokenizer.ggml.tokens", gc.STRING,
                         [gc.MAX_STRING_BYTES] * 64)  # fmt: skip
    got = _read_capped(path)
    assert "the header takes more than" in got["error"], got
    assert "'tokenizer.ggml.tokens'" in got["error"]


def test_a_small_array_holding_a_long_string_is_not_kept(tmp_path: Path) -> None:
    path = _sparse_array(tmp_path / "arr.gguf", "general.tags", gc.STRING,
                         [gc.MAX_STRING_BYTES] * 8)  # fmt: skip
    got = _read_capped(path)
    assert got["metadata"] == {"general.tags": ["array", 8, False]}, got
    assert got["grew_kib"] < 64 * 1024


def test_a_large_number_array_nobody_asked_for_is_skipped_unread(tmp_path: Path) -> None:
    path = _sparse_array(tmp_path / "nums.gguf", "test.numbers", gc.UINT64, [64 * MIB])  # 512 MiB
    got = _read_capped(path)
    assert got["metadata"] == {"test.numbers": ["array", 64 * MIB, False]}, got
    assert got["grew_kib"] < 64 * 1024


@pytest.mark.unit
def test_chat_templates_are_capped_together(tmp_path: Path) -> None:
    one = [("tokenizer.chat_template", MAX_TEMPLATE_BYTES)]
    named = [(f"tokenizer.chat_template.t{i}", MAX_TEMPLATE_BYTES) for i in range(4)]
    assert read_gguf(_sparse_strings(tmp_path / "ok.gguf", one + named[:3])).get(
        "tokenizer.chat_template.t2"
    )
    with pytest.raises(GGUFError, match=f"more than {MAX_TEMPLATES_BYTES:,} bytes together"):
        read_gguf(_sparse_strings(tmp_path / "many.gguf", one + named))


@pytest.mark.unit
def test_a_long_string_asked_for_by_key_is_kept(tmp_path: Path) -> None:
    path = _sparse_strings(tmp_path / "asked.gguf", [("general.notes", 2 * MIB)], marks=True)
    assert read_gguf(path).get("general.notes").n_bytes == 2 * MIB
    kept = read_gguf(path, keep_arrays=("general.notes",)).get("general.notes")
    assert isinstance(kept, str) and len(kept) == 2 * MIB and kept[0] == "A"


@pytest.mark.unit
def test_a_long_skipped_string_past_the_end_is_still_a_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(gc.header(0, 1) + gc.gstr("general.notes") + gc.u32(gc.STRING)
                     + gc.u64(2 * MIB) + b"tiny")  # fmt: skip
    with pytest.raises(GGUFError, match=r"file is truncated: the value of 'general.notes' needs"):
        read_gguf(path)
