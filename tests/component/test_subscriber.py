"""The subscriber kit (sidecar/subscriber/) over real HTTP: signatures, dedup, dispatch."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from sidecar.delivery import sign as sidecar_sign
from sidecar.subscriber import (
    Assigned,
    EventInfo,
    InvalidSignature,
    Offset,
    Partition,
    Subscriber,
    serve,
    verify,
)

SECRET = "whsec_" + "a2l0LXRlc3Qtc2VjcmV0LTEyMzQ1Njc4OTA="


class Recorder:
    """A listener that records its calls and hands back positions on revoke."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any], EventInfo]] = []
        self.positions: dict[Partition, int] = {}

    def on_assigned(self, partitions: list[Assigned], info: EventInfo) -> None:
        self.calls.append(("assigned", partitions, info))
        for p in partitions:
            if p.offset is not None:
                self.positions[p.tp] = p.offset

    def on_revoked(self, partitions: list[Partition], info: EventInfo) -> Iterable[Offset]:
        self.calls.append(("revoked", partitions, info))
        return [
            Offset(tp.topic, tp.partition, self.positions[tp])
            for tp in partitions
            if tp in self.positions
        ]

    def on_lost(self, partitions: list[Partition], info: EventInfo) -> None:
        self.calls.append(("lost", partitions, info))


class Endpoint:
    def __init__(self) -> None:
        self.listener = Recorder()
        self.subscriber = Subscriber(SECRET, self.listener)
        self.server = serve(self.subscriber, "127.0.0.1", 0)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        port = self.server.server_address[1]
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        self.sequence = 0

    def event(
        self,
        kind: str,
        partitions: list[dict[str, Any]],
        assignment: list[dict[str, Any]],
        *,
        generation: int = 5,
        event_id: str | None = None,
    ) -> dict[str, Any]:
        self.sequence += 1
        return {
            "specversion": "1.0",
            "id": event_id or str(uuid.uuid4()),
            "source": "kafka://orders/worker-0",
            "type": f"kafka.partitions.{kind}",
            "time": datetime.now(UTC).isoformat(),
            "sequence": f"{self.sequence:020d}",  # zero-padded, as the contract allows
            "datacontenttype": "application/json",
            "data": {
                "group_id": "orders",
                "member_id": "rdkafka-1",
                "group_instance_id": None,
                "generation_id": generation,
                "protocol": "eager",
                "partitions": partitions,
                "assignment": assignment,
                "reason": None,
            },
        }

    def post(self, event: dict[str, Any], signer: str = "sidecar") -> httpx.Response:
        body = json.dumps(event).encode()
        now = int(time.time())
        if signer == "sidecar":
            signature = sidecar_sign(SECRET, event["id"], now, body)
        else:
            signature = Webhook(SECRET).sign(
                event["id"], datetime.fromtimestamp(now, UTC), body.decode()
            )
        headers = {
            "content-type": "application/cloudevents+json",
            "webhook-id": event["id"],
            "webhook-timestamp": str(now),
            "webhook-signature": signature,
        }
        return self.client.post("/rebalance", content=body, headers=headers)

    def close(self) -> None:
        self.client.close()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    running = Endpoint()
    yield running
    running.close()


P0 = {"topic": "orders", "partition": 0}
P1 = {"topic": "orders", "partition": 1}


@pytest.mark.parametrize("signer", ["sidecar", "standardwebhooks"])
def test_signed_events_are_accepted(endpoint: Endpoint, signer: str) -> None:
    answer = endpoint.post(endpoint.event("assigned", [{**P0, "offset": 7}], [P0]), signer)
    assert answer.status_code == 200
    assert endpoint.listener.calls[0][0] == "assigned"


def test_forged_stale_and_unsigned_requests_are_refused(endpoint: Endpoint) -> None:
    event = endpoint.event("assigned", [{**P0, "offset": 7}], [P0])
    body = json.dumps(event).encode()
    now = int(time.time())
    good = sidecar_sign(SECRET, event["id"], now, body)
    cases = [
        {},  # unsigned
        {"webhook-id": event["id"], "webhook-timestamp": str(now), "webhook-signature": "v1,AAAA"},
        {  # signed for another body
            "webhook-id": event["id"],
            "webhook-timestamp": str(now),
            "webhook-signature": sidecar_sign(SECRET, event["id"], now, b"{}"),
        },
        {  # too old
            "webhook-id": event["id"],
            "webhook-timestamp": str(now - 3600),
            "webhook-signature": sidecar_sign(SECRET, event["id"], now - 3600, body),
        },
    ]
    for headers in cases:
        answer = endpoint.client.post("/rebalance", content=body, headers=headers)
        assert answer.status_code == 401, headers
    assert endpoint.listener.calls == []
    # The reference verifier agrees with ours about the good signature.
    headers = {"webhook-id": event["id"], "webhook-timestamp": str(now), "webhook-signature": good}
    assert verify(SECRET, body, headers) == Webhook(SECRET).verify(body, headers)
    with pytest.raises(InvalidSignature):
        verify(SECRET, body, {**headers, "webhook-signature": "v1,AAAA"})


