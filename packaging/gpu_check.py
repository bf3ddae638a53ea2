"""The GPU check's checker: both test models, every layer on the GPU, one report.

Run by packaging/gpu-check.sh (``make gpu-check``) in the venv it builds with a CUDA llama.cpp;
not part of ``make test``. For each model it loads the real engine (the child process, as the app
does) with ``n_gpu_layers=-1`` and checks, reading each figure from its source:

- the backend line names CUDA (the build registered the CUDA backend and can offload);
- the VRAM gauge reads NVML (app/core/telemetry.py through nvidia-ml-py) and VRAM grows by at
  least the KV cache when the model loads;
- the KV cache is on the GPU (the buffers llama.cpp allocated are CUDA ones) and its size is the
  card's KV bytes per token times the context;
- one short job (summarize, ``head``) passes the audit (llama.cpp saw exactly the plan shown).

Prints one report and exits 0 when every check passed, 1 when one failed, 2 when there is no
NVIDIA GPU (one sentence, before anything is loaded).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from app.core.default_model import DEFAULT_MODEL, GEMMA_3_270M, model_path
from app.core.engine.gguf import inspect_model
from app.core.engine.host import EngineHost
from app.core.engine.kv_alloc import MIB, MIB_PRECISION
from app.core.engine.types import LoadSettings
from app.core.jobs.audit import Audit
from app.core.jobs.tasks import JobFinished, summarize
from app.core.paths import sample_document
from app.core.telemetry import gpu_state
from app.core.tokens import host_counter

EXIT_OK, EXIT_FAILED, EXIT_NO_GPU = 0, 1, 2
N_CTX = 4096
DOCUMENT_CHARS = 24_000  # enough that the head strategy drops some of it at n_ctx 4096


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    failed: int = 0
    passed: int = 0

    def check(self, ok: bool, what: str, detail: str) -> bool:
        self.lines.append(f"  [{'PASS' if ok else 'FAIL'}] {what}: {detail}")
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok

    def note(self, text: str) -> None:
        self.lines.append(text)


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f} MiB"


def check_model(host: EngineHost, path: Path, report: Report) -> None:
    info = inspect_model(path)
    report.note(f"{path.name} ({info.architecture}, {info.n_layers} layers, "
                f"{info.describe_attention()})")  # fmt: skip
    before = gpu_state()
    t0 = time.perf_counter()
    loaded = host.load(path, LoadSettings(n_ctx=N_CTX, n_gpu_layers=-1))
    after = gpu_state()
    report.check(loaded.n_gpu_layers == -1 and loaded.gpu_offload_supported, "all layers offloaded",
                 f"n_gpu_layers {loaded.n_gpu_layers}, loaded in "
                 f"{time.perf_counter() - t0:.2f} s")  # fmt: skip
    devices = loaded.kv_devices
    report.check(bool(devices) and all(d.upper().startswith("CUDA") for d in devices),
                 "KV cache on the GPU", f"llama.cpp's KV buffers: {', '.join(devices) or 'none'}, "
                 f"{_mib(loaded.kv_cache_bytes)} in {len(loaded.kv_caches)} cache(s)")  # fmt: skip
    expected = info.kv_cache_bytes(N_CTX, loaded.kv_cache_type)
    close = MIB_PRECISION * max(1, len(loaded.kv_caches))  # llama.cpp prints 0.01 MiB
    same = expected is not None and abs(expected - loaded.kv_cache_bytes) <= close
    figures = f"card {_mib(expected or 0)}, llama.cpp {_mib(loaded.kv_cache_bytes)}"
    report.check(same, "KV bytes as the card says", figures)
    grew = (after.gpus[0].used - before.gpus[0].used) if after.gpus and before.gpus else 0
    report.check(after.available and grew >= loaded.kv_cache_bytes, "VRAM gauge (NVML)",
                 f"{after.gpus[0].name if after.gpus else after.reason}: +{_mib(grew)} at load, "
                 f"{_mib(after.gpus[0].used) if after.gpus else '-'} used")  # fmt: skip
    text = sample_document().read_text(encoding="utf-8")[:DOCUMENT_CHARS]
    counter = host_counter(path, host)
    audit = Audit(host, exact_counts=True)
    result = None
    t0 = time.perf_counter()
    for ev in summarize(host, text, counter, strategy="head", n_ctx=loaded.n_ctx, max_tokens=48,
                        audit=audit):  # fmt: skip
        if isinstance(ev, JobFinished):
            result = ev.result
    seconds = time.perf_counter() - t0
    done = result is not None and result.error is None and result.refused is None
    detail = (
        f"{result.prompt_tokens:,} prompt tokens, {result.completion_tokens} generated in "
        f"{seconds:.1f} s, finish {result.finish_reason}"
        if result
        else "no result"
    )
    report.check(done, "a summarize job (head)", detail)
    report.check(audit.ok, "the audit", audit.summary())
    for finding in audit.findings[:5]:
        report.note(f"    {finding}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path,
                        help="GGUF files (default: both test models in models/)")  # fmt: skip
    parser.add_argument(
        "--without-gpu",
        action="store_true",
        help="run the checks anyway (they fail): to try this script without one",
    )
    args = parser.parse_args(argv)
    state = gpu_state()
    if not state.available and not args.without_gpu:
        print(f"gpu-check: no NVIDIA GPU found ({state.reason}); the GPU check needs one",
              file=sys.stderr)  # fmt: skip
        return EXIT_NO_GPU
    models = args.models or [model_path(DEFAULT_MODEL), model_path(GEMMA_3_270M)]
    report = Report()
    report.note(f"ContextLens GPU check, {datetime.datetime.now():%Y-%m-%d %H:%M}")
    for gpu in state.gpus:
        report.note(f"GPU {gpu.index}: {gpu.name}, {_mib(gpu.total)} (NVML)")
    with EngineHost() as host:
        host.start()
        caps = host.capabilities
        assert caps is not None
        report.check("CUDA" in caps.backends and caps.gpu_offload_supported, "backend line",
                     f"{caps.describe_backend()}, llama-cpp-python "
                     f"{caps.llama_cpp_python_version}")  # fmt: skip
        for path in models:
            try:
                check_model(host, path, report)
            except Exception as exc:  # one model's failure is reported; the other still runs
                report.check(False, path.name, f"{type(exc).__name__}: {exc}")
    total = report.passed + report.failed
    verdict = (f"all {total} checks passed" if not report.failed
               else f"{report.failed} of {total} checks failed")  # fmt: skip
    print("\n".join([*report.lines, f"gpu-check: {verdict}"]))
    return EXIT_OK if not report.failed else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
