"""The chaos run: a private broker, sidecars with real subscribers, a seeded fault schedule.

Each member is one application pod (see ``member``). The run: start everything, wait
for a stable group, play the plan (faults and the steps that undo them) in real time,
restore whatever is still broken, wait for the group to cover every partition, let every
subscriber catch up, drain every member (so the final ``revoked`` events go through the
barrier), stop them with SIGTERM, and judge what the journals, delivery logs, receivers
and process logs say (see ``invariants``).
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.chaos import invariants
from tests.chaos.broker import Broker, BrokerError, free_port_pair
from tests.chaos.member import Cluster, Member
from tests.chaos.plan import BROKER, LINK_KINDS, Kind, Step, plan
from tests.chaos.report import Report
from tests.support.kafka import create_topic
from tests.support.sidecars import covers
from tests.support.toxiproxy import Toxiproxy

# What a callback may add to the revoke timeout. A revoke callback's commits of handed-back
# offsets end by its start + the revoke timeout + SIDECAR_COMMIT_TIMEOUT_MS (the members'
# COMMIT_TIMEOUT_MS: 5 s); reading committed offsets on assignment is bounded the same
# (committed_timeout_ms: 5 s); then journaling and publishing (2 s, a loaded machine).
PROTOCOL_ALLOWANCE_SECONDS = 7.0
# The group session timeout, both protocols (librdkafka's session.timeout.ms for the
# classic one; the broker's group.consumer.session.timeout.ms for KIP-848).
SESSION_TIMEOUT_MS = 6000
# From "everything restored" to "every partition owned by a stable member, one generation":
# a session timeout (6 s), a rebalance that waits for slow joiners, member start-up.
RECOVERY_BOUND_SECONDS = 120.0


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    workdir: Path
    members: int = 4
    statics: int = 2  # the first `statics` members have a group.instance.id
    faults: int = 200
    seconds: float = 1200.0
    strategy: str = "range"
    protocol: str = "classic"  # or "consumer" (KIP-848: the broker assigns, no strategy)
    partitions: int = 12
    revoke_timeout_ms: int = 3000
    port: int | None = None  # broker port (and port+1 for its controller); None: any free
    stops_in_pauses: bool = False  # also stop members while the broker is paused (plan)

    def __post_init__(self) -> None:
        if not 2 <= self.members <= 8:
            raise ValueError("members must be 2..8")
        if not 0 <= self.statics <= self.members:
            raise ValueError("statics must be 0..members")
        if self.protocol not in ("classic", "consumer"):
            raise ValueError("protocol must be classic or consumer")

    @property
    def assignor(self) -> str:
        return self.strategy if self.protocol == "classic" else "KIP-848 (consumer protocol)"


@dataclass(frozen=True)
class Applied:
    step: Step
    started: float
    seconds: float
    outcome: str


class Worker(threading.Thread):
    """Runs one target's steps in order (a member, or the broker), off the timeline."""

    def __init__(self, name: str, on_error: Callable[[str], None]) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._on_error = on_error

    def submit(self, work: Callable[[], None]) -> None:
        self._queue.put(work)

    def run(self) -> None:
        while True:
            work = self._queue.get()
            try:
                if work is None:
                    return
                work()
            except Exception as exc:  # a harness bug must not hang the run
                self._on_error(f"{self.name}: {type(exc).__name__}: {exc}")
            finally:
                self._queue.task_done()

    def idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.2)
        return not self._queue.unfinished_tasks

    def close(self) -> None:
        self._queue.put(None)


