"""What names a server to run jobs on: its own module, so the session (job_engine.py) and the pool
of servers (server_pool.py), which builds on sessions, both use it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.engine.remote_http import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class ServerSpec:
    """A server to run jobs on (the key stays in memory, never in settings or the history)."""

    url: str
    api_key: str | None = field(default=None, repr=False)
    n_ctx: int | None = None  # None: the server's own
    model: str | None = None  # the server's model id; None: the first it lists
    model_path: str | None = None  # the same model's GGUF here, for exact counts and template
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
