"""contextlens-cli snapshots: the version history in the store, and recording runs into it.

``--db PATH`` (after the subcommand) selects the database; the default is the user's one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.cli_common import EXIT_BAD_INPUT, EXIT_OK, fail
from app.core.default_model import sha256_of


def _open(path: str | None) -> Any:
    from app.store.db import StoreError, default_db_path, open_database
    from app.store.repository import Repository

    try:
        db = open_database(Path(path) if path else default_db_path())
    except StoreError as exc:
        raise ValueError(str(exc)) from None
    if db.notice:
        print(f"note: {db.notice}", flush=True, file=sys.stderr)
    return db, Repository(db)


def record_runs(db_path: str | None, doc: Any, model: Path, args: argparse.Namespace,
                results: list[Any]) -> list[int]:  # fmt: skip
    """One session per command, one version per strategy, its run under it; the version ids."""
    db, repo = _open(db_path)
    try:
        document_id = repo.add_document(doc)
        session = repo.create_session(doc.name, document_id)
        prompt = "\n".join(args.question or []) or (args.instruction or "")
        sha = sha256_of(model)
        ids = []
        for result in results:
            version = repo.save_version(
                session, task=result.task, strategy=result.strategy, prompt=prompt,
                model_path=str(model), model_sha256=sha,
                settings={"n_ctx": result.n_ctx, "max_tokens": args.max_tokens},
            )  # fmt: skip
            repo.save_run(version.id, result)
            ids.append(version.id)
        return ids
    finally:
        repo.close()
        db.close()


def cmd_snapshots(args: argparse.Namespace) -> int:
    from app.store.repository import RepositoryError

    try:
        db, repo = _open(args.db)
    except ValueError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    try:
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
            v = repo.get_version(_one_id(args.ids))
            data = {**v.as_dict(), "runs": repo.runs(v.id)}
            print(json.dumps(data, indent=None if args.json else 2))
        elif args.action == "diff":
            if len(args.ids) != 2:
                raise RepositoryError("diff needs two version ids")
            print(repo.diff(args.ids[0], args.ids[1]))
        elif args.action == "rollback":
            v = repo.rollback(_one_id(args.ids))
            print(json.dumps(v.as_dict()) if args.json else f"new version #{v.id} (v{v.number})")
    except RepositoryError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    finally:
        repo.close()
        db.close()
    return EXIT_OK


def _one_id(ids: list[int]) -> int:
    from app.store.repository import RepositoryError

    if len(ids) != 1:
        raise RepositoryError("give exactly one version id")
    return ids[0]


def add_commands(sub: Any) -> None:
    p = sub.add_parser("snapshots", help="the history of prompt versions and runs")
    p.add_argument("action", choices=["list", "show", "diff", "rollback"])
    p.add_argument("ids", nargs="*", type=int, help="version id(s)")
    p.add_argument("--session", type=int, help="list only this session")
    p.add_argument("--db", help="database file (default: the user's history)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_snapshots)
