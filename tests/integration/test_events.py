"""`GET /events`: SSE with `Last-Event-ID` resume, and JSON history from the journal."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.sidecars import Sidecar

pytestmark = pytest.mark.kafka


def sse(
    client: httpx.Client,
    count: int,
    headers: dict[str, str] | None = None,
    params: dict[str, Any] | None = None,
) -> list[dict[str, str]]:
    """Read ``count`` SSE events (id, event, data) from ``/events``."""
    events: list[dict[str, str]] = []
    with client.stream(
        "GET",
        "/events",
        headers=headers or {},
        params=params or {},
        timeout=httpx.Timeout(60, read=60),
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in _parse(response.iter_lines()):
            events.append(event)
            if len(events) == count:
                break
    return events


def _parse(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    current: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            if "data" in current:
                yield current
            current = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            current[field] = value.removeprefix(" ")


def test_sse_streams_history_and_live_events_and_resumes(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    topic = topic_factory(2)
    sidecar = sidecar_factory(group_id, topic)
    sidecar.wait_stable()
    journaled = sidecar.history()
    assert [e["type"] for e in journaled] == ["kafka.partitions.assigned"]

    # From the start: the history first ...
    first = sse(sidecar.client, 1, params={"after": 0})
    assert first[0]["id"] == "1"
    assert first[0]["event"] == "kafka.partitions.assigned"
    assert json.loads(first[0]["data"])["id"] == journaled[0]["id"]

    # ... then live events, as a rebalance happens while the client listens.
    live: list[list[dict[str, str]]] = []
    listener = threading.Thread(
        target=lambda: live.append(sse(sidecar.client, 3, params={"after": 1}))
    )
    listener.start()
    assert sidecar.client.post("/enforce-rebalance", params={"wait": 30}).status_code == 200
    listener.join(60)
    assert [e["id"] for e in live[0]] == ["2", "3", "4"]
    # A reconnecting client resumes after its Last-Event-ID.
    resumed = sse(sidecar.client, 3, headers={"Last-Event-ID": "1"})
    assert [e["id"] for e in resumed] == ["2", "3", "4"]
    assert [e["event"].rsplit(".", 1)[1] for e in resumed] == ["requested", "revoked", "assigned"]
    assert [json.loads(e["data"])["id"] for e in resumed] == [
        e["id"] for e in sidecar.history(after=1)
    ]

    # Not a sequence: a word, a digit that is not ASCII, past SQLite's INTEGER, negative.
    for value in ("yesterday", "²", "\u0661", str(2**63), "99999999999999999999999", "-1", "1.5"):
        bad = sidecar.client.get("/events", headers={b"Last-Event-ID": value.encode()})
        assert bad.status_code == 400, (value, bad.status_code, bad.text)
        assert "Last-Event-ID" in bad.json()["error"]
    # Past the newest event (a journal replaced since): 409, where the stream stalled.
    ahead = sidecar.client.get("/events", headers={"Last-Event-ID": "1000"})
    assert ahead.status_code == 409, ahead.text
    assert "start again without Last-Event-ID" in ahead.json()["error"]
    for query in ({"after": "²"}, {"after": str(2**63)}, {"limit": "²"}, {"after": "1e3"}):
        bad = sidecar.client.get("/events", params=query, headers={"Accept": "application/json"})
        assert bad.status_code == 400, (query, bad.status_code, bad.text)
        assert "error" in bad.json()

    page = sidecar.client.get(
        "/events", params={"after": 1, "limit": 2}, headers={"Accept": "application/json"}
    ).json()
    assert [int(e["sequence"]) for e in page] == [2, 3]
