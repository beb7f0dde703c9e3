"""Failures a real broker produces on demand: fencing (fatal), a fleet topic that is missing."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.kafka import read_topic, unique
from tests.support.sidecars import Sidecar, free_port, wait_until

pytestmark = pytest.mark.kafka


def test_a_fenced_static_member_reports_a_fatal_error_and_stays_up(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    """Two sidecars with one group.instance.id: the broker fences the older (a fatal error)."""
    topic = topic_factory(2)
    first = sidecar_factory(group_id, topic, instance_id="twin", name="first")
    first.wait_stable()
    sidecar_factory(group_id, topic, instance_id="twin", name="second")

    wait_until(lambda: "fatal" in (first.assignment().get("error") or ""), 60, "fenced")
    assert first.running
    assert first.client.get("/healthz").status_code == 200
    metrics = first.client.get("/metrics").text
    assert 'rebalance_sidecar_kafka_errors_total{error="_FATAL"}' in metrics
    assert "consumer failed fatally; creating a new one" in first.logs()


def test_fleet_topic_receives_every_event_keyed_by_group(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
) -> None:
    topic = topic_factory(2)
    fleet = topic_factory(1)
    sidecar = sidecar_factory(group_id, topic, extra_env={"SIDECAR_EVENTS_TOPIC": fleet})
    sidecar.wait_stable()
    assert sidecar.client.post("/enforce-rebalance", params={"wait": 30}).status_code == 200
    journaled = [e["id"] for e in sidecar.history()]

    seen = [
        (record.key(), json.loads(record.value() or b"{}"))
        for record in read_topic(kafka_bootstrap, fleet, len(journaled), 30)
    ]
    assert [e["id"] for _, e in seen][: len(journaled)] == journaled
    assert {key for key, _ in seen} == {group_id.encode()}


def test_a_missing_fleet_topic_never_holds_up_the_group(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    topic = topic_factory(2)
    sidecar = sidecar_factory(
        group_id,
        topic,
        extra_env={
            "SIDECAR_EVENTS_TOPIC": "no-such-topic-here",
            "SIDECAR_KAFKA_MESSAGE_TIMEOUT_MS": "2000",
        },
    )
    sidecar.wait_stable()
    response = sidecar.client.post("/enforce-rebalance", params={"wait": 30})
    assert response.status_code == 200  # the rebalance did not wait for the fleet topic
    assert len(sidecar.history()) == 4  # the local journal has everything
    wait_until(
        lambda: (
            'rebalance_sidecar_fleet_events_total{outcome="failed"}'
            in sidecar.client.get("/metrics").text
        ),
        60,
        "fleet failures counted",
    )


def test_librdkafka_lines_come_out_in_the_sidecars_log_format(tmp_path: Path) -> None:
    """With nothing listening at the bootstrap address librdkafka complains at once. Its
    lines must reach the log collector as the sidecar's JSON lines (logger
    ``librdkafka.member``, a level), not as raw ``%3|1795...|FAIL|...`` lines on stderr,
    which break a JSON log pipeline."""
    sidecar = Sidecar(
        f"127.0.0.1:{free_port()}", unique("group"), "t", tmp_path / "nobody", name="nobody"
    ).start()
    try:
        wait_until(
            lambda: '"logger": "librdkafka.member"' in sidecar.logs(), 30, "a librdkafka line"
        )
    finally:
        sidecar.stop()
    lines = sidecar.log_path.read_text().splitlines()
    raw = [line for line in lines if re.match(r"^%\d\|", line)]
    assert raw == [], raw[:3]
    kafka = [json.loads(line) for line in lines if '"librdkafka.member"' in line]
    assert all(
        entry["level"] in ("debug", "info", "warning", "error", "critical") for entry in kafka
    )
    assert any("Connect to" in entry["event"] or "refused" in entry["event"] for entry in kafka)
