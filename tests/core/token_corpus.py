"""A varied text corpus for the differential token tests and the counting benchmark.

Real text where the machine has it (the shipped Jargon File, the Python standard library's
sources, the Chinese samples in tests/data and Python's own CJK test files), plus seeded random
text for what real documents rarely hold in bulk: numbers in every format, whitespace runs, emoji
sequences, many scripts, lone surrogates. Deterministic for a given seed.
"""

from __future__ import annotations

import os
import random
import sysconfig
from pathlib import Path

from app.core.paths import sample_document

DATA = Path(__file__).resolve().parent.parent / "data"

_WORDS = [
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
    "from", "it", "this", "be", "are", "or", "an", "which", "have", "context", "window", "token",
    "model", "cache", "buffer", "segment", "document", "chunk", "strategy", "budget", "reply",
]  # fmt: skip
_SCRIPTS = [
    (0x0041, 0x007A), (0x00C0, 0x024F), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x05FF),
    (0x0600, 0x06FF), (0x0900, 0x097F), (0x0E00, 0x0E7F), (0x1100, 0x11FF), (0x3040, 0x30FF),
    (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0x0300, 0x036F), (0xFF01, 0xFF5E), (0x2000, 0x206F),
    (0x2190, 0x22FF), (0x2500, 0x257F),
]  # fmt: skip
_EMOJI = [
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇨🇳", "🇺🇸", "❤️", "✨", "🧑🏿‍💻", "🏳️‍🌈", "1️⃣", "©️", "🫠", "👩‍❤️‍👨",
]  # fmt: skip
_SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\n\t", "\u00a0", "\u3000",
           "    ", "\n\n\n", " \t ", "\u2003", "\v", "\f"]  # fmt: skip


def english() -> str:
    return sample_document().read_text(encoding="utf-8")


def code(limit: int = 2_000_000) -> str:
    """Python standard library sources, in a stable order, up to ``limit`` characters."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.append(text)
        total += len(text)
        if total >= limit:
            break
    return "".join(out)


def chinese(rng: random.Random, size: int = 400_000) -> str:
    """Real Chinese sentences reshuffled, mixed with random common Han characters."""
    real: list[str] = []
    for name in ("chinese-gbk.txt", "chinese-big5.txt"):
        path = DATA / name
        if path.exists():
            real.append(path.read_bytes().decode("gbk" if "gbk" in name else "big5", "replace"))
    cjk = Path(sysconfig.get_paths()["stdlib"]) / "test" / "cjkencodings"
    for name in ("gb2312-utf8.txt", "gbk-utf8.txt", "big5-utf8.txt", "gb18030-utf8.txt"):
        if (cjk / name).exists():
            real.append((cjk / name).read_text(encoding="utf-8", errors="replace"))
    sentences = [s for t in real for s in t.replace("\r", "").split("。") if s.strip()]
    out: list[str] = []
    total = 0
    while total < size:
        if sentences and rng.random() < 0.7:
            piece = rng.choice(sentences) + rng.choice("。！？；，")
        else:
            piece = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(2, 30)))
            piece += rng.choice(["。", "，", "、", "：", "“", "”", "（", "）", "\n", " "])
        out.append(piece)
        total += len(piece)
    return "".join(out)


def numbers(rng: random.Random, size: int = 300_000) -> str:
    forms = [
        lambda: str(rng.randint(0, 10 ** rng.randint(1, 12))),
        lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 6)}f}",
        lambda: f"{rng.randint(0, 10**9):,}",
        lambda: f"{rng.random():.3e}",
        lambda: f"0x{rng.getrandbits(32):X}",
        lambda: f"{rng.randint(1, 31)}/{rng.randint(1, 12)}/{rng.randint(1900, 2100)}",
        lambda: f"v{rng.randint(0, 9)}.{rng.randint(0, 99)}.{rng.randint(0, 999)}",
        lambda: "".join(rng.choice("0123456789٠١٢٣४५६½²³") for _ in range(rng.randint(1, 9))),
    ]
    return _mix(rng, size, lambda: rng.choice(forms)())  # noqa: PLW0108 (a new choice per call)


def whitespace(rng: random.Random, size: int = 300_000) -> str:
    return _mix(rng, size, lambda: rng.choice(_WORDS), spaces=True)


def emoji(rng: random.Random, size: int = 150_000) -> str:
    return _mix(rng, size, lambda: "".join(rng.choice(_EMOJI) for _ in range(rng.randint(1, 4))))


def scripts(rng: random.Random, size: int = 250_000) -> str:
    def word() -> str:
        lo, hi = rng.choice(_SCRIPTS)
        return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8)))

    return _mix(rng, size, word)


def surrogates(rng: random.Random, size: int = 100_000) -> str:
    """Text with lone surrogates, which Python strings can hold and UTF-8 cannot."""

    def word() -> str:
        w = rng.choice(_WORDS)
        if rng.random() < 0.3:
            w += chr(rng.randint(0xD800, 0xDFFF))
        return w

    return _mix(rng, size, word)


def _mix(rng: random.Random, size: int, item: object, spaces: bool = False) -> str:
    out: list[str] = []
    total = 0
    while total < size:
        piece = item()  # type: ignore[operator]
        sep = rng.choice(_SPACES) if spaces or rng.random() < 0.2 else rng.choice(" ,.;!?-'\"")
        out.append(piece + sep)
        total += len(piece) + len(sep)
    return "".join(out)


def corpus(seed: int = 0) -> dict[str, str]:
    """Named parts of the corpus; together a little over 5 MB of UTF-8."""
    rng = random.Random(seed)
    return {
        "english": english(),
        "code": code(),
        "chinese": chinese(rng),
        "numbers": numbers(rng),
        "whitespace": whitespace(rng),
        "emoji": emoji(rng),
        "scripts": scripts(rng),
        "surrogates": surrogates(rng),
    }


def utf8_size(parts: dict[str, str]) -> int:
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in parts.values())


if __name__ == "__main__":  # a quick look: python -m tests.core.token_corpus
    p = corpus()
    for k, v in p.items():
        print(f"{k:12s} {len(v.encode('utf-8', 'surrogatepass')):>10,} bytes")
    print(f"{'total':12s} {utf8_size(p):>10,} bytes  (cpu {os.cpu_count()})")
