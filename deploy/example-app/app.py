"""Example subscriber for rebalance-sidecar: the rebalance-listener pattern over HTTP.

The sidecar holds the consumer-group membership and POSTs CloudEvents here
(``POST /rebalance``), signed per Standard Webhooks. This app keeps some state
per partition and:

* on ``kafka.partitions.assigned``: loads the partition's state from disk and
  starts reading at the committed offset carried in the event;
* on ``kafka.partitions.revoked``: flushes the state and answers
  ``{"offsets": [...]}`` so the sidecar commits them, as the member that still
  owns the partitions, before the rebalance goes on;
* on ``kafka.partitions.lost``: drops the state without committing (another
  member may already own the partitions).

Redeliveries (same ``webhook-id``) get the same answer: delivery is at least once.

Only the standard library and ``standardwebhooks``. Settings (environment):
``WEBHOOK_SECRET`` (whsec_..., required), ``HOST`` (0.0.0.0), ``PORT`` (8081),
``STATE_DIR`` (/var/lib/example-app).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

ASSIGNED = "kafka.partitions.assigned"
REVOKED = "kafka.partitions.revoked"
LOST = "kafka.partitions.lost"
MAX_BODY_BYTES = 1 << 20
REMEMBERED_EVENTS = 1024

log = logging.getLogger("example-app")


@dataclass
class PartitionState:
    """What the app keeps per partition. `position` is the next offset to read."""

    topic: str
    partition: int
    position: int | None
    records: int = 0


class PartitionStore:
    """Per-partition state: loaded on assign, flushed on revoke, dropped on loss."""

    def __init__(self, state_dir: Path) -> None:
        self._dir = state_dir
        self._dir.mkdir(parents=True, exist_ok=True)
        self._owned: dict[tuple[str, int], PartitionState] = {}
        self._lock = threading.Lock()

    def _path(self, topic: str, partition: int) -> Path:
        return self._dir / f"{topic}-{partition}.json"

    def assign(self, partitions: list[dict[str, Any]]) -> None:
        with self._lock:
            for tp in partitions:
                topic, partition = str(tp["topic"]), int(tp["partition"])
                state = self._load(topic, partition)
                # The committed offset is the truth: the previous owner committed it
                # when it handed the partition over. Without one, start where the
                # consumer's auto.offset.reset policy says (here: from our own state).
                if tp.get("offset") is not None:
                    state.position = int(tp["offset"])
                self._owned[(topic, partition)] = state
                log.info("assigned %s-%d: seek to %s", topic, partition, state.position)

    def revoke(self, partitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Flush and forget the partitions; the offsets to commit for them."""
        offsets: list[dict[str, Any]] = []
        with self._lock:
            for tp in partitions:
                key = (str(tp["topic"]), int(tp["partition"]))
                state = self._owned.pop(key, None)
                if state is None:
                    continue
                self._flush(state)
                if state.position is not None:
                    offsets.append(
                        {
                            "topic": state.topic,
                            "partition": state.partition,
                            "offset": state.position,
                        }
                    )
                log.info("revoked %s-%d at %s", state.topic, state.partition, state.position)
        return offsets

    def lose(self, partitions: list[dict[str, Any]]) -> None:
        with self._lock:
            for tp in partitions:
                self._owned.pop((str(tp["topic"]), int(tp["partition"])), None)
                log.warning(
                    "lost %s-%d: state dropped, nothing committed", tp["topic"], tp["partition"]
                )

    def processed(self, topic: str, partition: int, offset: int) -> bool:
        """Record that the record at `offset` is done; your consumer loop calls this.

        False when the partition is not (or no longer) ours: drop the result.
        """
        with self._lock:
            state = self._owned.get((topic, partition))
            if state is None:
                return False
            state.position = offset + 1
            state.records += 1
            return True

    def owned(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                asdict(s)
                for s in sorted(self._owned.values(), key=lambda s: (s.topic, s.partition))
            ]

    def _load(self, topic: str, partition: int) -> PartitionState:
        path = self._path(topic, partition)
        if path.exists():
            saved = json.loads(path.read_text(encoding="utf-8"))
            return PartitionState(
                topic, partition, saved.get("position"), int(saved.get("records", 0))
            )
        return PartitionState(topic, partition, None)

    def _flush(self, state: PartitionState) -> None:
        path = self._path(state.topic, state.partition)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state)), encoding="utf-8")
        os.replace(tmp, path)


