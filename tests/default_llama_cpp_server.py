"""llama-cpp-python's server with its own defaults, as a person starts it (``python -m
llama_cpp.server --model M``): unlike tests/remote_server.py's, it cuts the reply it is streaming
short as soon as another request arrives (``--interrupt_requests`` is True by default)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from app.core.engine.threads import default_threads
from tests.remote_server import ALIAS, Server, free_port, server_env


@contextlib.contextmanager
def default_server(model: Path, log: Path, *, n_ctx: int = 2048,
                   timeout_s: float = 120) -> Iterator[Server]:  # fmt: skip
    """The server on a free loopback port with nothing but the model, its alias, the address,
    the context and the threads given; stopped afterwards."""
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias",
           ALIAS, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
           "--n_threads", str(default_threads())]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                   env=server_env())
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the test server exited: "
                                   f"{log.read_text(errors='replace')[-2000:]}")  # fmt: skip
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.url}/v1/models", timeout=2).is_success:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test server did not start within {timeout_s:g} s")
            time.sleep(0.2)
        yield server
    finally:
        server.stop()
