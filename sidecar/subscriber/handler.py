"""The webhook side: :class:`Subscriber` (verify, deduplicate, dispatch) and :func:`serve`."""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .events import (
    ASSIGNED,
    LOST,
    REVOKED,
    Assigned,
    EventInfo,
    Listener,
    Partition,
    parse_assigned,
    parse_partitions,
)
from .signatures import DEFAULT_TOLERANCE, InvalidSignature, secret_key, verify
from .trace import handling

log = logging.getLogger("sidecar.subscriber")

MAX_BODY_BYTES = 1 << 20


class Subscriber:
    """Verify, deduplicate and dispatch the sidecar's events to a :class:`Listener`."""

    def __init__(
        self,
        secret: str,
        listener: Listener,
        *,
        tolerance: float = DEFAULT_TOLERANCE,
        remember: int = 4096,
    ) -> None:
        secret_key(secret)  # fail early on a malformed secret
        self._secret = secret
        self._listener = listener
        self._tolerance = tolerance
        self._remember = remember
        self._answers: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.RLock()
        self._owned: set[Partition] = set()
        self._generation = -1
        self._member_id: str | None = None
        self._seen_events = 0
        self._floor: int | None = None  # events at or below were already in a re-sync

    # -- state ---------------------------------------------------------------------------------

    @property
    def assignment(self) -> frozenset[Partition]:
        with self._lock:
            return frozenset(self._owned)

    @property
    def generation_id(self) -> int:
        with self._lock:
            return self._generation

    @property
    def member_id(self) -> str | None:
        with self._lock:
            return self._member_id

    # -- webhook requests ----------------------------------------------------------------------

    def handle(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        """Answer one webhook request: the HTTP status and the JSON body to send."""
        try:
            event = verify(self._secret, body, headers, tolerance=self._tolerance)
        except InvalidSignature as exc:
            return HTTPStatus.UNAUTHORIZED, {"error": f"bad signature: {exc}"}
        try:
            with handling(headers, event):
                return HTTPStatus.OK, self.dispatch(event)
        except (KeyError, TypeError, ValueError) as exc:
            return HTTPStatus.BAD_REQUEST, {"error": f"bad event: {exc}"}

    def dispatch(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Handle a verified CloudEvent; the answer (``{"offsets": [...]}`` for revoked)."""
        event_id = str(event["id"])
        kind = str(event["type"])
        data = event.get("data")
        if not isinstance(data, dict):
            raise ValueError("data must be an object")
        raw_sequence = event.get("sequence")
        sequence = int(raw_sequence) if raw_sequence is not None else None
        with self._lock:
            if event_id in self._answers:
                self._answers.move_to_end(event_id)
                return self._answers[event_id]
            self._seen_events += 1
            info = EventInfo(
                event_id,
                kind,
                sequence,
                int(data.get("generation_id", -1)),
                data.get("member_id"),
                data.get("reason"),
            )
            if self._floor is not None and sequence is not None and sequence <= self._floor:
                answer: dict[str, Any] = {}  # already reflected by the re-sync
            else:
                self._floor = None
                answer = self._apply(kind, data, info)
            self._answers[event_id] = answer
            while len(self._answers) > self._remember:
                self._answers.popitem(last=False)
            return answer

    def _apply(self, kind: str, data: Mapping[str, Any], info: EventInfo) -> dict[str, Any]:
        listed = parse_partitions(data.get("partitions"))
        after = {
            Partition(str(p["topic"]), int(p["partition"]))
            for p in parse_partitions(data.get("assignment"))
        }
        if info.generation_id >= 0:
            self._generation = info.generation_id
        if info.member_id:
            self._member_id = info.member_id
        if kind == ASSIGNED:
            new = [a for a in (parse_assigned(p) for p in listed) if a.tp not in self._owned]
            self._owned = (
                after | {a.tp for a in new}
                if "assignment" in data
                else (self._owned | {a.tp for a in new})
            )
            if new:
                self._listener.on_assigned(sorted(new), info)
            return {}
        if kind in (REVOKED, LOST):
            taken = sorted(
                tp
                for tp in (Partition(str(p["topic"]), int(p["partition"])) for p in listed)
                if tp in self._owned
            )
            self._owned -= set(taken)
            if kind == LOST:
                if taken:
                    self._listener.on_lost(taken, info)
                return {}
            offsets = self._listener.on_revoked(taken, info) if taken else None
            allowed = set(taken)
            chosen = [o for o in offsets or () if Partition(o.topic, o.partition) in allowed]
            return {"offsets": [o.as_dict() for o in sorted(chosen)]}
        log.info("ignoring event type %s", kind)
        return {}

    # -- the kit's own view: re-sync and loss of the sidecar -----------------------------------

    def resync(self, snapshot: Mapping[str, Any], *, force: bool = False) -> bool:
        """Adopt ``GET /assignment`` when no event told us (app restart, sidecar back).

        Partitions come with ``status="unknown"``: read their committed offsets yourself.
        Without ``force`` this does nothing once an event was handled. ``True`` when adopted.
        """
        with self._lock:
            if self._seen_events and not force:
                return False
            if snapshot.get("state") not in ("stable",):
                return False
            owned = {
                Partition(str(p["topic"]), int(p["partition"]))
                for p in parse_partitions(snapshot.get("partitions"))
            }
            self._generation = int(snapshot.get("generation_id", -1))
            self._member_id = snapshot.get("member_id")
            raw = snapshot.get("sequence")
            self._floor = int(raw) if raw is not None else None
            new = sorted(owned - self._owned)
            self._owned |= owned
            self._seen_events += 1
            if new:
                info = EventInfo(
                    "resync",
                    ASSIGNED,
                    self._floor,
                    self._generation,
                    self._member_id,
                    "re-sync from GET /assignment",
                    synthesized=True,
                )
                self._listener.on_assigned(
                    [Assigned(tp.topic, tp.partition, None, "unknown") for tp in new], info
                )
            return True

    def sidecar_gone(self, reason: str) -> list[Partition]:
        """The sidecar is unreachable: whatever we own may soon be someone else's. Drop it."""
        with self._lock:
            taken = sorted(self._owned)
            self._owned.clear()
            self._seen_events = 0  # the next snapshot re-syncs us
            if taken:
                info = EventInfo(
                    "sidecar-gone",
                    LOST,
                    None,
                    self._generation,
                    self._member_id,
                    reason,
                    synthesized=True,
                )
                self._listener.on_lost(taken, info)
            return taken


# -- the webhook endpoint -------------------------------------------------------------------------


def serve(
    subscriber: Subscriber, host: str, port: int, path: str = "/rebalance"
) -> ThreadingHTTPServer:
    """A ``ThreadingHTTPServer`` answering the sidecar's POSTs on ``path`` (not started)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

        def _reply(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._reply(HTTPStatus.OK, {"status": "ok"})
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
                self.close_connection = True
                return
            body = self.rfile.read(length)
            if self.path != path:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})
                return
            status, answer = subscriber.handle(body, dict(self.headers.items()))
            self._reply(status, answer)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
