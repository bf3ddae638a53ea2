"""Exact token counting: the fast GGUF counter vs llama-cpp-python's own tokenizer, side by side.

Run with ``python tests/benchmarks/bench_tokens.py``. Measures throughput (MB/s of UTF-8) of
``Llama.tokenize`` (the model loaded with ``vocab_only``, in process) against the fast counter's
``encode`` and ``count`` from ``gguf_encoding``, on the differential-test corpus (tests/core/
token_corpus.py: English, code, Chinese, numbers, whitespace, emoji, scripts, lone surrogates),
per part and on the whole concatenated text. Every token list must equal llama.cpp's: a
difference is a correctness failure and exits non-zero. Timing is never asserted: rounds
alternate the order of the sides so that machine noise hits all alike, and medians are compared.
cl100k throughput is printed for information (it is the estimate used when no model is loaded).

Goal (issue: exact counting): count/llama >= 8x on the whole corpus (printed as PASS/FAIL).

Then every tokenizer family (issue: any model a person brings): the counter ``count --model``
uses for Gemma 3 270M (SentencePiece) on the whole 1.6 MB Jargon File sample, and for each of
llama.cpp's vocabulary-only test models in models/vocab/ on a slice of the corpus, against
llama.cpp on the same text in the same run; each must give llama.cpp's ids.
Goal: the Gemma 3 count >= 20x llama-cpp-python's tokenize of the same whole text (not in --quick).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llama_cpp import Llama  # noqa: E402
from llama_cpp import llama_cpp as lc  # noqa: E402

from app.core.default_model import default_model_path  # noqa: E402
from app.core.paths import models_dir, sample_document  # noqa: E402
from app.core.textutil import utf8  # noqa: E402
from app.core.tokens import cl100k, counter_method, exact_counter, gguf_encoding  # noqa: E402
from tests.benchmarks.report import parse_args, row, write_rows  # noqa: E402
from tests.core.token_corpus import corpus  # noqa: E402

GOAL = 8.0
SPM_GOAL = 20.0
MB = 1_000_000


def scaled(parts: dict[str, str], mb: float) -> dict[str, str]:
    """Each part repeated (or cut) so that together they hold about ``mb`` MB of UTF-8."""
    total = sum(len(utf8(t)) for t in parts.values())
    factor = mb * MB / total
    out = {}
    for name, text in parts.items():
        size = max(1, round(len(text) * factor))
        out[name] = (text * math.ceil(size / len(text)))[:size]
    return out


def first_difference(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=6.0, help="corpus size in MB (10^6 bytes)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family-mb", type=float, default=1.0,
                        help="corpus slice for each vocabulary-only model, in MB")  # fmt: skip
    parser.add_argument("--no-families", dest="families", action="store_false",
                        help="skip the every-family comparison")  # fmt: skip
    # --quick leaves the every-family part out: llama.cpp alone takes a minute on Gemma 3.
    args = parse_args(parser, {"mb": 1.0, "rounds": 2, "families": False})

    model = default_model_path()
    llm = Llama(str(model), vocab_only=True, verbose=False)
    counter = gguf_encoding(model)
    approx = cl100k()

    parts = scaled(corpus(args.seed), args.mb)
    parts["whole"] = "".join(parts.values())
    size = {name: len(utf8(text)) for name, text in parts.items()}
    print(f"model {model.name}, corpus {size['whole'] / MB:.2f} MB, rounds {args.rounds}")

    sides: dict[str, Callable[[str], Any]] = {
        "llama": lambda t: llm.tokenize(utf8(t), add_bos=False, special=False),
        "encode": counter.encode,
        "count": counter.count,
        "cl100k": approx.count,
    }
    times: dict[tuple[str, str], list[float]] = {(p, s): [] for p in parts for s in sides}
    ntokens: dict[str, int] = {}
    failures: list[str] = []
    order = list(sides)
    for r in range(args.rounds):
        for part, text in parts.items():
            results: dict[str, Any] = {}
            for side in order if r % 2 == 0 else order[::-1]:
                seconds, results[side] = timed(lambda s=side, t=text: sides[s](t))
                times[(part, side)].append(seconds)
            ref, mine = results["llama"], results["encode"]
            ntokens[part] = len(ref)
            if mine != ref:
                at = first_difference(ref, mine)
                failures.append(
                    f"round {r + 1}, {part}: encode gives {len(mine)} tokens, llama.cpp "
                    f"{len(ref)}; first difference at token {at}"
                )
            if results["count"] != len(ref):
                failures.append(f"round {r + 1}, {part}: count {results['count']} != {len(ref)}")
    llm.close()

    med = statistics.median

    def rate(part: str, side: str) -> float:
        return size[part] / MB / med(times[(part, side)])

    print()
    header = (
        f"{'part':12s} {'MB':>6s} {'tokens':>10s} {'llama':>8s} {'encode':>8s} {'count':>8s}"
        f" {'enc/llama':>9s} {'cnt/llama':>9s} {'cl100k':>8s}"
    )
    print("throughput in MB/s of UTF-8 (median of the rounds); ratios are of those medians")
    print(header)
    for part in parts:
        llama, enc, cnt = rate(part, "llama"), rate(part, "encode"), rate(part, "count")
        print(
            f"{part:12s} {size[part] / MB:6.2f} {ntokens[part]:10,d} {llama:8.2f} {enc:8.2f}"
            f" {cnt:8.2f} {enc / llama:8.1f}x {cnt / llama:8.1f}x {rate(part, 'cl100k'):8.2f}"
        )

    whole_count = rate("whole", "count") / rate("whole", "llama")
    whole_encode = rate("whole", "encode") / rate("whole", "llama")
    print()
    print(f"whole corpus: count vs llama {whole_count:.1f}x, encode vs llama {whole_encode:.1f}x")
    verdict = "PASS" if whole_count >= GOAL else "FAIL"
    print(f"goal: >= {GOAL:g}x (count vs llama-cpp-python tokenize, whole corpus): {verdict}")
    note = f"{size['whole'] / MB:.2f} MB corpus, {args.rounds} rounds"
    rows = [
        row("exact count, whole corpus", "llama-cpp-python tokenize", rate("whole", "count"),
            whole_count, f">= {GOAL:g}", unit="MB/s", note=note),
    ]  # fmt: skip
    if failures:
        print()
        print("TOKENS DIFFER from llama.cpp (a correctness failure, not timing):")
        for line in failures:
            print(f"  {line}")
        write_rows(args.json, "bench_tokens", rows)
        return 1
    print("tokens: identical to llama.cpp on every part and the whole, every round")
    rc = families(args, rows) if args.families else 0
    write_rows(args.json, "bench_tokens", rows)
    return rc


def families(args: Any, rows: list[Any]) -> int:
    """The exact counter of every family against llama.cpp, one text each, side by side."""
    gemma = models_dir() / "gemma-3-270m-q4_k_m.gguf"
    jargon = sample_document().read_text(encoding="utf-8")
    mixed = "".join(scaled(corpus(args.seed), args.family_mb).values())
    runs = [(gemma, jargon, "Jargon File")] if gemma.is_file() else []
    runs += [(p, mixed, "corpus") for p in sorted((models_dir() / "vocab").glob("*.gguf"))]
    print()
    print("every family: the counter `count --model` uses vs llama.cpp (MB/s of UTF-8)")
    print(f"{'vocabulary':32s} {'text':11s} {'MB':>5s} {'llama':>7s} {'fast':>7s} {'ratio':>7s}"
          f"  counter")  # fmt: skip
    failures: list[str] = []
    for path, text, label in runs:
        llm = Llama(str(path), vocab_only=True, verbose=False)
        vocab = llm._model.vocab
        attrs = [lc.llama_vocab_get_attr(vocab, i) for i in range(lc.llama_vocab_n_tokens(vocab))]

        def tokenize(t: str, special: bool, llm: Any = llm) -> list[int]:
            return llm.tokenize(utf8(t), add_bos=False, special=special)

        counter = exact_counter(path, tokenize, attrs=attrs)
        counter.count("warm up")
        t_llama, ref = timed(lambda t=text, f=tokenize: f(t, False))
        t_fast, mine = timed(lambda t=text, c=counter: c.encode(t))
        llm.close()
        mb = len(utf8(text)) / MB
        ratio = t_llama / t_fast
        print(f"{path.name:32s} {label:11s} {mb:5.2f} {mb / t_llama:7.2f} {mb / t_fast:7.2f}"
              f" {ratio:6.1f}x  {counter_method(counter)[:70]}")  # fmt: skip
        if mine != ref:
            failures.append(f"{path.name}: ids differ at token {first_difference(ref, mine)}")
        if path == gemma:
            rows.append(row("Gemma 3 exact count, 1.6 MB", "llama-cpp-python tokenize", mb / t_fast,
                            ratio, f">= {SPM_GOAL:g}", unit="MB/s", note=label))  # fmt: skip
            verdict = "PASS" if ratio >= SPM_GOAL else "FAIL"
            print(f"  goal: Gemma 3 count >= {SPM_GOAL:g}x llama.cpp on the whole text: {verdict}")
    if failures:
        print("TOKENS DIFFER from llama.cpp:", *failures, sep="\n  ")
        return 1
    print("tokens: identical to llama.cpp for every family")
    return 0


if __name__ == "__main__":
    sys.exit(main())
