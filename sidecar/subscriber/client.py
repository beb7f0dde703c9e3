"""The sidecar's API: :class:`SidecarClient` (commit fencing) and the :class:`Watchdog`."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from .events import Offset
from .handler import Subscriber

log = logging.getLogger("sidecar.subscriber")


class Fenced(Exception):
    """``POST /commit`` answered 409: the member no longer owns a partition, or moved on."""

    def __init__(self, detail: Mapping[str, Any]) -> None:
        self.detail = dict(detail)
        super().__init__(str(detail.get("error", "fenced")))


class CommitFailed(Exception):
    """The commit did not happen (Kafka refused it, the sidecar is unreachable, ...)."""


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
        if status == 422 and "generation_id" in payload and _unknown_generation_field(body):
            # A sidecar without generation fencing: its ownership check (409) still fences.
            self._fence_generation = False
            log.warning("this sidecar does not take generation_id in /commit; not fencing on it")
            return self.commit(offsets=[Offset(**o) for o in payload["offsets"]])
        if status == 409:
            raise Fenced(body if isinstance(body, dict) else {})
        if not 200 <= status < 300:
            raise CommitFailed(f"POST /commit answered {status}: {body}")
        return None


def _unknown_generation_field(body: Any) -> bool:
    """Did the 422 say ``generation_id`` is a field the sidecar does not know (one from
    before fencing), and not that its value is wrong? Only the first turns fencing off."""
    details = body.get("detail") if isinstance(body, dict) else None
    return isinstance(details, list) and any(
        isinstance(d, dict)
        and d.get("type") == "extra_forbidden"
        and d.get("loc") == ["body", "generation_id"]
        for d in details
    )


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
