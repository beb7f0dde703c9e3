"""Subscriber kit: the application's side of rebalance-sidecar, in one standard-library module.

An application next to a sidecar gets its partitions from ``assigned`` events, hands offsets
back on ``revoked`` and drops state on ``lost`` — the ``ConsumerRebalanceListener`` pattern over
HTTP. This module does the parts every such application needs:

* :class:`Subscriber` verifies the Standard Webhooks signature of each request, deduplicates on
  the event id (a redelivery gets the first answer again), calls the application's
  :class:`Listener` (``on_assigned`` / ``on_revoked`` / ``on_lost``), tracks the assignment and
  its generation, and turns ``on_revoked``'s return value into the ``{"offsets": [...]}`` answer
  the sidecar commits before the group moves on;
* :class:`SidecarClient` talks to the sidecar's API: ``GET /assignment`` and ``POST /commit``
  with generation fencing (:class:`Fenced` on ``409``: the member moved on);
* :class:`Watchdog` long-polls the sidecar: when it becomes unreachable (killed, restarting) the
  application is told its partitions are ``lost`` *before* the group's session timeout hands them
  to someone else, and it re-synchronises from ``GET /assignment`` when the sidecar is back;
* :func:`serve` runs the webhook endpoint on a ``ThreadingHTTPServer``.

``assigned`` partitions carry ``offset`` (the committed offset, ``None`` when none) and, from
sidecars that know it, ``offset_status``: ``committed``, ``none`` or ``unknown``. ``unknown``
(the sidecar could not read the offsets in time, or the kit learnt the assignment from
``GET /assignment`` rather than an event) means *do not start this partition from a default*:
read the committed offset yourself (any client with the group id can, without joining) or wait.

Only the standard library: copy this file into an application that does not want the sidecar
package installed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol

__all__ = [
    "Assigned",
    "CommitFailed",
    "EventInfo",
    "Fenced",
    "InvalidSignature",
    "Listener",
    "Offset",
    "Partition",
    "SidecarClient",
    "Subscriber",
    "Watchdog",
    "serve",
]

log = logging.getLogger("sidecar.subscriber")

ASSIGNED = "kafka.partitions.assigned"
REVOKED = "kafka.partitions.revoked"
LOST = "kafka.partitions.lost"
SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
DEFAULT_TOLERANCE = 300.0  # seconds a webhook-timestamp may be off, as the reference libraries
MAX_BODY_BYTES = 1 << 20

OffsetStatus = Literal["committed", "none", "unknown"]


# -- values ---------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True, slots=True)
class Partition:
    topic: str
    partition: int


@dataclass(frozen=True, order=True, slots=True)
class Assigned:
    """A partition handed to this member, with where to start reading it."""

    topic: str
    partition: int
    offset: int | None  # the group's committed offset (None: none, or not known)
    status: OffsetStatus  # "unknown": do not start from a default; read it yourself or wait

    @property
    def tp(self) -> Partition:
        return Partition(self.topic, self.partition)


@dataclass(frozen=True, order=True, slots=True)
class Offset:
    """The next offset to read: one past the last record whose effects are safe."""

    topic: str
    partition: int
    offset: int

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class EventInfo:
    """What an application may want to know about the event it is handling."""

    id: str
    type: str
    sequence: int | None
    generation_id: int
    member_id: str | None
    reason: str | None
    synthesized: bool = False  # made by the kit (sidecar unreachable, re-sync), not the sidecar


class Listener(Protocol):
    """The application's rebalance listener (``ConsumerRebalanceListener`` over HTTP).

    The calls come one at a time, in the sidecar's order, on a webhook request thread.
    ``on_revoked`` should stop processing the partitions, flush their state and return the
    offsets to commit (the sidecar commits them as the member that still owns them, before any
    other member is told ``assigned``).
    """

    def on_assigned(self, partitions: list[Assigned], info: EventInfo) -> None: ...

    def on_revoked(
        self, partitions: list[Partition], info: EventInfo
    ) -> Iterable[Offset] | None: ...

    def on_lost(self, partitions: list[Partition], info: EventInfo) -> None: ...


class InvalidSignature(Exception):
    """The request is not signed with the webhook's secret (or is too old, or malformed)."""


class Fenced(Exception):
    """``POST /commit`` answered 409: the member no longer owns a partition, or moved on."""

    def __init__(self, detail: Mapping[str, Any]) -> None:
        self.detail = dict(detail)
        super().__init__(str(detail.get("error", "fenced")))


class CommitFailed(Exception):
    """The commit did not happen (Kafka refused it, the sidecar is unreachable, ...)."""


# -- signatures -----------------------------------------------------------------------------------


def _secret_key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except ValueError as exc:
        raise ValueError("the secret must be whsec_ followed by base64") from exc


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks signature (``v1,<base64 HMAC-SHA256 of id.timestamp.body>``)."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(
    secret: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> dict[str, Any]:
    """The JSON body, when ``headers`` carry a valid Standard Webhooks signature of it."""
    lowered = {k.lower(): v for k, v in headers.items()}
    message_id = lowered.get("webhook-id", "")
    stamp = lowered.get("webhook-timestamp", "")
    signatures = lowered.get("webhook-signature", "")
    if not message_id or not stamp or not signatures:
        raise InvalidSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise InvalidSignature("webhook-timestamp is not an integer") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise InvalidSignature("webhook-timestamp is outside the tolerance")
    expected = sign(secret, message_id, timestamp, body).split(",", 1)[1]
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            break
    else:
        raise InvalidSignature("no matching v1 signature")
    try:
        document = json.loads(body)
    except ValueError:
        raise InvalidSignature("the signed body is not JSON") from None
    if not isinstance(document, dict):
        raise InvalidSignature("the signed body is not a JSON object")
    return document


