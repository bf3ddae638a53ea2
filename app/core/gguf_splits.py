"""Split GGUF files (``name-00001-of-00003.gguf``): the parts of one model, told by their names.

llama.cpp's ``gguf-split`` writes a model too large for one file as numbered parts, named as
``llama_split_path`` does (``%s-%05d-of-%05d.gguf``); llama.cpp opens the first and finds the
others beside it by the same names. So a listing shows one model per split: its first part, the
parts' sizes summed, and a note when parts are missing (llama.cpp cannot load it then).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class SplitName:
    """What a part's file name says: the model's prefix, this part (1-based) and how many."""

    prefix: str
    number: int
    count: int


def split_name(path: Path) -> SplitName | None:
    """The split a file's name says it belongs to; None for a whole model (or a name that only
    looks like one, ``x-00000-of-00002.gguf`` or ``x-00003-of-00002.gguf``)."""
    m = _SPLIT.match(path.name)
    if m is None:
        return None
    number, count = int(m["no"]), int(m["count"])
    if count < 2 or not 1 <= number <= count:
        return None
    return SplitName(m["prefix"], number, count)


@dataclass(frozen=True)
class Group:
    """One model's files: a whole file, or a split's parts present (in order)."""

    parts: tuple[Path, ...]
    count: int  # how many parts the split has (1: a whole file)

    @property
    def first(self) -> Path:
        return self.parts[0]

    @property
    def complete(self) -> bool:
        return len(self.parts) == self.count

    def note(self) -> str:
        """"2 of 3 parts present", or "" when every part is there."""
        return "" if self.complete else f"{len(self.parts)} of {self.count} parts present"


def group_files(files: Iterable[Path]) -> list[Group]:
    """The files of one folder as models: each whole file alone, each split's parts together
    (the first part present leads; a part named twice counts once), in the files' order.
    Linear in the files, grouped by dictionary (a folder may hold thousands of parts)."""
    splits: dict[tuple[str, int], dict[int, Path]] = {}
    order: list[tuple[str, int] | Path] = []
    for path in files:
        name = split_name(path)
        if name is None:
            order.append(path)
            continue
        key = (name.prefix.lower(), name.count)
        if key not in splits:
            splits[key] = {}
            order.append(key)
        splits[key].setdefault(name.number, path)
    groups: list[Group] = []
    for entry in order:
        if isinstance(entry, Path):
            groups.append(Group((entry,), 1))
        else:
            parts = splits[entry]
            groups.append(Group(tuple(parts[n] for n in sorted(parts)), entry[1]))
    return groups
