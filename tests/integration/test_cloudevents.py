"""Every event of a real run, parsed by the official CloudEvents SDK (issue 12.6).

Webhook bodies through the HTTP binding, fleet-topic records through the Kafka binding
(structured mode: ``content-type: application/cloudevents+json``). The group id is
chosen to need percent-encoding in ``source``; ``sequence`` must sort as text the way it
sorts as a number.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.bindings import kafka as ce_kafka

from sidecar.subscriptions import new_secret
from sidecar.tracing import parse_traceparent
from tests.support.kafka import read_topic, unique
from tests.support.sidecars import Sidecar, wait_until

pytestmark = pytest.mark.kafka

# RFC 3986 URI-reference characters, with every % starting a percent-encoded octet.
_URI_REFERENCE = re.compile(r"^(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$")


class RawReceiver:
    """Keeps each POST's headers and body exactly as received, and answers 204."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.posts.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/events"

    @contextmanager
    def running(self) -> Iterator[RawReceiver]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()


def _check_attributes(event: Any, group_id: str) -> str:
    assert event.get_specversion() == "1.0"
    assert event.get_type().startswith(("kafka.partitions.", "kafka.rebalance."))
    source = event.get_source()
    assert _URI_REFERENCE.match(source), source
    parts = urlsplit(source)
    assert parts.scheme == "kafka"
    assert unquote(parts.netloc) == group_id
    sequence = event.get_extension("sequence")
    assert isinstance(sequence, str) and re.fullmatch(r"[0-9]{19}", sequence), sequence
    assert event.get_time() is not None
    data = event.get_data()
    assert isinstance(data, dict) and data["group_id"] == group_id
    # The distributed-tracing extension: a valid W3C traceparent on every event.
    assert parse_traceparent(event.get_extension("traceparent")) is not None
    return sequence


def test_every_webhook_body_and_fleet_record_is_a_valid_cloudevent(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    kafka_bootstrap: str,
) -> None:
    group_id = f"orders eu/west %2F ü-{unique('g')}"  # space, slash, percent, non-ASCII
    topic = topic_factory(2)
    fleet = topic_factory(1)
    receiver = RawReceiver()
    with receiver.running():
        secret = new_secret()
        sidecar = sidecar_factory(
            group_id,
            topic,
            webhooks=[
                {
                    "url": receiver.url,
                    "secret": secret,
                    "mode": "async",
                    "events": [
                        "kafka.partitions.assigned",
                        "kafka.partitions.revoked",
                        "kafka.partitions.lost",
                        "kafka.rebalance.requested",
                    ],
                }
            ],
            extra_env={"SIDECAR_EVENTS_TOPIC": fleet, "SIDECAR_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"},
        )
        sidecar.wait_stable()
        assert sidecar.client.post("/enforce-rebalance", params={"wait": 30}).status_code == 200
        assert sidecar.client.post("/drain").status_code == 200
        journaled = sidecar.history()
        assert len(journaled) >= 4  # assigned, requested, revoked, assigned, revoked
        wait_until(lambda: len(receiver.posts) >= len(journaled), 30, "every webhook")

    sequences = []
    for received, body in receiver.posts:
        assert received["content-type"] == "application/cloudevents+json"
        event = ce_http.from_http_event(ce_http.HTTPMessage(headers=received, body=body))
        sequences.append(_check_attributes(event, group_id))
        # The POST's traceparent is the delivery's span: a child in the event's trace.
        delivery = parse_traceparent(received["traceparent"])
        context = parse_traceparent(event.get_extension("traceparent"))
        assert delivery is not None and context is not None
        assert delivery.trace_id == context.trace_id and delivery.span_id != context.span_id
    assert sequences == sorted(sequences, key=int)  # delivered in order ...
    assert sorted(sequences) == sorted(sequences, key=int)  # ... and text order is numeric
    assert [int(s) for s in sequences] == [int(e["sequence"]) for e in journaled]

    records = read_topic(kafka_bootstrap, fleet, len(journaled))
    assert len(records) == len(journaled), "the fleet topic is missing events"
    fleet_sequences: list[str] = []
    for record in records:
        pairs = record.headers() or []
        assert isinstance(pairs, list)  # a consumed record's headers: (name, value) pairs
        headers: dict[str, bytes] = {
            name: value if isinstance(value, bytes) else str(value).encode()
            for name, value in pairs
        }
        assert headers["content-type"] == b"application/cloudevents+json"
        event = ce_kafka.from_kafka_event(
            ce_kafka.KafkaMessage(headers=headers, key=record.key(), value=record.value() or b"")
        )
        fleet_sequences.append(_check_attributes(event, group_id))
        assert event.get_extension("partitionkey") == group_id  # the record key
    assert fleet_sequences == sequences
