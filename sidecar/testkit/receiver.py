"""A real HTTP webhook receiver for tests: verifies every request with ``standardwebhooks``.

Runs a ``ThreadingHTTPServer`` on 127.0.0.1 in a thread. Each accepted delivery is
recorded with its receipt and answer times, so tests can check ordering and the
group-wide barrier from the receiving side, as an application would see it.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook


@dataclass(frozen=True)
class Received:
    event: dict[str, Any]
    headers: dict[str, str]
    received_at: float
    answered_at: float
    status: int

    @property
    def sequence(self) -> int:
        return int(self.event["sequence"])

    @property
    def type(self) -> str:
        return str(self.event["type"])

    @property
    def generation(self) -> int:
        return int(self.event["data"]["generation_id"])

    @property
    def partitions(self) -> set[tuple[str, int]]:
        return {(p["topic"], p["partition"]) for p in self.event["data"]["partitions"]}


# (event) -> (status, json body or None, seconds to wait before answering)
Responder = Callable[[dict[str, Any]], tuple[int, Any, float]]


def accept(event: dict[str, Any]) -> tuple[int, Any, float]:
    return 204, None, 0.0


class Receiver:
    def __init__(
        self,
        secret: str,
        responder: Responder = accept,
        port: int = 0,
        retry_after: str = "0",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.secret = secret
        self.responder = responder
        self.retry_after = retry_after  # sent with every 429/503
        self.received: list[Received] = []
        self.rejected: list[str] = []
        self.attempts = 0
        self.peer_certificates: list[Any] = []  # over TLS: each request's client certificate
        self.tls = tls
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        if tls is not None:  # the handshake at accept: one that fails is dropped there
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def events(self, type_: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.received if type_ is None or r.type == type_]

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self.received)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                received_at = time.time()
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    receiver.attempts += 1
                    if isinstance(self.connection, ssl.SSLSocket):
                        receiver.peer_certificates.append(self.connection.getpeercert())
                try:
                    event = Webhook(receiver.secret).verify(body, headers)
                except Exception as exc:
                    with receiver._lock:
                        receiver.rejected.append(f"{type(exc).__name__}: {exc}")
                    self._answer(401, {"error": "bad signature"})
                    return
                status, answer, delay = receiver.responder(event)
                if delay:
                    time.sleep(delay)
                if 200 <= status < 300:
                    with receiver._changed:
                        receiver.received.append(
                            Received(event, headers, received_at, time.time(), status)
                        )
                        receiver._changed.notify_all()
                self._answer(status, answer)

            def _answer(self, status: int, answer: Any) -> None:
                if 300 <= status < 400:  # a redirect: the answer is the Location
                    self.send_response(status)
                    self.send_header("location", str(answer))
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                payload = b"" if answer is None else json.dumps(answer).encode()
                self.send_response(status)
                if status in (429, 503):
                    # As UTF-8 bytes on the wire, whatever the value (send_header is latin-1).
                    raw = receiver.retry_after.encode().decode("latin-1")
                    self.send_header("Retry-After", raw)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


@contextmanager
def running(
    secret: str,
    responder: Responder = accept,
    port: int = 0,
    retry_after: str = "0",
    tls: ssl.SSLContext | None = None,
) -> Iterator[Receiver]:
    receiver = Receiver(secret, responder, port, retry_after, tls).start()
    try:
        yield receiver
    finally:
        receiver.stop()


def slow_revoke(seconds: float) -> Responder:
    """Acknowledge everything; take ``seconds`` over each ``revoked`` (an app flushing)."""

    def respond(event: dict[str, Any]) -> tuple[int, Any, float]:
        return 204, None, seconds if event["type"].endswith("revoked") else 0.0

    return respond
