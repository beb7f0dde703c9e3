"""Bad request bodies against a real sidecar: a clear 4xx JSON error, never a 500.

The sidecar is ``rebalance-sidecar demo`` (librdkafka's mock cluster, no Kafka), a real
process answering real HTTP, so a body that made the app crash shows as the 500 and the
traceback in its log that a caller and an operator would see.

* An invalid body echoed in the 422 must render even when it holds what JSON cannot
  carry out: a lone surrogate (``"\\ud800"`` is valid JSON, not encodable as UTF-8), or
  ``NaN`` / ``Infinity`` (Python's JSON parser reads them).
* A streamed (chunked) body over the limit is the same 413 as a declared one.
* A request head that never ends is cut off, not buffered.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest

from sidecar.api import MAX_BODY_BYTES
from sidecar.schemas import OffsetIn
from tests.support.demo import Demo, running_demo, wait_for_the_group


@pytest.fixture
def demo(one_demo: Demo) -> Demo:
    # A test that enforced a rebalance leaves the group rebalancing; a command while a
    # callback holds the member is a 503 by design. Each test starts from a stable group.
    wait_for_the_group(one_demo.client, one_demo.process)
    one_demo.since = one_demo.log.stat().st_size
    return one_demo


@pytest.fixture(scope="module")
def one_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """One demo for the module: it takes seconds to join its group."""
    with running_demo(tmp_path_factory.mktemp("demo")) as demo:
        yield demo


def post(demo: Demo, path: str, body: bytes) -> httpx.Response:
    return demo.client.post(path, content=body, headers={"Content-Type": "application/json"})


# Raw bytes: each is what a client may send, escapes and all (json.dumps never writes NaN
# unasked, and never a lone surrogate unescaped).
UNRENDERABLE = [
    pytest.param("/enforce-rebalance", rb'{"reason":"\ud800"}', "body.reason", id="reason"),
    pytest.param("/enforce-rebalance", rb'{"reason":"\udfff x"}', "body.reason", id="low"),
    pytest.param("/enforce-rebalance", rb'{"nope":"\ud800"}', "body.nope", id="extra-value"),
    pytest.param("/enforce-rebalance", rb'{"\ud800":1}', "body", id="extra-key"),
    pytest.param(
        "/commit",
        rb'{"offsets":[{"topic":"\ud800","partition":0,"offset":1}]}',
        "body.offsets.0.topic",
        id="topic",
    ),
    pytest.param(
        "/commit",
        rb'{"offsets":[{"topic":"orders","partition":0,"offset":1}],"generation_id":"\ud800"}',
        "body.generation_id",
        id="generation",
    ),
    pytest.param(
        "/commit",
        rb'{"offsets":[{"topic":"orders","partition":0,"offset":NaN}]}',
        "body.offsets.0.offset",
        id="nan",
    ),
    pytest.param(
        "/commit",
        rb'{"offsets":[{"topic":"orders","partition":0,"offset":Infinity}]}',
        "body.offsets.0.offset",
        id="infinity",
    ),
    pytest.param(
        "/commit",
        rb'{"offsets":[{"topic":"orders","partition":0,"offset":-Infinity}]}',
        "body.offsets.0.offset",
        id="minus-infinity",
    ),
    pytest.param(
        "/commit",
        rb'{"offsets":[{"topic":"orders","partition":0,"offset":1e400}]}',
        "body.offsets.0.offset",
        id="overflow",
    ),
    pytest.param(
        "/commit",
        rb'{"offsets":[{"topic":"orders","partition":0,"offset":1}],"generation_id":NaN}',
        "body.generation_id",
        id="nan-generation",
    ),
    pytest.param("/commit", rb'"\ud800"', "body", id="bare-string"),
    pytest.param("/webhooks", rb'{"url":"http://127.0.0.1:1/\ud800"}', "body.url", id="url"),
    pytest.param(
        "/webhooks",
        rb'{"url":"http://127.0.0.1:1/","secret":"\ud800"}',
        "body.secret",
        id="secret",
    ),
    pytest.param(
        "/webhooks",
        rb'{"url":"http://127.0.0.1:1/","secret":"\ud800","nope":NaN}',
        "body.secret",
        id="webhook-both",
    ),
]


@pytest.mark.parametrize(("path", "body", "where"), UNRENDERABLE)
def test_an_invalid_body_that_json_cannot_carry_is_a_422_naming_the_field(
    demo: Demo, path: str, body: bytes, where: str
) -> None:
    answer = post(demo, path, body)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()
    assert error["error"].startswith("invalid request: "), error
    assert f" {where}: " in error["error"], error
    assert error["detail"], error
    assert {tuple(d["loc"][:1]) for d in error["detail"]} == {("body",)}
    # What is echoed is the input made JSON-safe: the escape, or the number's name.
    echoed = json.dumps([d.get("input") for d in error["detail"]])
    assert "\\\\ud800" in echoed or "\\\\udfff" in echoed or "Infinity" in echoed or "NaN" in echoed
    assert demo.crashes() == []


def test_an_invalid_body_is_answered_as_it_was_before(demo: Demo) -> None:
    """Input JSON can carry is echoed as it was sent."""
    answer = post(demo, "/commit", b'{"offsets":[{"topic":"orders","partition":0,"offset":1.5}]}')
    assert answer.status_code == 422, answer.text
    (detail,) = answer.json()["detail"]
    assert detail["loc"] == ["body", "offsets", 0, "offset"]
    assert detail["input"] == 1.5
    extra = post(demo, "/enforce-rebalance", '{"nope":"zählung \U0001f600"}'.encode())
    assert extra.status_code == 422, extra.text
    assert extra.json()["detail"][0]["input"] == "zählung \U0001f600"
    assert demo.crashes() == []


def test_a_commit_naming_a_partition_twice_is_a_422_not_a_backward_commit(demo: Demo) -> None:
    """Kafka keeps the last offset given for a partition: ``5`` then ``3`` was answered 200
    with both listed as committed, and the group's offset went back to 3."""
    body = {
        "offsets": [
            {"topic": "orders", "partition": 0, "offset": 5},
            {"topic": "orders", "partition": 1, "offset": 9},
            {"topic": "orders", "partition": 0, "offset": 3},
        ]
    }
    answer = demo.client.post("/commit", json=body)
    assert answer.status_code == 422, answer.text
    assert "orders[0] is named twice" in answer.json()["error"]
    assert demo.crashes() == []


