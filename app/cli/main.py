"""contextlens-cli: the same core as the app, headless (scripts, tests, benchmarks).

Exit codes are a contract: 0 done, 2 bad input, 3 engine crashed, 4 refused because the request
does not fit the context, 130 cancelled. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from app import __version__
from app.cli.batch import add_commands as add_batch_commands
from app.cli.bench import add_commands as add_bench_commands
from app.cli.calibrate import add_commands as add_calibrate_commands
from app.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_CONTEXT,
    EXIT_ENGINE_CRASHED,
    EXIT_OK,
    BadInput,
    add_thread_options,
    fail,
    load_settings,
    sigint_cancels,
    warn,
)
from app.cli.documents import add_commands
from app.cli.engine import add_commands as add_remote_commands
from app.cli.engine import add_engine_options
from app.cli.fetch import add_commands as add_fetch_commands
from app.cli.jobs import add_commands as add_job_commands
from app.cli.models import add_commands as add_model_commands
from app.cli.sampling import add_sampling_options, sampling_from_args
from app.cli.snapshots import add_commands as add_snapshot_commands
from app.core import config
from app.core.engine.types import DEFAULT_N_CTX
from app.core.textutil import terminal_safe

GENERATE_N_CTX = DEFAULT_N_CTX  # the local engine's context for `generate` without --n-ctx


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _resolve_model(arg: str | None) -> Path:
    from app.core.default_model import default_model_path

    if arg:
        return Path(arg).expanduser()
    path = default_model_path()
    if not path.exists():
        raise FileNotFoundError(
            f"the default model is not in {path.parent}; run `make` or "
            "`contextlens-cli fetch-model` to fetch it, or pass --model"
        )
    return path


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def cmd_backend(args: argparse.Namespace) -> int:
    from app.services.engine_build import capabilities

    caps = capabilities()
    data = {
        "backends": list(caps.backends),
        "gpu_offload_supported": caps.gpu_offload_supported,
        "llama_cpp_python_version": caps.llama_cpp_python_version,
        "system_info": caps.system_info,
    }
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(f"{'backend':>18}: {caps.describe_backend()}")
    print(f"{'llama-cpp-python':>18}: {caps.llama_cpp_python_version}")
    print(f"{'build':>18}: {caps.system_info}")
    return EXIT_OK


def _memory_fit(info: Any, args: argparse.Namespace) -> Any:
    """Will the model fit at the context and KV type asked for (default: the context the window
    would load it with), against the memory free now; ValueError for impossible settings."""
    from app.core.engine.types import LoadSettings, default_context
    from app.services.engine_build import fit_of

    settings = LoadSettings(
        n_ctx=args.n_ctx or default_context(info.n_ctx_train),
        n_gpu_layers=args.gpu_layers,
        kv_cache_type=args.kv_type,
        flash_attn=args.flash_attn or args.kv_type not in ("f16", "f32", "bf16"),
    )
    settings.validate()
    return fit_of(info, settings)


def _breakdown(fit: Any) -> str:
    from app.core.memory_fit import gib

    est = fit.estimate
    return (
        f"weights {gib(est.weights_bytes)}, KV cache {gib(est.kv_bytes)}, compute "
        f"{gib(est.compute_bytes)}; {gib(est.total)} in all"
    )


def cmd_info(args: argparse.Namespace) -> int:
    from app.core.engine.gguf import BASE_MODEL_NOTE, GGUFError, inspect_model

    try:
        info = inspect_model(_resolve_model(args.model))
        fit = _memory_fit(info, args)
    except (GGUFError, FileNotFoundError, ValueError) as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    data = {**info.as_dict(), "memory": fit.as_dict()}
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    kv = data["kv_bytes_per_token"]
    kind = "instruction-tuned (chat template)"
    if info.is_base_model:
        kind = f"{BASE_MODEL_NOTE} ({info.base_model_reason})"
    rows = [
        ("file", f"{info.path} ({_human_bytes(info.file_size)}, GGUF v{info.gguf_version})"),
        ("name", info.name or "-"),
        ("architecture", info.architecture),
        ("parameters", f"{info.parameters:,}"),
        ("quantization", info.quantization),
        ("layers", info.n_layers),
        ("embedding", info.n_embd),
        ("heads / KV heads", f"{info.n_head} / {info.n_head_kv}"),
        ("head size (K/V)", f"{info.head_dim_k} / {info.head_dim_v}"),
        ("context trained", f"{info.n_ctx_train:,}" if info.n_ctx_train else "-"),
        ("vocabulary", f"{info.vocab_size or 0:,} ({info.tokenizer_model}, "
                       f"pre {info.tokenizer_pre})"),
        ("chat template", "yes" if info.has_chat_template else "no"),
        ("model", kind),
        ("attention", info.describe_attention()),
        ("KV bytes/token", f"{kv['f16']:,} (f16), {kv['q8_0']:,} (q8_0)" if kv["f16"] else "-"),
        ("memory", fit.sentence()),
        ("", _breakdown(fit)),
    ]
    for key, value in rows:  # the header's words and the file's name, control characters escaped
        shown = terminal_safe(str(value if value is not None else "-"))
        print(f"{key:>18}{':' if key else ' '} {shown}")
    return EXIT_OK


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt_file:
        path = Path(args.prompt_file)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"prompt file not found: {path}") from None
        except UnicodeDecodeError:
            raise ValueError(f"prompt file {path} is not UTF-8 text") from None
    if args.prompt == "-":
        return sys.stdin.read()
    if args.prompt is None:
        raise ValueError("give the prompt with --prompt TEXT, --prompt - (stdin) or --prompt-file")
    return args.prompt


def cmd_generate(args: argparse.Namespace) -> int:
    from app.cli.engine import check_remote_args, connect_remote
    from app.core.engine.chat_template import ChatTemplateError
    from app.core.engine.types import (
        ContextOverflowError,
        EngineCrashedError,
        EngineError,
        Finished,
        InsufficientMemoryError,
        ModelLoadError,
        TextDelta,
        ThreadsChanged,
    )
    from app.services.one_reply import Replier, ReplyRequest

    out: TextIO = sys.stdout
    try:
        check_remote_args(args)
        prompt_text = _read_prompt(args)
        if args.engine:
            model_path = Path(args.model).expanduser() if args.model else None
            if model_path is not None and not model_path.is_file():
                raise FileNotFoundError(f"the model {args.model} does not exist")
        else:
            model_path = _resolve_model(args.model)
        settings = load_settings(
            args,
            n_ctx=args.n_ctx or GENERATE_N_CTX,
            n_gpu_layers=args.gpu_layers,
            kv_cache_type=args.kv_type,
            flash_attn=args.flash_attn,
        )
        settings.validate()
        if args.max_tokens < 1:
            raise ValueError("--max-tokens must be at least 1")
        sampling = sampling_from_args(args)
    except (ValueError, FileNotFoundError, BadInput) as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)

    cancelled = threading.Event()
    with contextlib.ExitStack() as stack:
        watch = stack.enter_context(sigint_cancels(cancelled))
        try:
            if args.engine:  # a server: the same stream, from /v1/completions
                remote = stack.enter_context(contextlib.closing(connect_remote(args, args.n_ctx)))
                replier = Replier.on_server(remote)
                watch(replier)
            else:
                assert model_path is not None  # resolved above: only a server's may be absent
                replier = stack.enter_context(contextlib.closing(Replier.local()))
                watch(replier)
                replier.load(model_path, settings)
            for warning in replier.warnings:  # a context past the training one, no GPU offload
                warn(warning)
            if cancelled.is_set():
                return fail(EXIT_CANCELLED, "cancelled", args.json)
            request = ReplyRequest(prompt_text, args.max_tokens, sampling, args.stop or [],
                                   args.system, args.raw)  # fmt: skip
            finished: Finished | None = None
            for ev in replier.reply(request):
                if isinstance(ev, TextDelta):
                    if args.json:
                        out.write(json.dumps({"type": "text", "text": ev.text,
                                              "tokens": list(ev.token_ids)}) + "\n")  # fmt: skip
                    else:
                        out.write(ev.text)
                    out.flush()
                elif isinstance(ev, ThreadsChanged):
                    if args.json:
                        out.write(json.dumps({"type": "threads_changed",
                                              **dataclasses.asdict(ev)}) + "\n")  # fmt: skip
                    else:
                        print(f"\nnote: {ev.describe()}", file=sys.stderr, flush=True)
                elif isinstance(ev, Finished):
                    finished = ev
            assert finished is not None
            stats = finished.stats
            if args.json:
                out.write(json.dumps({"type": "done", **stats.as_dict()}) + "\n")
            else:
                out.write("\n")
                print(
                    f"[{stats.finish_reason}] prompt {stats.prompt_tokens:,} tokens "
                    f"({stats.prompt_tokens_per_s:.1f} tok/s), reply {stats.completion_tokens:,} "
                    f"tokens ({stats.gen_tokens_per_s:.1f} tok/s)",
                    file=sys.stderr,
                )
            out.flush()
            if stats.finish_reason == "cancelled" or cancelled.is_set():
                return EXIT_CANCELLED
            return EXIT_OK
        except (ContextOverflowError, InsufficientMemoryError) as exc:
            return fail(EXIT_CONTEXT, f"does not fit: {exc}", args.json)
        except EngineCrashedError as exc:
            return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
        except (ModelLoadError, ChatTemplateError, ValueError) as exc:
            return fail(EXIT_BAD_INPUT, str(exc), args.json)
        except EngineError as exc:
            if cancelled.is_set():
                return fail(EXIT_CANCELLED, "cancelled", args.json)
            return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
        except KeyboardInterrupt:
            return fail(EXIT_CANCELLED, "cancelled", args.json)


def build_parser() -> argparse.ArgumentParser:
    from app.core.engine.types import KV_CACHE_TYPE_NAMES

    parser = _Parser(prog="contextlens-cli", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"contextlens {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser(
        "info",
        help="show a model's metadata and whether it fits in memory (checks the GGUF file first)",
        description="The model card of a GGUF file, and the memory loading it takes at a context "
        "size (weights, KV cache, compute buffers) against the memory free now: the same "
        "estimate the window shows and the load checks first.",
    )
    p.add_argument("model", nargs="?", help="GGUF file (default: the default model)")
    p.add_argument("--n-ctx", type=int,
                   help="context size to estimate memory for (default: the window's, "
                        f"{DEFAULT_N_CTX:,} or the training context when smaller)")  # fmt: skip
    p.add_argument("--kv-type", default="f16", choices=KV_CACHE_TYPE_NAMES,
                   help="KV cache type (quantized types imply flash attention)")  # fmt: skip
    p.add_argument("--flash-attn", action="store_true", help="estimate with flash attention")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers offloaded (-1: all)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("backend", help="show what llama.cpp runs on here (CPU, CUDA, Metal…)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_backend)

    p = sub.add_parser("generate", help="stream a reply from a model")
    p.add_argument("--model", help="GGUF file (default: the default model in models/)")
    p.add_argument("--prompt", help="prompt text, or - to read it from stdin")
    p.add_argument("--prompt-file", help="read the prompt from a UTF-8 file")
    p.add_argument("--system", help="system message (chat models only)")
    p.add_argument("--raw", action="store_true", help="send the prompt as is, no chat template")
    p.add_argument("--max-tokens", type=int, default=256, help="longest reply (default 256)")
    p.add_argument(
        "--n-ctx",
        type=int,
        help=f"context size (default {GENERATE_N_CTX}; with --engine: the server's)",
    )
    add_thread_options(p)
    p.add_argument("--gpu-layers", type=int, default=0, help="layers to offload (-1: all)")
    p.add_argument("--kv-type", default="f16", choices=KV_CACHE_TYPE_NAMES, help="KV cache type")
    p.add_argument("--flash-attn", action="store_true", help="use flash attention")
    add_sampling_options(p)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    add_engine_options(p)
    p.set_defaults(func=cmd_generate)

    add_commands(sub)
    add_job_commands(sub)
    add_batch_commands(sub)
    add_snapshot_commands(sub)
    add_calibrate_commands(sub)
    add_bench_commands(sub)
    add_remote_commands(sub)

    add_fetch_commands(sub)
    add_model_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``contextlens-cli``: the environment is read once, here (app/core/config.py)."""
    with config.using():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args: Any = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("error: cancelled", file=sys.stderr)
        return EXIT_CANCELLED
    except BrokenPipeError:  # `contextlens-cli generate ... | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
