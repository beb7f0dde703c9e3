"""The pure parts of issue 38's fixes: librdkafka's repeats collapsed, the demo's reading
of the environment."""

from __future__ import annotations

import io
import logging

import pytest

from sidecar.demo_checks import check_demo_environment
from sidecar.logs import RepeatedLines
from sidecar.settings import InvalidSettings


def _record(message: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("librdkafka.member", level, __file__, 1, message, args, None)


def test_repeats_pass_once_per_window_with_their_count() -> None:
    now = [100.0]
    lines = RepeatedLines(window=10, clock=lambda: now[0])
    refused = "%s [%s] %s: %s"
    passed = []
    for step in range(300):  # 30 s of a line every 0.1 s, the delay in it changing
        now[0] = 100 + step / 10
        record = _record(refused, "FAIL", "rdkafka#consumer-1", "b", f"refused (after {step}ms)")
        if lines.filter(record):
            passed.append(record.getMessage())
    assert len(passed) == 3
    assert "repeated" not in passed[0]
    assert passed[1].endswith("(repeated 99 times in the 10 s before)")
    # Another line is another kind: it passes at once.
    assert lines.filter(_record("other line"))
    # The same text at another level is another kind too.
    assert lines.filter(_record("other line", level=logging.WARNING))


def test_kinds_are_bounded() -> None:
    lines = RepeatedLines(window=10, max_kinds=2, clock=lambda: 0.0)
    for word in ("a", "b", "c"):
        assert lines.filter(_record(word))
    assert lines.filter(_record("a"))  # forgotten, the oldest: passes again
    assert not lines.filter(_record("c"))


def test_the_demo_takes_its_port_from_the_option_then_the_environment() -> None:
    assert check_demo_environment({}, None, io.StringIO()) == 8080
    assert check_demo_environment({"SIDECAR_API_PORT": "8090"}, None, io.StringIO()) == 8090
    assert check_demo_environment({"SIDECAR_API_PORT": "8090"}, 8093, io.StringIO()) == 8093
    with pytest.raises(InvalidSettings, match="SIDECAR_API_PORT"):
        check_demo_environment({"SIDECAR_API_PORT": "80x"}, None, io.StringIO())


def test_the_demo_names_what_it_ignores_and_refuses_typos() -> None:
    out = io.StringIO()
    check_demo_environment(
        {"SIDECAR_GROUP_ID": "orders", "SIDECAR_KAFKA_SASL_PASSWORD": "x", "PATH": "/bin"},
        None,
        out,
    )
    assert "ignoring SIDECAR_GROUP_ID, SIDECAR_KAFKA_SASL_PASSWORD" in out.getvalue()
    assert "PATH" not in out.getvalue()
    with pytest.raises(InvalidSettings, match=r"did you mean SIDECAR_BOOTSTRAP_SERVERS\?"):
        check_demo_environment({"SIDECAR_BOOTSTRAP_SERVER": "127.0.0.1:19092"}, None, out)
