"""A real OpenAI-compatible server on loopback for the remote-engine tests: llama-cpp-python's own
(``python -m llama_cpp.server``) on the default model, in a child process of its own."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.core.engine.threads import GOMP_SPINCOUNT, default_threads

ALIAS = "smollm2"  # the model id the server lists
SERVER_N_CTX = 1024  # the context of the server the tests share (tests/conftest.py: server)


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL: the server vanishes as a crashed or unplugged one does."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def server_env() -> dict[str, str]:
    """The test server's environment: OpenMP's barrier spin bounded as the engine's is
    (app/core/engine/threads.py), so the suite's server does not collapse beside a busy core
    (its threads wait for each other after every graph node)."""
    return {**os.environ, "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT", GOMP_SPINCOUNT)}


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(model: Path, log: Path, *, n_ctx: int = 2048, api_key: str | None = None,
                 threads: int | None = None, port: int | None = None,
                 timeout_s: float = 120) -> Server:  # fmt: skip
    """Start the server (on ``port``, else a free one) and wait until it lists its model; it
    queues requests (one at a time) instead of cutting the running one short when another
    arrives."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
           "--model_alias", ALIAS, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(n_ctx), "--n_threads", str(threads or default_threads()),
           "--interrupt_requests", "False"]  # fmt: skip
    if api_key:
        cmd += ["--api_key", api_key]
    out = log.open("wb")
    process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=server_env())
    server = Server(f"http://127.0.0.1:{port}", process, log)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the test server exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{server.url}/v1/models", headers=headers, timeout=2).is_success:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"the test server did not start within {timeout_s:g} s")


@contextlib.contextmanager
def running_server(model: Path, log: Path, **options: object) -> Iterator[Server]:
    server = start_server(model, log, **options)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
