"""What the engine's prompt slices cost: prompt tokens per second in slices of PROMPT_SLICE
against llama-cpp-python's 512-token batches, on each llama.cpp build and model given.

Run with ``python tests/benchmarks/bench_slices.py`` (``--build .venv/llama-portable`` adds the
AVX2 build ``make test-portable`` installs: the instruction set of a CPU without AVX-512). The
engine evaluates a prompt in slices of :data:`~app.core.engine.schedule.PROMPT_SLICE` tokens on
the CPU, so that a change of the thread count is followed within a slice; ``Llama.generate``
evaluates it in ``n_batch`` (512) batches. Issue 52 asked whether the slices are why a rolling
job evaluated its prompts slower than a peer on another CPU. Each build runs in a process of its
own, the model loaded as the engine loads it (schedule.llama_kwargs, the default threads), the
same 1,900 tokens of the sample evaluated from an empty cache in slices of 64, PROMPT_SLICE,
256 and 512 tokens, in alternating rounds; the medians are compared.

Goal: slices of PROMPT_SLICE at least 0.95x the rate of 512-token batches on every build and
model (they cost no more than 5%). For the record, the same prompt in slices of PROMPT_SLICE
with flash attention on against off (the engine's default), and the 32 tokens of a reply
decoded one at a time after it (and after 16 and 256 positions: what a reply costs grows with
the positions before it): which is faster depends on the CPU and the model, so it is the
calibration's choice (app/core/calibrate.py), not a default.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.child_process import child_env  # noqa: E402
from app.core.default_model import default_model_path  # noqa: E402
from app.core.engine.schedule import PROMPT_SLICE  # noqa: E402
from tests.benchmarks.report import Row, parse_args, print_goals, row, write_rows  # noqa: E402

BATCH = 512  # llama-cpp-python's n_batch
GOAL = ">= 0.95"
PROMPT_TOKENS = 1_900
GEN_TOKENS = 32
DEPTHS = (16, 256)  # the reply is also timed after this many positions
N_CTX = 2_048


def measure(model: str, sizes: list[int], rounds: int) -> dict[str, Any]:
    """In this process, with the llama.cpp build on its path: each slice size's median prompt
    rate, and with flash attention on and off, the prompt rate in slices of PROMPT_SLICE and the
    generation rate after the prompt (at 1,900 positions)."""
    import dataclasses  # noqa: PLC0415

    import llama_cpp  # noqa: PLC0415 (the build the parent chose, through PYTHONPATH)

    from app.core.engine.schedule import llama_kwargs  # noqa: PLC0415
    from app.core.engine.threads import default_threads  # noqa: PLC0415
    from app.core.engine.types import LoadSettings  # noqa: PLC0415
    from app.core.paths import sample_document  # noqa: PLC0415

    threads = default_threads()
    settings = LoadSettings(n_ctx=N_CTX, n_threads=threads)
    llms = {flash: llama_cpp.Llama(**llama_kwargs(model, dataclasses.replace(
        settings, flash_attn=flash), 0)) for flash in (False, True)}  # fmt: skip
    text = sample_document().read_text(encoding="utf-8")[200_000:220_000]
    tokens = llms[False].tokenize(text.encode(), add_bos=True)[:PROMPT_TOKENS]
    runs = [(False, s) for s in sizes] + [(True, PROMPT_SLICE)]
    prompt: dict[tuple[bool, int], list[float]] = {run: [] for run in runs}
    gen: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for flash, size in runs:
            llm = llms[flash]
            llm.reset()
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
            t0 = time.perf_counter()
            for i in range(0, len(tokens), size):
                llm.eval(tokens[i : i + size])
            prompt[(flash, size)].append(len(tokens) / (time.perf_counter() - t0))
            if size == PROMPT_SLICE:  # a reply's tokens, one decode each, after the prompt
                t0 = time.perf_counter()
                for token in tokens[:GEN_TOKENS]:
                    llm.eval([token])
                gen[flash].append(GEN_TOKENS / (time.perf_counter() - t0))
    shallow: dict[tuple[bool, int], list[float]] = {(f, d): [] for f in llms for d in DEPTHS}
    for _ in range(rounds):  # the reply after fewer positions, as a calibration may time it
        for (flash, depth), got in shallow.items():
            llm = llms[flash]
            llm.reset()
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
            for i in range(0, depth, PROMPT_SLICE):
                llm.eval(tokens[i : min(i + PROMPT_SLICE, depth)])
            t0 = time.perf_counter()
            for token in tokens[:GEN_TOKENS]:
                llm.eval([token])
            got.append(GEN_TOKENS / (time.perf_counter() - t0))
    return {"build": str(Path(llama_cpp.__file__).parent), "threads": threads,
            "shallow": {f"{d} {int(f)}": statistics.median(v) for (f, d), v in shallow.items()},
            "rates": {str(s): statistics.median(prompt[(False, s)]) for s in sizes},
            "flash_prompt": statistics.median(prompt[(True, PROMPT_SLICE)]),
            "gen": statistics.median(gen[False]),
            "flash_gen": statistics.median(gen[True])}  # fmt: skip


def in_child(build: str | None, model: str, sizes: list[int], rounds: int) -> dict[str, Any]:
    """:func:`measure` in a fresh process, with ``build`` (a folder holding ``llama_cpp``) first
    on its path; None: the installed build."""
    env = child_env()
    if build:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(build).resolve()), env["PYTHONPATH"]])
    argv = [sys.executable, __file__, "--child", model, "--sizes", ",".join(map(str, sizes)),
            "--rounds", str(rounds)]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="GGUF model (repeatable; default: the "
                        "default model)")  # fmt: skip
    parser.add_argument("--build", action="append", default=[],
                        help="a folder holding another llama_cpp build (repeatable), measured "
                             "beside the installed one")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default=f"64,{PROMPT_SLICE},256,{BATCH}", help=argparse.SUPPRESS)
    args = parse_args(parser, {"rounds": 1})
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        print(json.dumps(measure(args.child, sizes, args.rounds)))
        return
    rows: list[Row] = []
    for build in [None, *args.build]:
        for model in args.model or [str(default_model_path())]:
            got = in_child(build, model, sizes, args.rounds)
            rates: dict[str, float] = got["rates"]
            name = f"{Path(model).name}, {'installed build' if build is None else build}"
            print(f"{name} ({got['threads']} threads): " + ", ".join(
                f"{s}: {r:.1f} tok/s" for s, r in rates.items()), flush=True)  # fmt: skip
            ours, theirs = rates[str(PROMPT_SLICE)], rates[str(BATCH)]
            rows.append(row(f"{name}: slices of {PROMPT_SLICE}", f"batches of {BATCH}", ours,
                            ours / theirs, GOAL, unit="tok/s",
                            note=f"{BATCH}: {theirs:.1f} tok/s"))  # fmt: skip
            flash, gen, flash_gen = (float(got[k]) for k in ("flash_prompt", "gen", "flash_gen"))
            print(f"  flash attention on / off: prompt {flash:.1f} / {ours:.1f} tok/s "
                  f"({flash / ours:.2f}x), generation after it {flash_gen:.1f} / {gen:.1f} "
                  f"tok/s ({flash_gen / gen:.2f}x)", flush=True)  # fmt: skip
            after = [(f"generation after {d} positions", got["shallow"][f"{d} 1"],
                      got["shallow"][f"{d} 0"]) for d in DEPTHS]  # fmt: skip
            print("  " + ", ".join(f"{what}: {on / off:.2f}x" for what, on, off in after))
            deep = ("generation after 1,900 positions", flash_gen, gen)
            for what, on, off in (("prompt", flash, ours), deep, *after):
                rows.append(row(f"{name}: {what}, flash attention on", f"{what}, off", on,
                                on / off, "> 0", unit="tok/s",
                                note="for the record: which is faster depends on the CPU "
                                     "and the model (the calibration's business)"))  # fmt: skip
    print_goals(rows, digits=3)
    write_rows(args.json, "bench_slices", rows)


if __name__ == "__main__":
    main()
