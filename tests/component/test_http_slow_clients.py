"""Clients that hold the sidecar's connections: a real demo sidecar, raw sockets.

* A connection must send a whole request within ``SIDECAR_HTTP_REQUEST_TIMEOUT_MS`` of
  opening or of its previous response, or it is closed: silent, a head sent a byte at a
  time, a body that never ends (slowloris). uvicorn alone closes only connections idle
  after a response.
* What the client does in time is served as before: requests on one keep-alive
  connection for longer than the deadline, pipelined requests, and an event stream that
  lasts past it (the deadline bounds what the client sends, not the response).
* At most ``SIDECAR_EVENT_STREAMS_MAX`` event streams at once: one more is a 503 with
  ``Retry-After``; the JSON history is still served, and a stream that ends frees a place.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from sidecar.http_protocol import deadlined_h11
from tests.support.demo import Demo, running_demo, wait_for_the_group

DEADLINE_MS = 1_500
STREAMS = 2
CLOSED_WITHIN = 15.0  # seconds: far past the deadline, for a slow machine


@pytest.fixture(scope="module")
def one_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(
        tmp_path_factory.mktemp("demo"),
        http_request_timeout_ms=DEADLINE_MS,
        event_streams_max=STREAMS,
    ) as demo:
        yield demo


@pytest.fixture
def demo(one_demo: Demo) -> Demo:
    wait_for_the_group(one_demo.client, one_demo.process)
    one_demo.since = one_demo.log.stat().st_size
    return one_demo


def _connect(demo: Demo) -> socket.socket:
    return socket.create_connection(("127.0.0.1", demo.port), timeout=CLOSED_WITHIN)


def _closed_by_peer(conn: socket.socket) -> bool:
    """Read until the sidecar closes (True) or ``CLOSED_WITHIN`` passes (False); what the
    sidecar answered on the way, if anything, is dropped."""
    deadline = time.monotonic() + CLOSED_WITHIN
    while time.monotonic() < deadline:
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            if conn.recv(65536) == b"":
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


def _trickle(conn: socket.socket, data: bytes, stop: threading.Event) -> None:
    """Send ``data`` a byte every 200 ms (well inside uvicorn's keep-alive timeout)."""
    for i in range(len(data)):
        if stop.wait(0.2):
            return
        try:
            conn.sendall(data[i : i + 1])
        except OSError:
            return


def test_connections_that_send_no_whole_request_are_closed(demo: Demo) -> None:
    """Silent, a trickled head, a trickled body, and a second request trickled after a
    first one answered: each is closed; the sidecar serves on."""
    head = b"GET /assignment HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"a" * 200
    body_head = (
        b"POST /enforce-rebalance HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    )
    stop = threading.Event()
    silent, slow_head, slow_body, second = (_connect(demo) for _ in range(4))
    try:
        slow_body.sendall(body_head)
        second.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert second.recv(65536).startswith(b"HTTP/1.1 200")
        trickles = [
            threading.Thread(target=_trickle, args=(slow_head, head, stop), daemon=True),
            threading.Thread(target=_trickle, args=(slow_body, b"{" * 200, stop), daemon=True),
            threading.Thread(target=_trickle, args=(second, head, stop), daemon=True),
        ]
        for t in trickles:
            t.start()
        closed = {
            name: _closed_by_peer(conn)
            for name, conn in [
                ("silent", silent),
                ("slow head", slow_head),
                ("slow body", slow_body),
                ("slow second request", second),
            ]
        }
    finally:
        stop.set()
        for conn in (silent, slow_head, slow_body, second):
            conn.close()
    assert closed == dict.fromkeys(closed, True)
    assert demo.client.get("/livez").status_code == 200
    assert demo.crashes() == []


def test_what_the_client_sends_in_time_is_served_past_the_deadline(demo: Demo) -> None:
    """One keep-alive connection, a request every half deadline for three deadlines; then
    two pipelined requests in one write: all answered on the same connection."""
    with _connect(demo) as conn:
        began = time.monotonic()
        answered = 0
        while time.monotonic() - began < 3 * DEADLINE_MS / 1000:
            conn.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert _read_response(conn).startswith(b"HTTP/1.1 200")
            answered += 1
            time.sleep(DEADLINE_MS / 2000)
        conn.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 2)
        assert _read_response(conn).startswith(b"HTTP/1.1 200")
        assert _read_response(conn).startswith(b"HTTP/1.1 200")
    assert answered >= 5


def _head_and_more(conn: socket.socket) -> tuple[bytes, bytes]:
    """A response's head, and what came after it in the same reads."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _content_length(head: bytes) -> int | None:
    sized = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    return int(sized[0].split(b":", 1)[1]) if sized else None


def _body(conn: socket.socket, length: int, rest: bytes) -> bytes:
    """Read on until ``length`` bytes of body are in (``rest``: read already)."""
    while len(rest) < length:
        chunk = conn.recv(65536)
        assert chunk, f"closed after {rest!r}"
        rest += chunk
    return rest


def _first_response(conn: socket.socket) -> bytes:
    """A response's head, and its body when it has a length (a refusal's; a stream has
    none): one ``recv`` may hold the head alone."""
    head, rest = _head_and_more(conn)
    length = _content_length(head)
    return head + b"\r\n\r\n" + (rest if length is None else _body(conn, length, rest))


def _read_response(conn: socket.socket, body: bool = True) -> bytes:
    """One whole response's head (its Content-Length says how long the body is; a
    ``HEAD``'s has none)."""
    head, rest = _head_and_more(conn)
    if not body:
        assert rest == b""
        return head
    length = _content_length(head)
    assert length is not None, f"no Content-Length: {head!r}"
    whole = _body(conn, length, rest)
    assert len(whole) == length, "a second response arrived with the first: read them apart"
    return head


