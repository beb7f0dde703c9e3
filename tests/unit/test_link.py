"""What the member believes about its link to Kafka, from librdkafka's errors and answers."""

from __future__ import annotations

import structlog
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from sidecar.link import KafkaLink
from sidecar.metrics import Metrics, StateSources


def link() -> KafkaLink:
    return KafkaLink(
        Metrics(CollectorRegistry()),
        StateSources(pending_events=lambda: 0),
        lambda: structlog.get_logger("test"),
    )


def test_any_broker_answer_brings_the_link_back_without_statistics() -> None:
    kafka = link()
    kafka.healthy()
    kafka.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert not kafka.connected and kafka.error and kafka.unreachable_since is not None
    assert kafka.contact()
    assert kafka.connected and kafka.error is None and kafka.unreachable_since is None
    assert not kafka.contact()  # nothing changed the second time


def test_one_broker_down_does_not_start_the_session_clock() -> None:
    kafka = link()
    kafka.healthy()
    kafka.on_error(KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:1 failed"))
    assert kafka.connected and kafka.unreachable_since is None


def test_a_broker_answer_does_not_hide_a_fatal_error() -> None:
    kafka = link()
    kafka.on_error(KafkaError(KafkaError._FATAL, "fenced", fatal=True))
    kafka.contact()
    assert kafka.fatal is not None and kafka.error is not None
    assert kafka.error.startswith("fatal")
