"""A real gateway for the tests: LiteLLM's proxy in front of given OpenAI-compatible servers, on a
free loopback port, the way a team puts one address in front of its inference servers.

The proxy is a test-only dependency in a virtual environment of its own (``.venv/gateway``,
installed by ``make setup`` from ``packaging/gateway-requirements.txt``, every package at an exact
version with its hash): its dependencies conflict with the app's. It runs from a config file
written to the test's folder (one model name, one deployment per server, LiteLLM's own routing),
with no database, telemetry off and its cost map read from the package, so nothing leaves the
machine. A gateway answers the OpenAI paths only: llama.cpp's ``/props``, ``/tokenize`` and
``/slots`` stay behind it, which is what the tests of ContextLens behind one check.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.remote_server import free_port

ROOT = Path(__file__).resolve().parents[1]
GATEWAY_VENV = ROOT / ".venv" / "gateway"
MODEL_NAME = "smollm2"  # the one model id the gateway lists, whatever the servers call theirs
START_TIMEOUT_S = 120.0  # about 10 s here: the proxy imports a great deal
NO_GATEWAY = (
    "no gateway here: `make setup` installs LiteLLM's proxy into .venv/gateway "
    "(packaging/gateway-requirements.txt)"
)
# What could reach the network, or read the person's own set-up, is off (LITELLM_MODE=PRODUCTION:
# no .env file is read); what names a database, a key or a proxy is not passed on.
QUIET = {
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_MODE": "PRODUCTION",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "NO_PROXY": "127.0.0.1,localhost",
}
DROPPED = ("DATABASE_URL", "LITELLM_MASTER_KEY", "LITELLM_LICENSE", "OPENAI_API_KEY",
           "OPENAI_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
           "https_proxy", "all_proxy", "REDIS_HOST", "REDIS_URL")  # fmt: skip


def gateway_executable() -> Path | None:
    """The proxy's command in the set-up's venv, or None when it is not installed."""
    found = GATEWAY_VENV / "bin" / "litellm"
    return found if found.is_file() and (GATEWAY_VENV / ".installed").is_file() else None


@dataclass
class Gateway:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    config: Path
    started_s: float  # seconds from the start until it answered

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


def gateway_config(backends: Sequence[str], model_name: str = MODEL_NAME,
                   routing: str = "simple-shuffle") -> dict[str, object]:  # fmt: skip
    """LiteLLM's proxy config: ``model_name`` served by one deployment per server (each its
    OpenAI-compatible API at ``api_base``), spread by ``routing`` ("simple-shuffle",
    "least-busy")."""
    deployments = [{"model_name": model_name,
                    "litellm_params": {"model": f"openai/{model_name}", "api_base": f"{url}/v1",
                                       "api_key": "none"}}
                   for url in backends]  # fmt: skip
    return {"model_list": deployments, "router_settings": {"routing_strategy": routing},
            "litellm_settings": {"telemetry": False}}  # fmt: skip


def start_gateway(backends: Sequence[str], folder: Path, *, model_name: str = MODEL_NAME,
                  routing: str = "simple-shuffle", timeout_s: float = START_TIMEOUT_S
                  ) -> Gateway:  # fmt: skip
    """The proxy in front of ``backends`` on a free port, returned once it answers; its config
    (JSON, which YAML reads) and log are written to ``folder``. FileNotFoundError when the set-up
    has not installed it, RuntimeError with the end of its log when it exits or is slow."""
    command = gateway_executable()
    if command is None:
        raise FileNotFoundError(NO_GATEWAY)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "gateway.yaml"
    config.write_text(json.dumps(gateway_config(backends, model_name, routing), indent=2),
                      encoding="utf-8")  # fmt: skip
    log = folder / "gateway.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in DROPPED} | QUIET
    t0 = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(command), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
             "--num_workers", "1", "--telemetry", "False"],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder,
        )  # fmt: skip
    gateway = Gateway(f"http://127.0.0.1:{port}", process, log, config, 0.0)
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the gateway exited ({process.returncode}): {tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{gateway.url}/v1/models", timeout=2).is_success:
                gateway.started_s = time.monotonic() - t0
                return gateway
        time.sleep(0.2)
    gateway.stop()
    raise RuntimeError(f"the gateway did not answer within {timeout_s:g} s")


@contextlib.contextmanager
def gateway(backends: Sequence[str], folder: Path, **options: object) -> Iterator[Gateway]:
    """:func:`start_gateway`, stopped afterwards."""
    running = start_gateway(backends, folder, **options)  # type: ignore[arg-type]
    try:
        yield running
    finally:
        running.stop()
