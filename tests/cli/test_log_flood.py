"""An unreachable Kafka does not flood the log: librdkafka's connection failures (about
19 lines a second for a refused port) are collapsed like the sidecar's own "Kafka
unreachable" warning: the first, then one line with a count per kind every 10 s."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.cli.processes import clean_env, started, text, wait_for
from tests.support.sidecars import free_port

WATCHED = timedelta(seconds=25)


def _lines(log: Path) -> list[dict[str, Any]]:
    lines = []
    for raw in text(log).splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            continue
    return lines


def _at(line: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))


def _librdkafka(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if str(line.get("logger", "")).startswith("librdkafka.")]


def test_librdkafka_repeats_are_collapsed_at_a_bounded_rate(tmp_path: Path) -> None:
    closed = free_port()  # nothing listens there: every connection is refused at once
    env = clean_env(
        SIDECAR_BOOTSTRAP_SERVERS=f"127.0.0.1:{closed}",
        SIDECAR_GROUP_ID="flood-test",
        SIDECAR_TOPICS="flood-test",
        SIDECAR_DATA_DIR=str(tmp_path / "dd"),
        SIDECAR_API_PORT=str(free_port()),
        SIDECAR_ADMIN_PORT="-1",
        SIDECAR_LOG_FORMAT="json",
    )
    log = tmp_path / "sidecar.log"
    with started(["run"], log, env) as sidecar:
        wait_for(
            lambda: any("Connection refused" in line["event"] for line in _librdkafka(_lines(log))),
            "librdkafka's first refused connection",
            sidecar,
        )
        first = _at(next(x for x in _librdkafka(_lines(log)) if "Connection refused" in x["event"]))
        # The window is read from the lines' own timestamps, so a slow machine only makes
        # the wait longer: it waits until a line (the sidecar's own warnings come every
        # 10 s) is stamped past the window.
        wait_for(
            lambda: any(_at(line) > first + WATCHED for line in _lines(log)),
            "a line stamped 25 s after the first refused connection",
            sidecar,
            timeout=300,
        )
    window = [line for line in _librdkafka(_lines(log)) if first <= _at(line) <= first + WATCHED]
    # Uncollapsed: hundreds (one per attempt, ~19 a second). Collapsed: the first of each
    # kind, then at most one per kind every 10 s.
    assert len(window) <= 12, "\n".join(line["event"] for line in window[:40])
    repeated = [line for line in window if "repeated" in line["event"]]
    assert repeated, "no count of the lines collapsed: " + "\n".join(x["event"] for x in window)
