"""The engine's API (app/core/engine/api.py) is what both engines implement: the engine host and
the server's RemoteEngine have every method of ``Engine`` and ``ResumableEngine`` with the same
parameters (names and kinds), the host every method of ``LocalEngine`` too, and the scripted
engine the unit tests drive jobs with satisfies the protocol."""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import pytest

from app.core.engine import api
from app.core.engine.host import EngineHost
from app.core.engine.remote import RemoteEngine
from app.core.engine.remote_http import Connection
from tests.core.fake_engine import ReportingEngine

pytestmark = pytest.mark.unit


def methods(protocol: type) -> dict[str, Any]:
    """The methods a protocol declares, its bases' included."""
    found: dict[str, Any] = {}
    for cls in reversed(protocol.__mro__):
        if cls is Protocol or not getattr(cls, "_is_protocol", False):
            continue
        found.update({name: value for name, value in vars(cls).items()
                      if inspect.isfunction(value) and not name.startswith("_")})  # fmt: skip
    return found


def shape(function: Any) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


def test_the_protocols_declare_the_whole_api() -> None:
    engine = set(methods(api.Engine))
    assert engine == {"tokenize", "detokenize", "apply_chat_template", "generate",
                      "generate_lanes", "kv_usage", "kv_tokens", "remove", "cancel",
                      "close"}  # fmt: skip
    assert set(methods(api.ResumableEngine)) == engine | {"save_state", "restore_state"}
    assert set(methods(api.LocalEngine)) > set(methods(api.ResumableEngine))


@pytest.mark.parametrize("engine", [EngineHost, RemoteEngine], ids=lambda c: c.__name__)
@pytest.mark.parametrize("protocol", [api.Engine, api.ResumableEngine],
                         ids=lambda p: p.__name__)  # fmt: skip
def test_both_engines_have_every_method_with_the_same_parameters(
    engine: type, protocol: type
) -> None:
    for name, declared in methods(protocol).items():
        implemented = getattr(engine, name, None)
        assert callable(implemented), f"{engine.__name__} lacks {name}"
        assert shape(implemented) == shape(declared), (
            f"{engine.__name__}.{name}{inspect.signature(implemented)} is not "
            f"{protocol.__name__}.{name}{inspect.signature(declared)}"
        )


def test_the_engine_host_has_the_local_engines_methods_too() -> None:
    for name, declared in methods(api.LocalEngine).items():
        assert shape(getattr(EngineHost, name)) == shape(declared), name


def test_instances_satisfy_the_runtime_checkable_protocols() -> None:
    host = EngineHost()  # no child yet: one starts with the first load
    try:
        assert isinstance(host, api.LocalEngine)
        assert isinstance(host, api.ResumableEngine) and isinstance(host, api.Engine)
    finally:
        host.close()
    remote = RemoteEngine(Connection("http://127.0.0.1:9"))  # never connected
    try:
        assert isinstance(remote, api.ResumableEngine)
        assert not isinstance(remote, api.LocalEngine)  # no model loads through a server
    finally:
        remote.close()


def test_the_scripted_engine_of_the_unit_tests_is_an_engine() -> None:
    assert isinstance(ReportingEngine(), api.Engine)
    assert not isinstance(object(), api.Engine)