def test_a_number_that_is_not_a_json_integer_is_a_422_not_a_commit(demo: Demo) -> None:
    """``"offset": true`` was read as 1 and committed (the group's offset went back to 1),
    and ``"5"`` as 5. A client that sends them has a bug to hear of. (``5.0`` is a whole
    number to JSON Schema's ``integer``, as the OpenAPI says: it is read as 5.)"""
    one = {"topic": "orders", "partition": 0, "offset": 7}
    cases: list[tuple[str, dict[str, Any], list[str | int]]] = [
        ("/commit", {"offsets": [{**one, "offset": True}]}, ["body", "offsets", 0, "offset"]),
        ("/commit", {"offsets": [{**one, "offset": "5"}]}, ["body", "offsets", 0, "offset"]),
        ("/commit", {"offsets": [{**one, "offset": 5.5}]}, ["body", "offsets", 0, "offset"]),
        ("/commit", {"offsets": [{**one, "partition": "0"}]}, ["body", "offsets", 0, "partition"]),
        ("/commit", {"offsets": [one], "generation_id": True}, ["body", "generation_id"]),
        ("/webhooks", {"url": "http://127.0.0.1:9/x", "timeout_ms": "500"}, ["body", "timeout_ms"]),
    ]
    for path, body, where in cases:
        answer = demo.client.post(path, json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert [d["loc"] for d in answer.json()["detail"]] == [where], (body, answer.text)
    assert demo.client.get("/webhooks").json() == []
    assert demo.crashes() == []
    assert OffsetIn.model_validate({**one, "offset": 5.0}).offset == 5


def test_an_unknown_event_type_with_a_lone_surrogate_is_the_registrys_422(demo: Demo) -> None:
    """``events`` items pass validation with a lone surrogate: the registry refuses the
    name, and its error (which names it) still renders."""
    body = rb'{"url":"http://127.0.0.1:1/","events":["\ud800"]}'
    answer = post(demo, "/webhooks", body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"].startswith("events: unknown event type '\\ud800'")
    assert demo.crashes() == []


def test_a_body_that_cannot_be_decoded_is_a_400_that_says_why(demo: Demo) -> None:
    """FastAPI's own words were "There was an error parsing the body"."""
    for body, why in (
        (b'{"reason":"\xff"}', "it is not UTF-8"),
        (b"[" * 30_000 + b"]" * 30_000, "JSON nested deeper than the parser allows"),
    ):
        answer = post(demo, "/enforce-rebalance", body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == f"the body cannot be decoded: {why}"
    assert demo.crashes() == []


def test_a_deeply_nested_invalid_body_is_a_422(demo: Demo) -> None:
    """Echoing a body nested as deep as the JSON parser allows must not exhaust the stack."""
    nested = b"[" * 900 + b"]" * 900
    answer = post(demo, "/commit", b'{"offsets":[],"x":' + nested + b"}")
    assert answer.status_code == 422, answer.text
    assert "body.x: Extra inputs are not permitted" in answer.json()["error"]
    assert demo.crashes() == []


def test_an_accepted_reason_with_odd_characters_is_journaled_not_a_500(demo: Demo) -> None:
    """A reason JSON carries (NUL, a surrogate pair) is free text: accepted, journaled as
    the event's reason and served back by /events."""
    reason = "odd \x00 reason \U0001f600 \u2028"
    answer = demo.client.post("/enforce-rebalance", json={"reason": reason})
    assert answer.status_code == 202, answer.text
    if not answer.json()["coalesced"]:
        events = demo.client.get(
            "/events?after=0&limit=1000", headers={"Accept": "application/json"}
        )
        assert events.status_code == 200, events.text
        reasons = [e["data"].get("reason") for e in events.json()]
        assert reason in reasons, reasons
    assert demo.crashes() == []


def _chunks(size: int, piece: int = 4096) -> Iterator[bytes]:
    body = b'{"reason":"' + b"x" * size + b'"}'
    for start in range(0, len(body), piece):
        yield body[start : start + piece]


@pytest.mark.parametrize("path", ["/enforce-rebalance", "/commit", "/webhooks"])
def test_a_streamed_body_over_the_limit_is_the_same_413_as_a_declared_one(
    demo: Demo, path: str
) -> None:
    size = MAX_BODY_BYTES + 1
    headers = {"Content-Type": "application/json"}
    declared = demo.client.request("POST", path, content=b"x" * size, headers=headers)
    assert declared.status_code == 413, declared.text
    # An iterator has no length: httpx sends it chunked, without Content-Length.
    request = demo.client.build_request("POST", path, content=_chunks(size), headers=headers)
    assert request.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in request.headers
    streamed = demo.client.send(request)
    assert streamed.status_code == 413, streamed.text
    assert streamed.headers["content-type"] == "application/json"
    assert (
        streamed.json()
        == declared.json()
        == {"error": f"request body larger than {MAX_BODY_BYTES} bytes"}
    )
    assert demo.crashes() == []


def test_a_streamed_body_under_the_limit_is_read_as_before(demo: Demo) -> None:
    answer = demo.client.post(
        "/enforce-rebalance",
        content=_chunks(300),  # over the 255 characters a reason may have: a 422
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"].startswith("invalid request: body.reason: ")
    body: dict[str, Any] = {"reason": "streamed"}
    ok = demo.client.post(
        "/enforce-rebalance",
        content=iter([json.dumps(body).encode()]),
        headers={"Content-Type": "application/json"},
    )
    assert ok.status_code == 202, ok.text
    assert demo.crashes() == []


def _raw(demo: Demo) -> socket.socket:
    return socket.create_connection(("127.0.0.1", demo.client.base_url.port), timeout=30)


def test_an_endless_header_is_cut_off_not_buffered(demo: Demo) -> None:
    """A client streaming one header without end: the sidecar closes the connection
    after a few megabytes at most and its memory does not grow with what was sent. The
    API parses with h11, which gives up on an unfinished request head past 16 kB;
    httptools, which uvicorn picks by default when it is installed, buffered a 200 MB
    header (230 MB of RSS)."""
    process = psutil.Process(demo.process.pid)
    before = process.memory_info().rss
    sent = 0
    cut: OSError | None = None
    with _raw(demo) as conn:
        try:
            conn.sendall(b"GET /assignment HTTP/1.1\r\nHost: x\r\nX-Big: ")
            while sent < 100_000_000:
                conn.sendall(b"a" * 1_000_000)
                sent += 1_000_000
        except (ConnectionResetError, BrokenPipeError) as exc:
            cut = exc
    assert cut is not None, f"{sent} bytes of one header taken"
    assert sent < 50_000_000
    assert process.memory_info().rss - before < 20_000_000
    assert demo.client.get("/assignment").status_code == 200
    assert demo.crashes() == []
