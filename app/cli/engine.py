"""The engine a command runs on: the local llama.cpp engine, a server (``--engine URL``), or a
pool of servers running the same model (``--engine`` more than once, or ``--engines FILE``).

Every command that runs a model (``generate``, ``run``, ``compare``, ``batch``) takes the same
options, so the same job runs locally or on a server with one setting changed; ``run``, ``compare``
and ``batch`` also take a pool (``generate`` streams one reply from one server). ``remote info
URL`` prints what a server reports; ``remote key URL`` keeps its API key in the system keyring.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_ENGINE_CRASHED, EXIT_OK, BadInput, fail, warn
from app.cli.documents import model_path_or_default
from app.core.engine.types import DEFAULT_N_CTX
from app.core.textutil import terminal_safe

if TYPE_CHECKING:
    from app.services.job_engine import JobEngine, ServerSpec

LOCAL_N_CTX = DEFAULT_N_CTX  # the local engine's context without --n-ctx (run, compare, batch)


POOL_COMMANDS = ("run", "compare", "batch")  # the commands that take several servers


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """``--engine`` (repeatable: a pool), ``--engines FILE``, ``--smallest-context`` and the
    options of a connection (after the command's own ``--model``)."""
    p.add_argument("--engine", metavar="URL", action="append",
                   help="run on an OpenAI-compatible server (llama-server, python -m "
                        "llama_cpp.server, vLLM) instead of the local llama.cpp engine; --model "
                        "is then optional: the same GGUF, for exact counts and its chat "
                        "template. The API key comes from the keyring (`contextlens-cli remote "
                        "key URL`), or from $CONTEXTLENS_API_KEY for the one server "
                        "$CONTEXTLENS_API_HOST names. Without a scheme, URL is https:// unless "
                        "it is this machine. Run, compare and batch take it more than once: a "
                        "pool of servers running the same model")  # fmt: skip
    p.add_argument("--engines", metavar="FILE",
                   help="run, compare, batch: a pool file, one server URL a line (blank lines "
                        "and # comments ignored), added to the --engine ones")  # fmt: skip
    p.add_argument("--smallest-context", action="store_true",
                   help="a pool whose servers report different context sizes runs every job in "
                        "the smallest (without it such a pool is refused)")  # fmt: skip
    _connection_options(p)


def read_pool_file(path: str) -> list[str]:
    """The server URLs of a pool file: one a line, blank lines and ``#`` comments left out."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise BadInput(f"cannot read the pool file {path}: {reason}") from None
    urls = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    urls = [url for url in urls if url]
    if not urls:
        raise BadInput(f"the pool file {path} names no server")
    return urls


def engine_urls(args: argparse.Namespace) -> list[str]:
    """Every server the options name: the --engine ones (a list, or the one URL of a command
    that takes a single server), then those of --engines FILE."""
    given = getattr(args, "engine", None)
    urls = [given] if isinstance(given, str) else list(given or [])
    pool_file = getattr(args, "engines", None)
    if pool_file:
        urls += read_pool_file(pool_file)
    return urls


def _connection_options(p: argparse.ArgumentParser) -> None:
    from app.core.engine.remote_http import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S

    p.add_argument(
        "--server-model",
        metavar="NAME",
        help="with a server: the model to use (default: the first the server lists)",
    )
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"with a server: seconds to wait for the next piece of a reply "
                        f"(default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    p.add_argument("--retries", type=int, default=DEFAULT_RETRIES,
                   help=f"with a server: tries again after a connection error, waiting longer "
                        f"each time (default {DEFAULT_RETRIES})")  # fmt: skip


def check_remote_args(args: argparse.Namespace) -> None:
    """Refuse, before anything runs, what needs the local engine."""
    from app.core.engine.remote import NO_AUDIT, NO_KV_STATE

    urls = engine_urls(args)
    if isinstance(getattr(args, "engine", None), list) or getattr(args, "engines", None):
        args.engine = urls or None  # the pool file's servers too, for every check after this
        args.engines = None  # read once
    if not urls:
        if getattr(args, "server_model", None):
            raise BadInput("--server-model needs --engine URL")
        if getattr(args, "smallest_context", False):
            raise BadInput("--smallest-context needs servers (--engine URL, more than once)")
        return
    command = getattr(args, "command", None)
    if len(urls) > 1 and command not in POOL_COMMANDS:
        raise BadInput(f"{command or 'this command'} runs on one server: give --engine once "
                       f"(a pool of {len(urls)} is for run, compare and batch)")  # fmt: skip
    if getattr(args, "audit", False):
        raise BadInput(f"--audit needs the local engine: {NO_AUDIT}")
    if getattr(args, "keep_kv", False):
        raise BadInput(f"--keep-kv needs the local engine: {NO_KV_STATE}")
    if args.timeout <= 0:
        raise BadInput("--timeout must be positive")
    if args.retries < 0:
        raise BadInput("--retries cannot be negative")


def server_spec(args: argparse.Namespace, n_ctx: int | None, url: str | None = None
                ) -> ServerSpec:  # fmt: skip
    """The server ``url`` (default: the one ``--engine`` names), with its key (keyring, or the
    environment for the one host it is meant for). Before anything is sent, stderr says when
    that key would go over plain HTTP to another machine, or why ``$CONTEXTLENS_API_KEY`` is
    not sent to this server."""
    from app.core.credentials import api_key, env_key_note
    from app.core.engine.remote_http import key_in_clear, normalize_url
    from app.services.job_engine import ServerSpec

    if url is None:
        urls = engine_urls(args)
        if len(urls) != 1:
            raise BadInput("give one server (--engine URL) for this command")
        url = urls[0]
    key = api_key(url)
    normalized = normalize_url(url)
    for note in (env_key_note(normalized), key_in_clear(normalized, key)):
        if note:
            print(f"warning: {note}", file=sys.stderr, flush=True)
    model = str(Path(args.model).expanduser()) if getattr(args, "model", None) else None
    return ServerSpec(url, api_key=key, n_ctx=n_ctx, model=args.server_model,
                      model_path=model, timeout_s=args.timeout, retries=args.retries)  # fmt: skip


def server_specs(args: argparse.Namespace, n_ctx: int | None) -> list[ServerSpec]:
    """Every server of ``--engine`` and ``--engines``, each with its own key."""
    return [server_spec(args, n_ctx, url) for url in engine_urls(args)]


def connect_remote(args: argparse.Namespace, n_ctx: int | None) -> Any:
    """A RemoteEngine connected to ``--engine`` (ServerError / ValueError when it cannot be)."""
    from app.services.job_engine import connect_remote as connect

    return connect(server_spec(args, n_ctx))


@contextlib.contextmanager
def open_engine(args: argparse.Namespace, settings: Any, *, n_ctx_given: int | None
                ) -> Iterator[JobEngine]:  # fmt: skip
    """The engine the command's options name, loaded or connected; closed afterwards.

    ``settings`` are the local engine's LoadSettings; ``n_ctx_given`` the --n-ctx the person
    gave (None: the server's own)."""
    from app.services.job_engine import JobEngine

    with JobEngine() as session:
        specs = server_specs(args, n_ctx_given)
        if len(specs) > 1:  # a pool: each job on a server that is up, moved when one is lost
            session.connect_pool(specs, smallest_context=args.smallest_context)
        elif specs:
            session.connect(specs[0])
        else:
            model = model_path_or_default(args.model)
            if model is None:
                raise BadInput("no model: pass --model or fetch the default one (`make`)")
            session.load(Path(model), settings)
        yield session


# ----- contextlens-cli remote ------------------------------------------------------------------


def cmd_remote_info(args: argparse.Namespace) -> int:
    from app.core.engine.remote_info import describe
    from app.core.engine.types import EngineError

    try:
        check_remote_args(args)
        engine = connect_remote(args, args.n_ctx)
    except (BadInput, ValueError) as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    except EngineError as exc:
        return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
    with contextlib.closing(engine):
        info = engine.info
        if args.json:
            print(json.dumps(info.as_dict(), indent=2))
        else:
            for line in describe(info):  # what the server said, control characters escaped
                print(terminal_safe(line))
            for warning in info.warnings:
                warn(warning)
    return EXIT_OK


def cmd_remote_key(args: argparse.Namespace) -> int:
    """Keep (or forget) a server's API key in the keyring; the key is read from stdin, so it
    never shows in the shell's history or the process list."""
    from app.core.credentials import CredentialError, forget_api_key, save_api_key
    from app.core.engine.remote_http import normalize_url

    try:
        url = normalize_url(args.engine)
        if args.forget:
            gone = forget_api_key(url)
            print(f"the API key for {url} was removed" if gone else f"no API key kept for {url}",
                  file=sys.stderr)  # fmt: skip
            return EXIT_OK
        if sys.stdin.isatty():
            import getpass

            key = getpass.getpass(f"API key for {url}: ")
        else:
            key = sys.stdin.readline().rstrip("\r\n")
        save_api_key(url, key)
    except (ValueError, CredentialError) as exc:
        return fail(EXIT_BAD_INPUT, str(exc), False)
    print(f"the API key for {url} is kept in the system keyring", file=sys.stderr)
    return EXIT_OK


def add_commands(sub: Any) -> None:
    remote = sub.add_parser("remote", help="an OpenAI-compatible server: what it reports, its key")
    commands = remote.add_subparsers(dest="remote_command", required=True,
                                     parser_class=type(remote))  # fmt: skip
    p = commands.add_parser("info", help="what the server runs, and where each figure comes from")
    p.add_argument("engine", metavar="URL")
    p.add_argument("--model", help="the same model's GGUF here, for exact counts and its template")
    p.add_argument("--n-ctx", type=int, help="the server's context, when it does not report it")
    _connection_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_remote_info)
    p = commands.add_parser("key", help="keep the server's API key in the keyring (from stdin)")
    p.add_argument("engine", metavar="URL")
    p.add_argument("--forget", action="store_true", help="remove the key kept for URL")
    p.set_defaults(func=cmd_remote_key)