def test_revoke_answers_offsets_and_a_redelivery_gets_the_same_answer(endpoint: Endpoint) -> None:
    endpoint.post(
        endpoint.event("assigned", [{**P0, "offset": 40}, {**P1, "offset": None}], [P0, P1])
    )
    assert endpoint.subscriber.assignment == {Partition("orders", 0), Partition("orders", 1)}
    assert endpoint.subscriber.generation_id == 5
    calls = endpoint.listener.calls
    assert calls[0][1] == [
        Assigned("orders", 0, 40, "committed"),
        Assigned("orders", 1, None, "none"),
    ]
    revoked = endpoint.event("revoked", [P0, P1], [], generation=5)
    first = endpoint.post(revoked)
    again = endpoint.post(revoked)  # redelivered: same id
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() == {"offsets": [{**P0, "offset": 40}]}
    assert [c[0] for c in calls] == ["assigned", "revoked"]  # handled once
    assert endpoint.subscriber.assignment == frozenset()


def test_offset_status_unknown_is_not_a_start_position(endpoint: Endpoint) -> None:
    endpoint.post(
        endpoint.event(
            "assigned",
            [
                {**P0, "offset": 3, "offset_status": "committed"},
                {**P1, "offset": None, "offset_status": "unknown"},
            ],
            [P0, P1],
        )
    )
    partitions = endpoint.listener.calls[0][1]
    assert partitions == [
        Assigned("orders", 0, 3, "committed"),
        Assigned("orders", 1, None, "unknown"),
    ]
    assert endpoint.listener.calls[0][2].sequence == 1  # "000...01" parses as an integer


def test_lost_drops_and_later_events_track_the_generation(endpoint: Endpoint) -> None:
    endpoint.post(endpoint.event("assigned", [{**P0, "offset": 1}], [P0], generation=3))
    lost = endpoint.post(endpoint.event("lost", [P0], [], generation=3))
    assert lost.json() == {}
    assert endpoint.listener.calls[-1][0] == "lost"
    assert endpoint.listener.calls[-1][1] == [Partition("orders", 0)]
    endpoint.post(endpoint.event("assigned", [{**P1, "offset": 9}], [P1], generation=4))
    assert endpoint.subscriber.assignment == {Partition("orders", 1)}
    assert endpoint.subscriber.generation_id == 4
    # A revoke naming a partition we do not own hands back nothing for it.
    answer = endpoint.post(endpoint.event("revoked", [P0, P1], [], generation=4))
    assert answer.json() == {"offsets": [{**P1, "offset": 9}]}
    assert endpoint.listener.calls[-1][1] == [Partition("orders", 1)]


def test_resync_and_sidecar_gone(endpoint: Endpoint) -> None:
    snapshot = {
        "state": "stable",
        "generation_id": 8,
        "member_id": "rdkafka-2",
        "partitions": [P0],
        "sequence": "00000000000000000002",
    }
    assert endpoint.subscriber.resync(snapshot)
    assert endpoint.listener.calls[0][1] == [Assigned("orders", 0, None, "unknown")]
    assert endpoint.listener.calls[0][2].synthesized
    # The journaled event the snapshot already reflects is acknowledged, not applied again.
    endpoint.sequence = 1
    old = endpoint.post(endpoint.event("assigned", [{**P0, "offset": 5}], [P0], generation=8))
    assert old.status_code == 200
    assert len(endpoint.listener.calls) == 1
    assert endpoint.subscriber.sidecar_gone("test") == [Partition("orders", 0)]
    assert endpoint.listener.calls[-1][0] == "lost"
    assert endpoint.subscriber.assignment == frozenset()


def test_bad_requests_get_4xx(endpoint: Endpoint) -> None:
    event = endpoint.event("assigned", [], [])
    del event["data"]
    assert endpoint.post(event).status_code == 400
    assert endpoint.client.post("/elsewhere", content=b"{}").status_code == 404
    assert endpoint.client.get("/healthz").json() == {"status": "ok"}


class _CommitServer:
    """A stand-in sidecar's ``POST /commit``: answers each request with the next of
    ``answers`` (status, body) and records the bodies it got."""

    def __init__(self, answers: list[tuple[int, dict[str, Any]]]) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                outer.bodies.append(json.loads(self.rfile.read(length)))
                status, body = answers[min(len(outer.bodies), len(answers)) - 1]
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_fencing_is_dropped_only_for_a_sidecar_that_does_not_know_the_field() -> None:
    """A 422 about generation_id's *value* turned fencing off for good and committed again
    unfenced: only "unknown field" (a sidecar from before fencing) may."""
    from sidecar.subscriber.client import CommitFailed, SidecarClient

    bad_value = {
        "error": "invalid request: body.generation_id: must be a JSON number",
        "detail": [{"type": "value_error", "loc": ["body", "generation_id"], "msg": "..."}],
    }
    server = _CommitServer([(422, bad_value)])
    try:
        client = SidecarClient(server.url)
        with pytest.raises(CommitFailed, match="422"):
            client.commit([Offset("t", 0, 5)], generation_id=3)
        assert [b.get("generation_id") for b in server.bodies] == [3]  # not sent again
    finally:
        server.close()

    unknown = {
        "error": "invalid request: body.generation_id: Extra inputs are not permitted",
        "detail": [{"type": "extra_forbidden", "loc": ["body", "generation_id"], "msg": "..."}],
    }
    server = _CommitServer([(422, unknown), (200, {"committed": []})])
    try:
        client = SidecarClient(server.url)
        client.commit([Offset("t", 0, 5)], generation_id=3)
        client.commit([Offset("t", 0, 6)], generation_id=3)
        assert [b.get("generation_id") for b in server.bodies] == [3, None, None]
    finally:
        server.close()