class Subscriber:
    """Verifies and dispatches rebalance events; remembers answers for redeliveries."""

    def __init__(self, store: PartitionStore, secret: str) -> None:
        self.store = store
        self._webhook = Webhook(secret)
        self._answers: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def verify(self, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        """The CloudEvent, if the Standard Webhooks signature is valid."""
        try:
            event = self._webhook.verify(body, headers)
        except (WebhookVerificationError, ValueError) as error:
            raise PermissionError(str(error)) from error
        if not isinstance(event, dict):
            raise ValueError("the event is not a JSON object")
        return event

    def handle(self, event: dict[str, Any]) -> dict[str, Any]:
        event_id, kind = str(event.get("id", "")), str(event.get("type", ""))
        data = event.get("data")
        if not event_id or not isinstance(data, dict):
            raise ValueError("a CloudEvent needs an id and an object `data`")
        partitions = data.get("partitions") or []
        with self._lock:
            if event_id in self._answers:
                return self._answers[event_id]
            answer: dict[str, Any] = {}
            if kind == ASSIGNED:
                self.store.assign(partitions)
            elif kind == REVOKED:
                answer = {"offsets": self.store.revoke(partitions)}
            elif kind == LOST:
                self.store.lose(partitions)
            else:
                log.info("ignoring event type %s", kind)
            self._answers[event_id] = answer
            while len(self._answers) > REMEMBERED_EVENTS:
                self._answers.popitem(last=False)
            return answer


def make_server(host: str, port: int, subscriber: Subscriber) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        server_version = "example-app"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

        def _reply(self, status: HTTPStatus, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise ValueError("body too large")
            return self.rfile.read(length)

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._reply(HTTPStatus.OK, {"status": "ok"})
            elif self.path == "/state":
                self._reply(HTTPStatus.OK, {"partitions": subscriber.store.owned()})
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            try:
                body = self._body()
                if self.path == "/rebalance":
                    event = subscriber.verify(body, dict(self.headers.items()))
                    self._reply(HTTPStatus.OK, subscriber.handle(event))
                elif self.path == "/processed":
                    # Demo only: stands in for the consumer loop advancing a partition.
                    done = json.loads(body)
                    ours = subscriber.store.processed(
                        str(done["topic"]), int(done["partition"]), int(done["offset"])
                    )
                    self._reply(HTTPStatus.OK if ours else HTTPStatus.CONFLICT, {"owned": ours})
                else:
                    self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})
            except PermissionError as error:
                self._reply(HTTPStatus.UNAUTHORIZED, {"error": f"bad signature: {error}"})
            except (ValueError, KeyError, TypeError) as error:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": f"bad request: {error}"})

    return ThreadingHTTPServer((host, port), Handler)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    secret = os.environ.get("WEBHOOK_SECRET", "")
    if not secret.startswith("whsec_"):
        print("WEBHOOK_SECRET must be set to the webhook's whsec_... secret", file=sys.stderr)
        return 2
    store = PartitionStore(Path(os.environ.get("STATE_DIR", "/var/lib/example-app")))
    # All interfaces: in a pod the kubelet probes the pod IP. Events are signed.
    host = os.environ.get("HOST", "0.0.0.0")  # noqa: S104
    server = make_server(host, int(os.environ.get("PORT", "8081")), Subscriber(store, secret))

    def stop(signum: int, frame: FrameType | None) -> None:
        # By now the preStop hook has drained the sidecar: revoked was handled.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    log.info("listening on %s:%d", *server.server_address[:2])
    server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
