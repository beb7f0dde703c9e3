"""The member id and generation, read from librdkafka in one request (``read_identity``).

They used to take two requests to librdkafka's main thread (``memberid()`` and
``consumer_group_metadata()``), in each rebalance callback; now the member id comes from
the same serialized group metadata as the generation. These tests hold that reading to
what librdkafka itself says, on the real broker, classic and KIP-848.
"""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer
from structlog.testing import capture_logs

from sidecar.kafka import group_calls
from sidecar.kafka.group_calls import identity_of, read_identity


def _joined(bootstrap: str, topic: str, protocol: str, instance: str | None) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"identity-{uuid.uuid4().hex[:8]}",
        "group.protocol": protocol,
    }
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    if instance is not None:
        config["group.instance.id"] = instance
    assigned: list[int] = []
    consumer = Consumer(config)
    consumer.subscribe([topic], on_assign=lambda c, ps: assigned.append(len(ps)))
    deadline = time.monotonic() + 60
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert assigned, "the consumer never joined"
    return consumer


@pytest.mark.parametrize(
    ("protocol", "instance"),
    [("classic", None), ("classic", "pod-0"), ("consumer", None)],
)
def test_the_identity_is_what_librdkafka_says(
    topic_factory: Any, kafka_bootstrap: str, protocol: str, instance: str | None
) -> None:
    before = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "not-joined"})
    try:  # not joined yet: no member id, no generation
        assert read_identity(before) == (None, -1)
    finally:
        before.close()
    consumer = _joined(kafka_bootstrap, topic_factory(2), protocol, instance)
    try:
        member_id, generation = read_identity(consumer) or (None, -1)
        assert member_id and member_id == consumer.memberid()
        assert generation >= 1
    finally:
        consumer.close()


def test_anything_not_in_librdkafkas_format_is_not_an_identity() -> None:
    generation = struct.pack("=i", 4)
    assert identity_of(b"CGMDv2:" + generation + b"g\x00m-1\x00\x01") == ("m-1", 4)
    assert identity_of(b"CGMDv2:" + generation + b"g\x00\x00\x01") == (None, 4)
    assert identity_of(b"CGMDv2:" + generation + b"g\x00m-1\x00\x00pod-0\x00") == ("m-1", 4)
    for junk in (
        b"",
        b"CGMDv1:" + generation + b"g\x00m\x00\x01",
        b"CGMDv2:\x01",
        b"CGMDv2:" + generation + b"g\x00m-1",
    ):
        assert identity_of(junk) is None, junk


def test_a_metadata_format_not_known_still_gives_the_member_id() -> None:
    """librdkafka's serialization is private: a version that changes it must cost the
    generation only. Before the fallback, the member never learned its id (every enforce
    a 409, events without a member id)."""

    class Changed:
        def consumer_group_metadata(self) -> bytes:
            return b"CGMDv3:something else"

        def memberid(self) -> str:
            return "rdkafka-1"

    group_calls._warned.clear()  # the warning is once per process
    with capture_logs() as logs:
        assert read_identity(Changed()) == ("rdkafka-1", -1)  # type: ignore[arg-type]
        assert read_identity(Changed()) == ("rdkafka-1", -1)  # type: ignore[arg-type]
    said = [line for line in logs if "format this sidecar does not know" in line["event"]]
    assert len(said) == 1, logs  # said once, with the generation unknown from then on
