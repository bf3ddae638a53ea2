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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_CONTEXT,
    EXIT_ENGINE_CRASHED,
    EXIT_OK,
    BadInput,
    db_path,
    done_record,
    fail,
)
from app.core.cancelled import Cancelled
from app.services.errors import ServiceError

ACTIONS = ("list", "show", "diff", "rollback", "export", "import")


def open_history(db_arg: str | None) -> Any:
    """The history ``--db`` names (default: the user's); what the person should know about it
    (a damaged file set aside) on stderr first. The caller closes it."""
    from app.services import versions

    opened = versions.open_history(db_path(db_arg))
    if opened.notice:
        print(f"note: {opened.notice}", flush=True, file=sys.stderr)
    return opened


@contextmanager
def history(db_arg: str | None) -> Iterator[Any]:
    """:func:`open_history`, closed afterwards."""
    opened = open_history(db_arg)
    try:
        yield opened
    finally:
        opened.close()


def cmd_snapshots(args: argparse.Namespace) -> int:
    try:
        with history(args.db) as opened:
            return _act(opened, args)
    except ServiceError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)


def _act(store: Any, args: argparse.Namespace) -> int:
    from app.services.history import export_session, import_session

    if args.action == "list":
        if args.session is not None:
            store.session_info(args.session)  # one sentence when there is no such session
        versions = [v.as_dict() for v in store.versions(args.session)]
        if args.json:
            print(json.dumps(versions))
        else:
            sessions = {s["id"]: s for s in store.sessions()}
            for line in tree_lines(versions, sessions):
                print(line)
    elif args.action == "show":
        v = store.version(_ids(args.args, 1)[0])
        data = {**v.as_dict(), "runs": store.runs(v.id), "kv_states": store.kv_states(v.id)}
        print(json.dumps(data, indent=None if args.json else 2))
    elif args.action == "diff":
        a, b = _ids(args.args, 2)
        print(store.diff(a, b))
    elif args.action == "rollback":
        return _rollback(store, args)
    elif args.action == "export":
        if len(args.args) != 2:
            raise BadInput("export needs a session id and a file: export SESSION FILE")
        [session] = _ids(args.args[:1], 1)
        done = export_session(store, session, Path(args.args[1]), include_kv=args.kv).summary
        _report({"type": "exported", "path": str(done.path), "versions": done.versions,
                 "runs": done.runs, "kv_states": done.kv_states, "bytes": done.bytes},
                f"session {session} written to {done.path} ({done.versions} versions, "
                f"{done.runs} runs, {done.kv_states} KV states)", args.json)  # fmt: skip
    elif args.action == "import":
        if len(args.args) != 1:
            raise BadInput("import needs one file: import FILE")
        got = _import(store, Path(args.args[0]), import_session)
        if got is None:
            message = f"Import of {Path(args.args[0]).name} cancelled; nothing was added."
            return fail(EXIT_CANCELLED, message, args.json)
        _report({"type": "imported", "session": got.session_id, "versions": got.versions,
                 "runs": got.runs, "kv_states": got.kv_states},
                f"imported as session {got.session_id} ({got.versions} versions, {got.runs} runs, "
                f"{got.kv_states} KV states)", args.json)  # fmt: skip
    return EXIT_OK


def tree_lines(versions: list[dict[str, Any]], sessions: dict[int, dict[str, Any]]) -> list[str]:
    """Each session's versions as a tree (├─ └─ under the version each was made from), a
    session heading first; the newest version of each session is marked "◀ newest": that is
    where ``run --session`` adds the next one."""
    lines: list[str] = []
    by_session: dict[int, list[dict[str, Any]]] = {}
    for v in versions:
        by_session.setdefault(v["session"], []).append(v)
    for session, members in by_session.items():
        info = sessions.get(session, {})
        lines.append(f"session {session}: {info.get('name', '')} "
                     f"({_count(len(members), 'version')}, {info.get('document') or ''})")
        by_id = {v["id"]: v for v in members}
        newest = max(members, key=lambda v: v["number"])["id"]
        roots = [v for v in members if v["parent"] not in by_id]
        for i, root in enumerate(roots):
            lines += _branch(root, by_id, newest, indent="", last=i == len(roots) - 1)
    return lines


