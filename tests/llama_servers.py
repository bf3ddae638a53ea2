"""Real llama.cpp ``llama-server`` processes for the pool's tests and benchmarks: several started
at once, each on a core of its own when asked, and killed (SIGKILL), hung (SIGSTOP) and woken
(SIGCONT) the way a server fails in the field.

A server pinned to one core with one thread makes a comparison of one server with two fair on a
2-core machine: each does the same work on its own core. :func:`llama_servers` always wakes and
ends every server it started, a stopped one included (a SIGSTOPped process ignores SIGTERM until
it is continued).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.benchmarks.bench_remote import llama_server
from tests.remote_server import free_port, server_env

START_TIMEOUT_S = 120.0
NO_LLAMA_SERVER = "no llama-server here: run packaging/build-llama-server.sh or set LLAMA_SERVER"


def llama_server_binary() -> Path:
    """llama.cpp's server binary (``$LLAMA_SERVER``, the set-up's build, or PATH);
    FileNotFoundError saying how to get one when there is none."""
    found = llama_server()
    if found is None or not found.exists():
        raise FileNotFoundError(NO_LLAMA_SERVER)
    return found


def have_llama_server() -> bool:
    """Whether the tests that start llama-server can run here. Under ``make test``
    ($CONTEXTLENS_REQUIRE_LLAMA_SERVER, exported by the Makefile, whose set-up builds it) always
    True: a missing build then fails those tests, with :data:`NO_LLAMA_SERVER`, instead of
    skipping them unseen."""
    if os.environ.get("CONTEXTLENS_REQUIRE_LLAMA_SERVER") == "1":
        return True
    try:
        llama_server_binary()
    except FileNotFoundError:
        return False
    return True


@dataclass
class LlamaServer:
    """One running llama-server; ``command`` and ``core`` start it again on the same port."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path
    command: list[str] = field(default_factory=list, repr=False)
    core: int | None = None

    def kill(self) -> None:
        """SIGKILL: gone at once, as a crashed or unplugged server is."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGSTOP: hung, not dead. Connections are still accepted by the kernel, nothing is
        answered: only a timeout notices."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def cont(self) -> None:
        """SIGCONT: a stopped server goes on."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        """End it (woken first: a stopped process would not see SIGTERM)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    def start_again(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """A killed server started again with the same command (same port, model and core)."""
        self.terminate()
        self.process = _spawn(self.command, self.log, self.core, append=True)
        _wait_ready(self, timeout_s)


def _spawn(command: list[str], log: Path, core: int | None, *, append: bool = False
           ) -> subprocess.Popen[bytes]:  # fmt: skip
    def pin() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})

    # one system call in the child before exec: safe beside the caller's threads, and the
    # server's own threads, all started later, inherit the core
    with log.open("ab" if append else "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=server_env(),
                                preexec_fn=pin if core is not None else None)  # noqa: PLW1509  # fmt: skip


def _wait_ready(server: LlamaServer, timeout_s: float) -> None:
    """Until /health says the model is loaded (503 while loading); RuntimeError with the end of
    its log when it exits or takes longer than ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = server.log.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"llama-server exited ({server.process.returncode}): {tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/health", timeout=2).is_success:
                return
        time.sleep(0.2)
    server.terminate()
    raise RuntimeError(f"llama-server did not start within {timeout_s:g} s")


def start_llama_servers(model: Path, n: int, logs: Path, *, parallel: int = 2,
                        ctx_per_slot: int = 1024, threads: int = 1,
                        cores: Sequence[int] | None = None, alias: str | None = None,
                        timeout_s: float = START_TIMEOUT_S) -> list[LlamaServer]:  # fmt: skip
    """``n`` llama-servers on ``model``, each on a free port with ``parallel`` slots of
    ``ctx_per_slot`` tokens and ``threads`` threads, server i pinned to ``cores[i]`` when given;
    started at once, returned when every one is ready (all ended again if one fails).
    ``logs`` is a folder: server i writes ``llama-server-i.log`` there."""
    if cores is not None and len(cores) < n:
        raise ValueError(f"{n} servers need {n} cores, {len(cores)} given")
    binary = llama_server_binary()
    logs.mkdir(parents=True, exist_ok=True)
    servers: list[LlamaServer] = []
    for i in range(n):
        port = free_port()
        command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                   "--parallel", str(parallel), "--ctx-size", str(ctx_per_slot * parallel),
                   "--threads", str(threads), "--threads-batch", str(threads),
                   "--no-webui"]  # fmt: skip
        if alias:
            command += ["--alias", alias]
        core = cores[i] if cores is not None else None
        log = logs / f"llama-server-{i}-{port}.log"
        servers.append(LlamaServer(f"http://127.0.0.1:{port}", _spawn(command, log, core), log,
                                   command, core))  # fmt: skip
    try:
        with ThreadPoolExecutor(max_workers=n) as pool:
            list(pool.map(lambda s: _wait_ready(s, timeout_s), servers))
    except BaseException:
        for server in servers:
            server.terminate()
        raise
    return servers


@contextlib.contextmanager
def llama_servers(model: Path, n: int, logs: Path, **options: object
                  ) -> Iterator[list[LlamaServer]]:  # fmt: skip
    """:func:`start_llama_servers`, every server ended afterwards (woken first when stopped)."""
    servers = start_llama_servers(model, n, logs, **options)  # type: ignore[arg-type]
    try:
        yield servers
    finally:
        for server in servers:
            server.terminate()
