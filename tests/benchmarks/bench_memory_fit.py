"""Will it fit: the memory estimate against what llama.cpp allocates, on both test models.

Run with ``python tests/benchmarks/bench_memory_fit.py [--quick] [--json PATH]`` (or ``make
bench``). Each model is loaded by the real engine at several context sizes, f16 and q8_0 KV
caches, flash attention on and off; the engine reads back every buffer llama.cpp logs while
loading (weights, KV cache, logits, compute: ``LoadedModel.buffers``), and the estimate
(``app/core/memory_fit.py``, what ``contextlens-cli info --n-ctx N`` and the model panel show)
is set beside their sum.

Goal (issue: will it fit): every estimate within 10% of what llama.cpp allocates.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.default_model import KNOWN_MODELS, model_path  # noqa: E402
from app.core.engine.gguf import inspect_model  # noqa: E402
from app.core.engine.host import EngineHost  # noqa: E402
from app.core.engine.types import LoadSettings  # noqa: E402
from app.core.memory_fit import estimate_memory  # noqa: E402
from tests.benchmarks.report import Row, parse_args, row, write_rows  # noqa: E402

MIB = 2**20
CACHES = ((False, "f16"), (True, "f16"), (True, "q8_0"))  # (flash attention, KV cache type)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="512,2048,8192,32768", help="n_ctx values")
    args = parse_args(parser, {"contexts": "2048,8192"})
    contexts = [int(n) for n in args.contexts.split(",")]
    models = [model_path(m) for m in KNOWN_MODELS.values()]
    rows: list[Row] = []
    worst = 0.0
    print(f"{'model':<34} {'n_ctx':>7} {'flash':>5} {'KV':>5} {'allocated':>11} "
          f"{'estimate':>11} {'ratio':>6}")  # fmt: skip
    with EngineHost() as host:
        for path in models:
            if not path.is_file():
                print(f"{path.name}: not fetched (make setup), skipped")
                continue
            info = inspect_model(path)
            for n_ctx in contexts:
                for flash, kv in CACHES:
                    settings = LoadSettings(n_ctx=n_ctx, flash_attn=flash, kv_cache_type=kv,
                                            n_threads=1)  # fmt: skip
                    allocated = host.load(path, settings).allocated_bytes
                    estimate = estimate_memory(info, settings).total
                    ratio = estimate / allocated
                    worst = max(worst, abs(ratio - 1))
                    print(f"{path.name:<34} {n_ctx:>7,} {'on' if flash else 'off':>5} {kv:>5} "
                          f"{allocated / MIB:>7,.1f} MiB {estimate / MIB:>7,.1f} MiB "
                          f"{ratio:>6.3f}", flush=True)  # fmt: skip
                    rows.append(row(f"{path.stem} n_ctx {n_ctx} {kv}"
                                    f"{' flash' if flash else ''}: |estimate - allocated|",
                                    "allocated", estimate / MIB, abs(ratio - 1), "<= 0.10",
                                    unit="MiB"))  # fmt: skip
    print(f"largest difference: {worst:.1%} (goal: within 10%)")
    write_rows(args.json, "bench_memory_fit", rows)


if __name__ == "__main__":
    main()
