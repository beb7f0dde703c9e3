"""One application pod of the chaos run: a sidecar over its incarnations, two subscribers.

The sidecar is restarted on the same data dir, so its journal and webhook cursors
survive. Its two subscribers are declared in its settings: ``app``, the blocking
application (on a third of the ``revoked`` events it hands offsets back, on another third it
commits through ``POST /commit`` from inside its handler), and
``audit``, an async observer of every event type. Both are real HTTP servers that verify
signatures; taking one down and bringing it back reuses its port.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sidecar.journal import Journal
from sidecar.subscriptions import new_secret
from tests.chaos import invariants
from tests.chaos.broker import Link
from tests.chaos.report import Exit, HealthProblem
from tests.support.receiver import Receiver
from tests.support.sidecars import Sidecar, free_port

ALL_TYPES = [
    "kafka.partitions.assigned",
    "kafka.partitions.revoked",
    "kafka.partitions.lost",
    "kafka.rebalance.requested",
]
# Subscribers come back within seconds: retry quickly so the run is not all backoff.
MEMBER_SETTINGS = {
    "SIDECAR_WEBHOOK_BACKOFF_INITIAL_MS": "100",
    "SIDECAR_WEBHOOK_BACKOFF_MAX_MS": "1000",
    # A revoke callback's commits end by its start + the revoke timeout + this (the bound
    # the harness holds the callbacks to: PROTOCOL_ALLOWANCE_SECONDS).
    "SIDECAR_COMMIT_TIMEOUT_MS": "5000",
}


@dataclass(frozen=True)
class Cluster:
    """What every member joins, and how."""

    bootstrap: str
    group: str
    topic: str
    strategy: str
    revoke_timeout_ms: int
    workdir: Path
    protocol: str = "classic"
    session_timeout_ms: int = 6000


class Member:
    """One application pod: a sidecar (over its incarnations) and its two subscribers."""

    def __init__(
        self, index: int, cluster: Cluster, static: bool, api_errors: list[str], link: Link
    ) -> None:
        self.index = index
        self.link = link  # this pod's own path to Kafka (cut or slowed by the plan)
        self.name = f"m{index}"
        self.cluster = cluster
        self.static = static
        self.instance_id = f"{cluster.group}-{self.name}" if static else None
        self.data_dir = cluster.workdir / self.name
        self.api_errors = api_errors  # 5xx answers end up in the report
        self.secrets = {"app": new_secret(), "audit": new_secret()}
        self.ports = {"app": free_port(), "audit": free_port()}
        self.delay = {"app": 0.0, "audit": 0.0}
        self.receivers: dict[str, list[Receiver]] = {"app": [], "audit": []}
        self.receiver: dict[str, Receiver | None] = {"app": None, "audit": None}
        self.sidecar: Sidecar | None = None
        self.expected_exit = False
        self.kills: list[float] = []
        self.exits: list[Exit] = []
        self.health: list[HealthProblem] = []
        self.scrapes: dict[int, str] = {}  # last /metrics text per incarnation
        self.incarnation = 0
        self.lock = threading.Lock()

    # -- subscribers -----------------------------------------------------------------------

    def _responder(self, kind: str) -> Callable[[dict[str, Any]], tuple[int, Any, float]]:
        def respond(event: dict[str, Any]) -> tuple[int, Any, float]:
            delay = self.delay[kind]
            if kind == "app" and event["type"] == invariants.REVOKED:
                offsets = [
                    {
                        "topic": p["topic"],
                        "partition": p["partition"],
                        "offset": int(event["sequence"]),
                    }
                    for p in event["data"]["partitions"]
                ]
                way = _revoke_handling(event)
                if way == "hand back":
                    return 200, {"offsets": offsets}, delay
                if way == "commit" and offsets:
                    self._commit_from_handler(offsets)
            return 204, None, delay

        return respond

    def _commit_from_handler(self, offsets: list[dict[str, Any]]) -> None:
        """The revoke handler commits through its sidecar before it answers (the member
        serves commits while it waits on the barrier). A refusal (409: the barrier timed out
        and the partitions are gone; 503: Kafka refused) is an answer, not an API error."""
        sidecar = self.sidecar
        if sidecar is None:
            return
        try:
            response = sidecar.client.post("/commit", json={"offsets": offsets}, timeout=40)
        except httpx.HTTPError:
            return  # the sidecar went away meanwhile (a kill in the plan)
        if response.status_code >= 500 and response.status_code != 503:
            self.api_errors.append(
                f"{self.name} POST /commit -> {response.status_code}: {response.text}"
            )

    def subscriber_up(self, kind: str) -> str:
        with self.lock:
            if self.receiver[kind] is not None:
                return "skipped"
        for _ in range(40):  # the old socket may linger a moment
            try:
                receiver = Receiver(self.secrets[kind], self._responder(kind), self.ports[kind])
                break
            except OSError:
                time.sleep(0.25)
        else:
            raise RuntimeError(f"{self.name}/{kind}: port {self.ports[kind]} stays taken")
        receiver.start()
        with self.lock:
            self.receivers[kind].append(receiver)
            self.receiver[kind] = receiver
        return "up"

    def subscriber_down(self, kind: str) -> str:
        with self.lock:
            receiver, self.receiver[kind] = self.receiver[kind], None
        if receiver is None:
            return "skipped"
        receiver.stop()
        return "down"

    def webhooks(self) -> list[dict[str, Any]]:
        return [
            {
                "url": f"http://127.0.0.1:{self.ports['app']}/hook",
                "secret": self.secrets["app"],
                "mode": "blocking",
                "id": "app",
            },
            {
                "url": f"http://127.0.0.1:{self.ports['audit']}/hook",
                "secret": self.secrets["audit"],
                "mode": "async",
                "id": "audit",
                "events": ALL_TYPES,
            },
        ]

    # -- the sidecar process -------------------------------------------------------------------

    def start(self) -> str:
        with self.lock:
            if self.sidecar is not None:
                return "skipped"
        cluster = self.cluster
        env = dict(MEMBER_SETTINGS)
        if cluster.protocol == "consumer":  # the broker's session, for our own clock
            env["SIDECAR_GROUP_SESSION_TIMEOUT_MS"] = str(cluster.session_timeout_ms)
        else:
            env["SIDECAR_KAFKA_SESSION_TIMEOUT_MS"] = str(cluster.session_timeout_ms)
        sidecar = Sidecar(
            self.link.address,  # every connection, the coordinator's too, over its own link
            cluster.group,
            cluster.topic,
            self.data_dir,
            protocol=cluster.protocol,
            strategy=cluster.strategy if cluster.protocol == "classic" else None,
            instance_id=self.instance_id,
            revoke_timeout_ms=cluster.revoke_timeout_ms,
            webhooks=self.webhooks(),
            extra_env=env,
            name=self.name,
        )
        try:
            sidecar.start()
        except AssertionError as exc:
            code = sidecar.process.poll() if sidecar.process else None
            if sidecar.running:
                sidecar.kill()
                code = sidecar.process.returncode if sidecar.process else None
            sidecar.client.close()
            detail = str(exc).splitlines()[0][:200]
            self.exits.append(Exit(self.name, "start failed", code, time.time(), 0, detail))
            return f"start failed: {detail}"
        with self.lock:
            self.incarnation += 1
            self.sidecar = sidecar
            self.expected_exit = False
        return f"started (pid {sidecar.process.pid if sidecar.process else '?'})"

    def _take(self) -> Sidecar | None:
        """Claim the running sidecar for stopping: the monitor must not call it a crash."""
        with self.lock:
            sidecar = self.sidecar
            if sidecar is None or not sidecar.running:
                return None
            self.expected_exit = True
            return sidecar

    def kill(self) -> str:
        sidecar = self._take()
        if sidecar is None:
            return "skipped"
        self.scrape(sidecar)
        self.kills.append(time.time())
        sidecar.kill()
        code = sidecar.process.returncode if sidecar.process else None
        self.exits.append(Exit(self.name, "kill -9", code, self.kills[-1]))
        self._gone(sidecar)
        return f"killed ({code})"

    def terminate(self, how: str = "SIGTERM") -> str:
        sidecar = self._take()
        if sidecar is None:
            return "skipped"
        self.scrape(sidecar)
        started = time.time()
        detail = ""
        try:
            code: int | None = sidecar.terminate(timeout=90)
        except subprocess.TimeoutExpired:
            sidecar.kill()
            code, detail = None, "no exit within 90 s of SIGTERM: killed"
        took = time.time() - started
        self.exits.append(Exit(self.name, how, code, started, took, detail))
        self._gone(sidecar)
        return f"exited {code} after {took:.1f} s"

    def _gone(self, sidecar: Sidecar) -> None:
        sidecar.client.close()
        with self.lock:
            if self.sidecar is sidecar:
                self.sidecar = None

    def enforce(self, reason: str) -> str:
        sidecar = self.sidecar
        if sidecar is None:
            return "skipped"
        try:
            response = sidecar.client.post(
                "/enforce-rebalance", json={"reason": reason}, timeout=40
            )
        except httpx.HTTPError as exc:
            return f"no answer ({type(exc).__name__})"
        if response.status_code >= 500:
            self.api_errors.append(
                f"{self.name} POST /enforce-rebalance -> {response.status_code}: {response.text}"
            )
        return str(response.status_code)

    def scrape(self, sidecar: Sidecar | None = None) -> None:
        sidecar = sidecar or self.sidecar
        if sidecar is None:
            return
        with contextlib.suppress(httpx.HTTPError):
            response = sidecar.client.get("/metrics", timeout=3)
            if response.status_code == 200:
                self.scrapes[self.incarnation] = response.text

    def check(self) -> None:
        """Monitor: did the process die on its own? Does liveness hold?"""
        with self.lock:
            sidecar, expected = self.sidecar, self.expected_exit
            if sidecar is None or expected:
                return
            code = sidecar.process.poll() if sidecar.process else None
            if code is not None:
                self.sidecar = None
        if code is not None:
            tail = sidecar.logs()[-300:].replace("\n", " | ")
            self.exits.append(Exit(self.name, "crash", code, time.time(), 0, tail))
            sidecar.client.close()
            return
        try:
            response = sidecar.client.get("/healthz", timeout=5)
        except httpx.HTTPError:
            return  # stopping or just killed: the next round sees the exit code
        if response.status_code != 200:
            self.health.append(
                HealthProblem(self.name, time.time(), response.status_code, response.text[:200])
            )

    # -- after the run ---------------------------------------------------------------------

    def pending(self) -> int:
        """Events some subscription of this sidecar has not yet acknowledged or given up."""
        sidecar = self.sidecar
        if sidecar is None:
            return -1
        try:
            subs = sidecar.client.get("/webhooks", timeout=10).json()
            cursor = min(int(s["cursor"]) for s in subs)
            history = sidecar.history(cursor)
        except (httpx.HTTPError, ValueError):
            return -1
        return sum(
            1
            for sub in subs
            for e in history
            if int(e["sequence"]) > int(sub["cursor"]) and e["type"] in sub["events"]
        )

    def record(self) -> invariants.MemberRecord:
        journal = Journal(self.data_dir, durable=False)
        try:
            events = journal.events_after(0, 10_000_000)
            subscriptions = journal.subscriptions()
            deliveries = {s.id: journal.deliveries(s.id, 10_000_000) for s in subscriptions}
        finally:
            journal.close()
        log_path = self.data_dir / f"{self.name}.log"
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        lines, tracebacks = invariants.parse_log(text)
        received = {
            kind: [r for receiver in receivers for r in receiver.events()]
            for kind, receivers in self.receivers.items()
        }
        return invariants.MemberRecord(
            name=self.name,
            static=self.static,
            events=events,
            subscriptions=subscriptions,
            deliveries=deliveries,
            received=received,
            blocking="app",
            kills=list(self.kills),
            link_faults=[(o.started, o.ended) for o in self.link.outages],
            exits=list(self.exits),
            log_lines=lines,
            tracebacks=tracebacks,
            health=list(self.health),
        )


def _revoke_handling(event: dict[str, Any]) -> str:
    """A third of the revocations hand offsets back in the answer, a third commit through
    ``POST /commit`` from inside the handler, a third do neither (decided by the event id)."""
    return ("hand back", "commit", "neither")[int(uuid.UUID(str(event["id"])).hex[-4:], 16) % 3]