def _branch(v: dict[str, Any], by_id: dict[int, dict[str, Any]], newest: int, *, indent: str,
            last: bool) -> list[str]:  # fmt: skip
    """``v``'s line and, below it, its children's, indented one step further."""
    prompt = next((s.strip() for s in v["prompt"].splitlines() if s.strip()), "")
    prompt = prompt if len(prompt) <= 40 else prompt[:39] + "…"
    settings = v.get("settings") or {}
    mark = "  ◀ newest" if v["id"] == newest else ""
    lines = [
        f"{indent}{'└─' if last else '├─'} #{v['id']} v{v['number']}  {v['created'][:16]}  "
        f"{v['task']} · {v['strategy']} · n_ctx {settings.get('n_ctx', '?')} · max "
        f"{settings.get('max_tokens', '?')}" + (f"  “{prompt}”" if prompt else "") + mark
    ]
    children = [by_id[c] for c in v["children"] if c in by_id]
    for i, child in enumerate(children):
        lines += _branch(child, by_id, newest, indent=indent + ("   " if last else "│  "),
                         last=i == len(children) - 1)  # fmt: skip
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _import(store: Any, path: Path, import_session: Any) -> Any:
    """Import ``path`` on a helper thread, so that Ctrl-C cancels it properly: the rows being
    written are rolled back and nothing is added (None), instead of the interrupt leaving the
    store's writer to finish the import unasked. Errors come back as they were raised; else the
    import's summary."""


    cancel = threading.Event()
    finished = threading.Event()  # waited on, not join(): an interrupted join() can leave
    outcome: dict[str, Any] = {}  # is_alive() False while the thread still runs (CPython)

    def work() -> None:
        try:
            outcome["done"] = import_session(store, path, cancel=cancel).summary
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
    if isinstance(error, Cancelled):
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


def _rollback(store: Any, args: argparse.Namespace) -> int:
    from app.services.history import ResumeOn, rollback

    [old_id] = _ids(args.args, 1)
    on = None
    if args.resume:
        on = ResumeOn(model=Path(args.model) if args.model else None, max_tokens=args.max_tokens)
    done = rollback(store, old_id, resume_on=on)  # NothingToResume: refused, nothing written
    new, spec = done.version, done.resume
    if spec is None:
        print(json.dumps(new.as_dict()) if args.json else f"new version #{new.id} (v{new.number})")
        return EXIT_OK
    result, code = _resume(spec, args.json)
    if result is not None:
        store.record_resumed(new, result)
        if args.json:
            print(json.dumps({**done_record(result), "version": new.as_dict(),
                              "resumed_from": spec.saved_version}), flush=True)  # fmt: skip
        else:
            print(f"\n[{result.finish_reason}] new version #{new.id} (v{new.number}) resumed "
                  f"from the KV state of #{spec.saved_version}: {result.evaluated_tokens} of "
                  f"{result.prompt_tokens:,} prompt tokens evaluated, first token after "
                  f"{result.ttft_s[0] * 1000:.0f} ms", file=sys.stderr)  # fmt: skip
    return code


def _resume(spec: Any, as_json: bool) -> tuple[Any, int]:
    """Load the model with the state's settings, restore it and stream the reply."""
    from app.core.engine.types import EngineError, InsufficientMemoryError
    from app.core.jobs.events import JobFinished, TokenBatch
    from app.services import versions
    from app.services.job_engine import JobEngine

    result = None
    try:
        with JobEngine() as session:
            session.load(Path(spec.state.model_path), versions.resume_settings(spec))
            for ev in session.resume(spec):
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
    p.add_argument("--session", type=int, help="list only this session (as a tree)")
    p.add_argument("--resume", action="store_true",
                   help="rollback: restore the saved KV state and generate without "
                        "re-evaluating the prompt")  # fmt: skip
    p.add_argument("--model", help="rollback --resume: the model, if it has moved")
    p.add_argument("--max-tokens", type=int, help="rollback --resume: longest reply")
    p.add_argument("--kv", action="store_true", help="export: include the saved KV states")
    p.add_argument("--db", help="database file (default: the user's history)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_snapshots)