def test_an_event_stream_outlives_the_deadline(demo: Demo) -> None:
    """The deadline bounds reading the request: a stream opened from the first event
    still delivers events (the demo's peers rebalance every few seconds) long past it."""
    with demo.client.stream(
        "GET", "/events", headers={"Last-Event-ID": "0", "Accept": "text/event-stream"}
    ) as stream:
        assert stream.status_code == 200
        began = time.monotonic()
        ids = 0
        for line in stream.iter_lines():
            if line.startswith("id:"):
                ids += 1
            if time.monotonic() - began > 3 * DEADLINE_MS / 1000 and ids > 0:
                break
    assert time.monotonic() - began > 3 * DEADLINE_MS / 1000
    assert ids > 0


def test_event_streams_past_the_bound_are_503_until_one_ends(demo: Demo) -> None:
    """Ten requests for a stream sent at once: exactly the bound get one, the others a
    503 (a stream counts from its request, not from its first frame); the JSON history
    is still served; streams that end, however abruptly, free their places."""
    burst = [_connect(demo) for _ in range(10)]
    try:
        for conn in burst:
            conn.sendall(_STREAM_REQUEST)
        heads = [_first_response(conn) for conn in burst]
        served = [conn for conn, head in zip(burst, heads, strict=True) if b" 200 " in head[:20]]
        refused = [head for head in heads if b" 503 " in head[:20]]
        assert (len(served), len(refused)) == (STREAMS, 10 - STREAMS), heads
        assert b"retry-after: 1" in refused[0].lower()
        assert b"SIDECAR_EVENT_STREAMS_MAX" in refused[0]
        history = demo.client.get("/events", headers={"Accept": "application/json"})
        assert history.status_code == 200
    finally:
        for conn in burst:  # abruptly, streams included
            conn.close()
    again: list[socket.socket] = []
    try:
        deadline = time.monotonic() + CLOSED_WITHIN
        while len(again) < STREAMS and time.monotonic() < deadline:
            conn = _connect(demo)
            conn.sendall(_STREAM_REQUEST)
            if _first_response(conn).startswith(b"HTTP/1.1 200"):
                again.append(conn)
            else:
                conn.close()
                time.sleep(0.1)
        assert len(again) == STREAMS
    finally:
        for conn in again:
            conn.close()
    assert demo.crashes() == []


_STREAM_REQUEST = b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"


def test_head_of_an_event_stream_ends_with_its_head(demo: Demo) -> None:
    """``curl -I /events``: the stream's status and headers, then the end, and the stream
    behind it stopped without a word in the log."""
    with _connect(demo) as conn:
        conn.sendall(b"HEAD /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = _read_response(conn, body=False)
        assert head.startswith(b"HTTP/1.1 200")
        assert b"text/event-stream" in head
        conn.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _read_response(conn).startswith(b"HTTP/1.1 200")
    assert demo.crashes() == []


def test_a_client_waiting_for_100_continue_gets_its_answer(demo: Demo) -> None:
    """``Expect: 100-continue`` and a body held back until the sidecar asks for it: a route
    that reads no body never asks, and answers after the deadline (a long poll of twice
    it). The answer comes; the connection was not cut while the application answered."""
    sequence = demo.client.get("/assignment").json()["sequence"]
    wait = 2 * DEADLINE_MS / 1000
    with _connect(demo) as conn:
        conn.sendall(
            f"GET /assignment?after={sequence + 10**6}&wait={wait} HTTP/1.1\r\n"
            "Host: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n".encode()
        )
        head = _read_response(conn)
    assert head.startswith(b"HTTP/1.1 200 "), head  # the long poll's answer: no change
    assert demo.crashes() == []


def test_a_body_trickled_after_expect_100_continue_is_still_cut_off() -> None:
    """``Expect: 100-continue`` spares only a client that waits to be asked for its body:
    one that sends it anyway, a byte at a time, is closed at the deadline like any other
    (it was kept until the application answered: a minute here)."""

    async def never_reads(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(60)

    async def main() -> bool:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        config = uvicorn.Config(
            never_reads, http=deadlined_h11(DEADLINE_MS / 1000), ws="none", lifespan="off"
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
            await asyncio.sleep(0.01)
        try:
            return await asyncio.to_thread(_trickle_after_expect, sock.getsockname()[1])
        finally:
            server.should_exit = True
            server.force_exit = True
            await task
            sock.close()

    assert asyncio.run(main())


def _trickle_after_expect(port: int) -> bool:
    stop = threading.Event()
    with socket.create_connection(("127.0.0.1", port), timeout=CLOSED_WITHIN) as conn:
        conn.sendall(
            b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
            b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n"
        )
        trickle = threading.Thread(target=_trickle, args=(conn, b"{" * 200, stop), daemon=True)
        trickle.start()
        try:
            return _closed_by_peer(conn)
        finally:
            stop.set()
