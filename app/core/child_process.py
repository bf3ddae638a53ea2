"""How the app starts its own Python children: never with the working directory on their path.

``python -m MODULE`` puts the current directory first on ``sys.path``, so an engine started from
a folder that holds its own ``app/__init__.py`` (a checkout of something else, a download) would
import that file instead of the app. Every child of the app (the engine host, the chat-template
renderer, the planning process) is started with :func:`module_command` and :func:`child_env`:
``-P`` keeps the directory off the path, and the inherited ``PYTHONPATH`` loses its empty and
relative entries (which Python resolves against the working directory too).

A packaged build (PyInstaller) has the app itself as ``sys.executable``: it takes no interpreter
flags and never searches the working directory, and ``packaging/entry_child.py`` runs the
``-m app.…`` command line as Python would.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import app


def is_frozen() -> bool:
    """True in the packaged build, where ``sys.executable`` is the app, not Python."""
    return bool(getattr(sys, "frozen", False))


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs ``module`` (one of the app's) as a child process."""
    if is_frozen():
        return [sys.executable, "-m", module, *args]
    return [sys.executable, "-P", "-m", module, *args]


def package_root() -> str:
    """The folder that holds the ``app`` package this process runs."""
    return str(Path(app.__file__).resolve().parent.parent)


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: ``base`` (this process's), with ``PYTHONPATH`` naming this
    app's package root first and only absolute folders, and ``PYTHONSAFEPATH`` set (so a Python
    the child starts in turn keeps the working directory off its path too)."""
    env = dict(os.environ if base is None else base)
    paths = [package_root(), *env.get("PYTHONPATH", "").split(os.pathsep)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if os.path.isabs(p)))
    env["PYTHONSAFEPATH"] = "1"
    return env


# What a child that parses hostile files needs of the environment to start Python and name its
# temporary files; nothing else (API keys, tokens, the app's settings) goes to it.
_MINIMAL = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TEMP", "TMP", "SYSTEMROOT")


def minimal_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """:func:`child_env` reduced to what starting Python needs: for a child that reads hostile
    files (a document reader), which must not see ``CONTEXTLENS_API_KEY`` or ``HF_TOKEN``."""
    env = child_env(base)
    return {k: v for k, v in env.items() if k in _MINIMAL or k in ("PYTHONPATH", "PYTHONSAFEPATH")}