# -- the subscriber -------------------------------------------------------------------------------


def _partitions(items: Any) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        return []
    return [p for p in items if isinstance(p, dict) and "topic" in p and "partition" in p]


def _assigned(item: Mapping[str, Any]) -> Assigned:
    offset = item.get("offset")
    offset = int(offset) if offset is not None else None
    raw = item.get("offset_status")
    status: OffsetStatus
    if raw == "unknown":
        status = "unknown"
    elif raw == "none":
        status = "none"
    else:
        status = "committed" if offset is not None else "none"
    if status != "committed":
        offset = None
    return Assigned(str(item["topic"]), int(item["partition"]), offset, status)


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
        _secret_key(secret)  # fail early on a malformed secret
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
        listed = _partitions(data.get("partitions"))
        after = {
            Partition(str(p["topic"]), int(p["partition"]))
            for p in _partitions(data.get("assignment"))
        }
        if info.generation_id >= 0:
            self._generation = info.generation_id
        if info.member_id:
            self._member_id = info.member_id
        if kind == ASSIGNED:
            new = [a for a in (_assigned(p) for p in listed) if a.tp not in self._owned]
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
                for p in _partitions(snapshot.get("partitions"))
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


# -- the sidecar's API ----------------------------------------------------------------------------


class SidecarClient:
    """``GET /assignment`` and ``POST /commit`` (with generation fencing), stdlib HTTP."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 35.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._fence_generation = True  # dropped once if this sidecar does not know the field

    def _request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)  # noqa: S310
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token and method != "GET":
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:  # noqa: S310
                raw = response.read()
                status = int(response.status)
        except urllib.error.HTTPError as error:
            raw = error.read()
            status = int(error.code)
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = {"error": raw[:200].decode(errors="replace")}
        return status, parsed

    def assignment(self, after: int | None = None, wait: float | None = None) -> dict[str, Any]:
        """The sidecar's snapshot; with ``after``/``wait``, long-poll for the next change."""
        query = ""
        if after is not None:
            query = f"?after={after}&wait={wait or 0:g}"
        status, body = self._request(
            "GET", "/assignment" + query, timeout=(wait or 0) + self.timeout
        )
        if status != 200 or not isinstance(body, dict):
            raise CommitFailed(f"GET /assignment answered {status}")
        return body

    def commit(self, offsets: Iterable[Offset], generation_id: int | None = None) -> None:
        """Commit as the member. :class:`Fenced` on 409, :class:`CommitFailed` otherwise."""
        payload: dict[str, Any] = {"offsets": [o.as_dict() for o in offsets]}
        if not payload["offsets"]:
            return None
        if generation_id is not None and generation_id >= 0 and self._fence_generation:
            payload["generation_id"] = generation_id
        try:
            status, body = self._request("POST", "/commit", payload)
        except OSError as exc:
            raise CommitFailed(f"sidecar unreachable: {exc}") from exc
        if (
            status == 422
            and "generation_id" in payload
            and "generation_id" in json.dumps(body or {})
        ):
            # A sidecar without generation fencing: its ownership check (409) still fences.
            self._fence_generation = False
            log.warning("this sidecar does not take generation_id in /commit; not fencing on it")
            return self.commit(offsets=[Offset(**o) for o in payload["offsets"]])
        if status == 409:
            raise Fenced(body if isinstance(body, dict) else {})
        if not 200 <= status < 300:
            raise CommitFailed(f"POST /commit answered {status}: {body}")
        return None


class Watchdog:
    """Long-poll the sidecar; on loss of it tell the subscriber, on return re-sync.

    ``unreachable_after`` seconds of failed requests count as the sidecar being gone: keep it
    well under the group's session timeout, so the application stops before the partitions are
    handed to another member.
    """

    def __init__(
        self,
        subscriber: Subscriber,
        client: SidecarClient,
        *,
        refused_after: float = 0.5,
        unreachable_after: float = 3.0,
        poll_wait: float = 2.0,
    ) -> None:
        self._subscriber = subscriber
        self._client = SidecarClient(client.base_url, client.token, timeout=unreachable_after)
        self._refused_after = refused_after
        self._unreachable_after = unreachable_after
        self._poll_wait = poll_wait
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sidecar-watchdog", daemon=True)
        self.gone = False

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        failing_since: float | None = None
        refused_since: float | None = None
        sequence: int | None = None
        while not self._stop.is_set():
            try:
                if sequence is None:
                    snapshot = self._client.assignment()
                else:
                    snapshot = self._client.assignment(after=sequence, wait=self._poll_wait)
            except (OSError, CommitFailed, ValueError) as exc:
                # Refused: nothing listens (killed, restarting): act fast. A slow answer from
                # a busy machine is not a dead sidecar: wait longer before believing it.
                now = time.monotonic()
                failing_since = failing_since or now
                refused = isinstance(exc, ConnectionRefusedError) or (
                    isinstance(exc, urllib.error.URLError)
                    and isinstance(exc.reason, ConnectionRefusedError)
                )
                refused_since = (refused_since or now) if refused else None
                if not self.gone and (
                    now - failing_since >= self._unreachable_after
                    or (refused_since is not None and now - refused_since >= self._refused_after)
                ):
                    self.gone = True
                    lost = self._subscriber.sidecar_gone("sidecar unreachable")
                    log.warning("sidecar unreachable: %d partitions dropped", len(lost))
                sequence = None
                self._stop.wait(0.1)
                continue
            failing_since = refused_since = None
            raw = snapshot.get("sequence")
            sequence = int(raw) if raw is not None else None
            if snapshot.get("state") == "stable":
                self.gone = False
                self._subscriber.resync(snapshot)
            elif sequence is None:
                self._stop.wait(0.2)


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
