"""What the sidecar relies on inside its libraries, beyond their documented API.

Each coupling is justified where it lives; this module pins what it relies on to the
versions in ``constraints.txt``, so a dependency upgrade that changes one of them fails
here, loudly and by name, rather than somewhere in a daemon under load:

* confluent-kafka's ``Handle`` layout and librdkafka's queue calls (``sidecar.kafka.wakeup``,
  the only place ``ctypes`` is imported);
* librdkafka's binary group metadata and identity (``sidecar.kafka.group_calls``);
* uvicorn's ``Server.main_loop``/``on_tick``/``capture_signals`` (``sidecar.daemon``)
  and ``H11Protocol`` internals (``sidecar.http_protocol``);
* pydantic-settings' ``_load_env_vars``, ``parse_env_vars`` and ``_build_sources``
  (``sidecar.settings_sources``) and python-dotenv's parser.

Pure: it imports and inspects, it opens nothing.
"""

from __future__ import annotations

import ast
import inspect
import re
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SIDECAR = REPO / "sidecar"


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


@pytest.mark.parametrize(
    "distribution",
    ["confluent-kafka", "uvicorn", "h11", "pydantic-settings", "python-dotenv"],
)
def test_the_coupled_libraries_are_the_pinned_versions(distribution: str) -> None:
    pins = _pins()
    assert distribution in pins, f"{distribution} is coupled to its internals: pin it"
    installed = metadata.version(distribution)
    assert installed == pins[distribution], (
        f"{distribution} {installed} is installed, the couplings were checked against "
        f"{pins[distribution]} (constraints.txt): re-check this module's contracts, then "
        "move the pin"
    )


def test_ctypes_is_imported_in_one_module_only() -> None:
    importers = []
    for path in sorted(SIDECAR.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(name == "ctypes" or name.startswith("ctypes.") for name in names):
                importers.append(path.relative_to(REPO).as_posix())
    assert importers == ["sidecar/kafka/wakeup.py"]


def test_confluent_kafka_handle_starts_with_the_rd_kafka_pointer() -> None:
    """``sidecar.kafka.wakeup`` reads ``rd_kafka_t *`` right after the object header of
    confluent-kafka's ``Handle`` (every 2.x release); the struct must at least hold it."""
    import confluent_kafka

    from sidecar.kafka import wakeup

    assert object.__basicsize__ == wakeup._RK_OFFSET
    assert confluent_kafka.Consumer.__basicsize__ >= wakeup._RK_OFFSET + 8
    version, _ = confluent_kafka.libversion()
    assert version.startswith("2."), "the Handle layout is that of confluent-kafka 2.x"


def test_uvicorn_server_loop_hooks_are_there() -> None:
    import uvicorn

    assert inspect.iscoroutinefunction(uvicorn.Server.main_loop)
    on_tick = inspect.signature(uvicorn.Server.on_tick)
    assert inspect.iscoroutinefunction(uvicorn.Server.on_tick)
    assert list(on_tick.parameters) == ["self", "counter"]
    assert callable(uvicorn.Server.capture_signals)
    assert "should_exit" in inspect.getsource(uvicorn.Server.main_loop)


def test_uvicorn_h11_protocol_has_what_the_deadline_overrides() -> None:
    from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

    for method in ("connection_made", "data_received", "on_response_complete", "connection_lost"):
        assert callable(getattr(H11Protocol, method)), method
    init = inspect.getsource(H11Protocol.__init__)
    for attribute in ("self.cycle", "self.conn", "self.loop", "self.client"):
        assert attribute in init, attribute
    cycle = inspect.getsource(RequestResponseCycle.__init__)
    for attribute in ("self.more_body", "self.waiting_for_100_continue"):
        assert attribute in cycle, attribute
    import h11

    assert hasattr(h11.Connection, "they_are_waiting_for_100_continue")


def test_pydantic_settings_source_hooks_are_there() -> None:
    from pydantic_settings import BaseSettings, DotEnvSettingsSource, EnvSettingsSource
    from pydantic_settings.sources.utils import parse_env_vars

    assert list(inspect.signature(parse_env_vars).parameters)[:4] == [
        "env_vars",
        "case_sensitive",
        "ignore_empty",
        "parse_none_str",
    ]
    for source in (EnvSettingsSource, DotEnvSettingsSource):
        assert callable(source._load_env_vars), source
    assert callable(DotEnvSettingsSource._read_env_file)
    assert "dotenv_filtering" in inspect.signature(DotEnvSettingsSource.__init__).parameters
    assert "_build_sources" in inspect.signature(BaseSettings.__init__).parameters


def test_python_dotenv_parser_reports_errors_per_binding() -> None:
    import io

    from dotenv.parser import parse_stream

    bindings = list(parse_stream(io.StringIO("A=1\nB='open\n")))
    assert [binding.error for binding in bindings] == [False, True]
    assert bindings[1].original.line == 2
