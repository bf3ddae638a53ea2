"""contextlens-cli snapshots: the version history in the store, and recording runs into it.

``--db PATH`` (after the subcommand) selects the database; the default is the user's one.
``rollback ID --resume`` also puts the version's saved KV state back into the engine and
generates its reply again without evaluating the prompt (``run --keep-kv`` saves such states).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

from app.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_CONTEXT,
    EXIT_ENGINE_CRASHED,
    EXIT_OK,
    BadInput,
    done_record,
    fail,
)
from app.core.default_model import sha256_of

ACTIONS = ("list", "show", "diff", "rollback", "export", "import")


def _open(path: str | None) -> Any:
    from app.store.db import StoreError, default_db_path, open_database
    from app.store.repository import Repository

    try:
        db = open_database(Path(path) if path else default_db_path())
    except StoreError as exc:
        raise BadInput(str(exc)) from None
    if db.notice:
        print(f"note: {db.notice}", flush=True, file=sys.stderr)
    return db, Repository(db)


def check_writable(db_path: str | None) -> None:
    """BadInput now, before a long run, when its results could not be recorded."""
    db, repo = _open(db_path)
    repo.close()
    db.close()
    if db.read_only:
        raise BadInput(f"{db.path.name} is read-only; the run could not be recorded")


def record_runs(
    db_path: str | None,
    doc: Any,
    args: argparse.Namespace,
    results: list[Any],
    *,
    model: str,
    model_sha256: str,
    states: dict[int, Any] | None = None,
) -> list[int]:
    """One session per command, one version per strategy with its run (and KV state), all in
    one transaction; the version ids. ``model`` is the GGUF's path, or a server's "URL model"
    (``--engine``; the address only, never a key)."""
    from app.store.repository import Entry

    entries = []
    for i, result in enumerate(results):
        content = version_content(args, result.task, result.strategy, n_ctx=result.n_ctx,
                                  model=model, model_sha256=model_sha256)  # fmt: skip
        state = (states or {}).get(i)
        entries.append(Entry(content, result, state, len(result.final_prompt)))
    db, repo = _open(db_path)
    try:
        return repo.record(doc, doc.name, entries)
    finally:
        repo.close()
        db.close()


def version_content(args: argparse.Namespace, task: str, strategy: str, *, n_ctx: int,
                    model: str, model_sha256: str) -> dict[str, Any]:  # fmt: skip
    """What a version of a command's job records; two runs with equal content did the same job
    (a batch skips a document it finds done so). The engine: "local", or the server's address;
    the sampling: every field (app.core.sampling.stored), so a run sampled otherwise differs."""
    from app.cli.sampling import sampling_from_args
    from app.core.sampling import stored

    return {"task": task, "strategy": strategy,
            "prompt": "\n".join(args.question or []) or (args.instruction or ""),
            "model_path": model, "model_sha256": model_sha256,
            "settings": {"n_ctx": n_ctx, "max_tokens": args.max_tokens,
                         "engine": getattr(args, "engine", None) or "local",
                         "sampling": stored(sampling_from_args(args))}}  # fmt: skip


def stored_runs(db_path: str | None, version_ids: list[int]) -> list[dict[str, Any]]:
    """The last run recorded under each version, read back from the store (for ``--audit``)."""
    db, repo = _open(db_path)
    try:
        return [repo.runs(v)[-1] for v in version_ids]
    finally:
        repo.close()
        db.close()


def cmd_snapshots(args: argparse.Namespace) -> int:
    from app.store.archive import ArchiveError
    from app.store.db import StoreError
    from app.store.repository import RepositoryError

    try:
        db, repo = _open(args.db)
    except BadInput as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    try:
        return _act(repo, args)
    except (BadInput, RepositoryError, ArchiveError, StoreError) as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    finally:
        repo.close()
        db.close()


def _act(repo: Any, args: argparse.Namespace) -> int:
    from app.store.archive import export_session, import_session

    if args.action == "list":
        versions = [v.as_dict() for v in repo.history(args.session)]
        if args.json:
            print(json.dumps(versions))
        for v in [] if args.json else versions:
            parent = f" (from {v['parent']})" if v["parent"] else ""
            print(
                f"#{v['id']:<5} session {v['session']:<4} v{v['number']:<3} "
                f"{v['created'][:19]}  {v['task']:9s} {v['strategy']:10s}{parent}"
            )
    elif args.action == "show":
        v = repo.get_version(_ids(args.args, 1)[0])
        data = {**v.as_dict(), "runs": repo.runs(v.id), "kv_states": repo.kv_states(v.id)}
        print(json.dumps(data, indent=None if args.json else 2))
    elif args.action == "diff":
        a, b = _ids(args.args, 2)
        print(repo.diff(a, b))
    elif args.action == "rollback":
        return _rollback(repo, args)
    elif args.action == "export":
        if len(args.args) != 2:
            raise BadInput("export needs a session id and a file: export SESSION FILE")
        [session] = _ids(args.args[:1], 1)
        done = export_session(repo, session, Path(args.args[1]), include_kv=args.kv)
        _report({"type": "exported", "path": str(done.path), "versions": done.versions,
                 "runs": done.runs, "kv_states": done.kv_states, "bytes": done.bytes},
                f"session {session} written to {done.path} ({done.versions} versions, "
                f"{done.runs} runs, {done.kv_states} KV states)", args.json)  # fmt: skip
    elif args.action == "import":
        if len(args.args) != 1:
            raise BadInput("import needs one file: import FILE")
        got = _import(repo, Path(args.args[0]), import_session)
        if got is None:
            message = f"Import of {Path(args.args[0]).name} cancelled; nothing was added."
            return fail(EXIT_CANCELLED, message, args.json)
        _report({"type": "imported", "session": got.session_id, "versions": got.versions,
                 "runs": got.runs, "kv_states": got.kv_states},
                f"imported as session {got.session_id} ({got.versions} versions, {got.runs} runs, "
                f"{got.kv_states} KV states)", args.json)  # fmt: skip
    return EXIT_OK


def _import(repo: Any, path: Path, import_session: Any) -> Any:
    """Import ``path`` on a helper thread, so that Ctrl-C cancels it properly: the rows being
    written are rolled back and nothing is added (None), instead of the interrupt leaving the
    store's writer to finish the import unasked. Errors come back as they were raised."""
    from app.store.archive import ArchiveCancelled

    cancel = threading.Event()
    finished = threading.Event()  # waited on, not join(): an interrupted join() can leave
    outcome: dict[str, Any] = {}  # is_alive() False while the thread still runs (CPython)

    def work() -> None:
        try:
            outcome["done"] = import_session(repo, path, cancel=cancel)
        except BaseException as exc:  # handed to the main thread below
            outcome["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=work, name="snapshots-import", daemon=True).start()
    while not finished.is_set():
        try:
            finished.wait(0.2)
        except KeyboardInterrupt:
            cancel.set()  # heard within a batch of rows; the loop waits for the rollback
    error = outcome.get("error")
    if isinstance(error, ArchiveCancelled):
        return None
    if error is not None:
        raise error
    return outcome["done"]


def _report(data: dict[str, Any], line: str, as_json: bool) -> None:
    print(json.dumps(data) if as_json else line, flush=True)


def _ids(values: list[str], n: int) -> list[int]:
    if len(values) != n:
        raise BadInput("give exactly one id" if n == 1 else f"give exactly {n} version ids")
    try:
        return [int(v) for v in values]
    except ValueError:
        raise BadInput(f"an id is a number, not {values}") from None


def _rollback(repo: Any, args: argparse.Namespace) -> int:
    [old_id] = _ids(args.args, 1)
    if not args.resume:
        v = repo.rollback(old_id)
        print(json.dumps(v.as_dict()) if args.json else f"new version #{v.id} (v{v.number})")
        return EXIT_OK
    old = repo.get_version(old_id)
    server = old.settings.get("engine", "local")
    if server != "local":
        raise BadInput(
            f"version {old_id} ran on the server {server}, which keeps no KV state to resume "
            "from; roll back without --resume, then run it again (with --engine)"
        )
    model = Path(args.model or old.model_path)
    if not model.is_file():
        raise BadInput(f"the model of version {old_id} is not at {model}; pass --model")
    saved = repo.kv_state(old_id, model_sha256=sha256_of(model), model_path=str(model))
    if saved is None:
        raise BadInput(
            f"version {old_id} has no saved KV state for {model.name} "
            "(run it with --keep-kv to save one); nothing was changed"
        )
    new = repo.rollback(old_id)
    sources = repo.output_sources(saved.version)
    max_tokens = args.max_tokens or int(old.settings.get("max_tokens", 256))
    result, code = _resume(saved, old, sources, max_tokens, args.json)
    if result is not None:
        repo.save_run(new.id, result)
        if args.json:
            print(json.dumps({**done_record(result), "version": new.as_dict(),
                              "resumed_from": saved.version}), flush=True)  # fmt: skip
        else:
            print(f"\n[{result.finish_reason}] new version #{new.id} (v{new.number}) resumed "
                  f"from the KV state of #{saved.version}: {result.evaluated_tokens} of "
                  f"{result.prompt_tokens:,} prompt tokens evaluated, first token after "
                  f"{result.ttft_s[0] * 1000:.0f} ms", file=sys.stderr)  # fmt: skip
    return code


def _resume(saved: Any, old: Any, sources: tuple[tuple[int, int], ...], max_tokens: int,
            as_json: bool) -> tuple[Any, int]:  # fmt: skip
    """Load the model with the state's settings, restore it and stream the reply."""
    from app.core.engine.host import EngineHost
    from app.core.engine.types import EngineError, InsufficientMemoryError, LoadSettings
    from app.core.jobs.tasks import JobFinished, TokenBatch, resume
    from app.core.sampling import from_version

    cache = saved.state.kv_cache_type
    settings = LoadSettings(n_ctx=saved.state.n_ctx, kv_cache_type=cache,
                            flash_attn=cache not in ("f16", "f32", "bf16"))  # fmt: skip
    result = None
    try:
        with EngineHost() as host:
            host.load(Path(saved.state.model_path), settings)
            events = resume(host, saved.state, saved.prompt_tokens, task=old.task,
                            strategy=old.strategy, max_tokens=max_tokens, sources=sources,
                            sampling=from_version(old.settings))  # fmt: skip
            for ev in events:
                if isinstance(ev, TokenBatch) and not as_json:
                    print(ev.text, end="", flush=True)
                elif isinstance(ev, JobFinished):
                    result = ev.result
    except KeyboardInterrupt:
        return None, fail(EXIT_CANCELLED, "cancelled", as_json)
    except InsufficientMemoryError as exc:
        return None, fail(EXIT_CONTEXT, f"does not fit: {exc}", as_json)
    except EngineError as exc:
        return None, fail(EXIT_ENGINE_CRASHED, str(exc), as_json)
    assert result is not None
    if result.error:
        return result, fail(EXIT_ENGINE_CRASHED, result.error, as_json)
    return result, EXIT_OK


def add_commands(sub: Any) -> None:
    p = sub.add_parser("snapshots", help="the history of prompt versions and runs")
    p.add_argument("action", choices=ACTIONS)
    p.add_argument(
        "args",
        nargs="*",
        help="show ID | diff A B | rollback ID | export SESSION FILE | import FILE",
    )
    p.add_argument("--session", type=int, help="list only this session")
    p.add_argument("--resume", action="store_true",
                   help="rollback: restore the saved KV state and generate without "
                        "re-evaluating the prompt")  # fmt: skip
    p.add_argument("--model", help="rollback --resume: the model, if it has moved")
    p.add_argument("--max-tokens", type=int, help="rollback --resume: longest reply")
    p.add_argument("--kv", action="store_true", help="export: include the saved KV states")
    p.add_argument("--db", help="database file (default: the user's history)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_snapshots)