@dataclass
class ChaosRun:
    config: ChaosConfig
    progress: Callable[[str], None] = print
    report: Report = field(init=False)
    applied: list[Applied] = field(default_factory=list)
    group: str = field(init=False)

    def __post_init__(self) -> None:
        c = self.config
        self.group = f"chaos-{c.seed}-{uuid.uuid4().hex[:6]}"
        self.report = Report(
            f"chaos run: seed {c.seed}, {c.members} members ({c.statics} static), "
            f"{c.assignor}, {c.faults} faults planned over {c.seconds:.0f} s, "
            f"revoke timeout {c.revoke_timeout_ms} ms"
        )
        self.members: list[Member] = []
        self._stop_monitor = threading.Event()

    # -- the whole run -----------------------------------------------------------------------

    def execute(self) -> Report:
        c = self.config
        c.workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        toxiproxy = Toxiproxy(c.workdir / "toxiproxy.log").start()
        broker = Broker(
            c.port or free_port_pair(),
            c.workdir / "kafka",
            links=c.members,
            toxiproxy=toxiproxy,
            session_timeout_ms=SESSION_TIMEOUT_MS,
        )
        self.broker = broker
        monitor = threading.Thread(target=self._monitor, name="chaos-monitor", daemon=True)
        run_ended = time.time()
        try:
            self.progress(f"starting a private broker on {broker.bootstrap}")
            bootstrap = broker.start()
            self.cluster = Cluster(
                bootstrap,
                self.group,
                create_topic(bootstrap, c.partitions),
                c.strategy,
                c.revoke_timeout_ms,
                c.workdir,
                c.protocol,
                SESSION_TIMEOUT_MS,
            )
            self.members = [
                Member(i, self.cluster, i < c.statics, self.report.api_errors, broker.links[i])
                for i in range(c.members)
            ]
            for member in self.members:
                member.subscriber_up("app")
                member.subscriber_up("audit")
            for member in self.members:
                self.progress(f"{member.name}: {member.start()}")
            self._wait_covered(90, "initial group")
            monitor.start()
            self._play(
                plan(c.seed, c.members, c.faults, c.seconds, stops_in_pauses=c.stops_in_pauses)
            )
            self._settle()
            run_ended = time.time()
        except Exception as exc:
            self.report.notes.append(f"run aborted: {type(exc).__name__}: {exc}")
            self.report.api_errors.append(f"harness: run aborted: {exc}")
            run_ended = time.time()
        finally:
            self._stop_monitor.set()
            if monitor.is_alive():
                monitor.join(10)
            for member in self.members:
                if member.sidecar is not None:
                    member.terminate("final SIGTERM")
                for kind in ("app", "audit"):
                    member.subscriber_down(kind)
            try:
                broker.stop()
            except BrokerError as exc:
                self.report.notes.append(f"broker stop: {exc}")
            toxiproxy.stop()
        self.report.seconds = time.monotonic() - began
        self._judge(run_ended)
        return self.report

    def _play(self, steps: list[Step]) -> None:
        # A member's link has a worker of its own: healing it must not wait behind a
        # command the member is slow to answer (because of that very link).
        workers: dict[str, Worker] = {
            name: Worker(name, self.report.api_errors.append)
            for name in [m.name for m in self.members]
            + [f"{m.name}-link" for m in self.members]
            + [BROKER]
        }
        for worker in workers.values():
            worker.start()
        started = time.monotonic()
        self.progress(f"playing {len(steps)} steps")
        try:
            for step in steps:
                delay = started + step.at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                target = step.target.split("/")[0]
                if step.kind in LINK_KINDS:
                    target = f"{target}-link"
                if target in workers:
                    workers[target].submit(lambda step=step: self._apply(step))  # type: ignore[misc]
                else:
                    self._apply(step)
            for worker in workers.values():
                if not worker.idle(300):
                    self.report.notes.append(f"{worker.name} still busy after the plan")
        finally:
            for worker in workers.values():
                worker.close()

    def _apply(self, step: Step) -> None:
        started = time.time()
        try:
            outcome = self._do(step)
        except BrokerError as exc:
            outcome = f"error: {str(exc).splitlines()[0]}"
            self.report.notes.append(f"{step.describe()}: {exc}")
        took = time.time() - started
        self.applied.append(Applied(step, started, took, outcome))
        if step.kind.fault:
            if outcome == "skipped":
                self.report.skipped[step.kind.value] += 1
            else:
                self.report.faults[step.kind.value] += 1
        self.progress(f"{step.describe():<48} -> {outcome} [{took:.1f} s]")

    def _do(self, step: Step) -> str:
        kind = step.kind
        if step.target == BROKER:
            if kind is Kind.BROKER_PAUSE:
                self.broker.pause()
            elif kind is Kind.BROKER_RESUME:
                self.broker.resume()
            else:
                self.broker.restart()
            return "done"
        name, _, subscriber = step.target.partition("/")
        member = self.members[int(name[1:])]
        if kind is Kind.KILL:
            return member.kill()
        if kind is Kind.TERM:
            return member.terminate()
        if kind is Kind.START:
            return member.start()
        if kind in (Kind.ENFORCE, Kind.SLOW_ASSIGNMENT):
            return member.enforce(f"chaos step at t+{step.at:.1f}s")
        if kind is Kind.LINK_CUT:
            member.link.cut()
            return "cut"
        if kind is Kind.LINK_SLOW:
            member.link.slow(int(step.value))
            return f"answers {step.value:.0f} ms late"
        if kind is Kind.LINK_HEAL:
            member.link.heal()
            return "healed"
        if kind is Kind.SUBSCRIBER_DOWN:
            return member.subscriber_down(subscriber)
        if kind is Kind.SUBSCRIBER_UP:
            return member.subscriber_up(subscriber)
        if kind is Kind.SUBSCRIBER_SLOW:
            member.delay[subscriber] = step.value
            return f"answers after {step.value:.1f} s"
        member.delay[subscriber] = 0.0
        return "answers at once"

    def _monitor(self) -> None:
        rounds = 0
        while not self._stop_monitor.wait(1.0):
            rounds += 1
            for member in self.members:
                member.check()
                if rounds % 5 == 0:
                    member.scrape()

    # -- the end ----------------------------------------------------------------------------

    def _settle(self) -> None:
        self.progress("restoring: broker, subscribers, members")
        if self.broker.paused:
            self.broker.resume()
        if not self.broker.running():
            self.broker.start()
        for member in self.members:
            member.link.heal()
            member.delay.update(app=0.0, audit=0.0)
            member.subscriber_up("app")
            member.subscriber_up("audit")
        for member in self.members:
            if member.sidecar is None:
                self.progress(f"{member.name}: {member.start()}")
        restored = time.monotonic()
        self.report.recovery_bound = RECOVERY_BOUND_SECONDS
        if self._wait_covered(RECOVERY_BOUND_SECONDS * 1.5, "recovery"):
            self.report.recovery_seconds = time.monotonic() - restored
            self.progress(f"recovered in {self.report.recovery_seconds:.1f} s")
        self._wait_caught_up(180)
        self.progress("draining every member")
        answers: list[str] = []

        def drain(member: Member) -> None:
            sidecar = member.sidecar
            if sidecar is None:
                return
            try:
                response = sidecar.client.post("/drain", params={"deadline": 90}, timeout=120)
            except httpx.HTTPError as exc:
                answers.append(f"{member.name}: no answer ({exc})")
                return
            if response.status_code != 200:
                answers.append(f"{member.name}: {response.status_code} {response.text[:200]}")

        threads = [threading.Thread(target=drain, args=(m,)) for m in self.members]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(150)
        self.report.api_errors.extend(f"POST /drain: {a}" for a in answers)
        self._wait_caught_up(120)
        for member in self.members:
            member.scrape()
        stoppers = [
            threading.Thread(target=m.terminate, args=("final SIGTERM",)) for m in self.members
        ]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(120)

    def _wait_covered(self, timeout: float, what: str) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sidecars = [m.sidecar for m in self.members]
            if all(s is not None for s in sidecars) and covers(
                [s for s in sidecars if s is not None], self.cluster.topic, self.config.partitions
            ):
                return True
            time.sleep(0.5)
        self.report.notes.append(f"{what}: partitions not all owned within {timeout:.0f} s")
        return False

    def _wait_caught_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending: dict[str, int] = {}
        while time.monotonic() < deadline:
            pending = {m.name: m.pending() for m in self.members}
            if all(n == 0 for n in pending.values()):
                return
            time.sleep(0.5)
        self.report.notes.append(f"subscribers not caught up within {timeout:.0f} s: {pending}")

    # -- the verdict ------------------------------------------------------------------------

    def _judge(self, run_ended: float) -> None:
        report = self.report
        if not self.members:
            return
        records = [m.record() for m in self.members]
        invariants.check_delivery(report, records)
        invariants.check_ownership(
            report,
            records,
            self.broker.outages,
            run_ended,
            group_generations=self.config.protocol == "classic",
        )
        scrapes = [text for m in self.members for text in m.scrapes.values()]
        invariants.check_stalls(
            report,
            records,
            scrapes,
            self.config.revoke_timeout_ms / 1000 + PROTOCOL_ALLOWANCE_SECONDS,
        )
        invariants.check_processes(report, records)
        enforced = Counter(a.outcome for a in self.applied if a.step.kind is Kind.ENFORCE)
        if enforced:
            report.notes.append(
                "enforce-rebalance answers: "
                + ", ".join(f"{k} x{n}" for k, n in sorted(enforced.items()))
            )
        slowest = sorted(
            (a for a in self.applied if a.step.kind in (Kind.TERM, Kind.BROKER_RESTART)),
            key=lambda a: -a.seconds,
        )[:3]
        for applied in slowest:
            report.notes.append(
                f"slow step: {applied.step.kind.value} {applied.step.target} took "
                f"{applied.seconds:.1f} s ({applied.outcome})"
            )
        links = [o for m in self.members for o in m.link.outages]
        if links:
            report.notes.append(
                "link faults: "
                + ", ".join(
                    f"{kind} x{sum(1 for o in links if o.kind == kind)}, longest "
                    f"{max(o.ended - o.started for o in links if o.kind == kind):.1f} s"
                    for kind in sorted({o.kind for o in links})
                )
            )
        outages = self.broker.outages
        if outages:
            report.notes.append(
                "broker outages: "
                + ", ".join(f"{o.kind} {o.ended - o.started:.1f} s" for o in outages)
            )


def run_chaos(config: ChaosConfig, progress: Callable[[str], None] = print) -> Report:
    return ChaosRun(config, progress).execute()
