"""The handover run: produce continuously while fleets process the topic under churn.

Each contender is a fleet of members in its own consumer group on the same topic, started at
the topic's end (the group's offsets are committed there first). The churn steps are applied
to every fleet at the same moments; afterwards the producer stops, the fleets catch up, leave
gracefully, and their record logs are counted (:mod:`bench.handover.analysis`).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.handover.analysis import Counts, count, read_logs
from bench.handover.members import (
    DaprMember,
    JavaMember,
    Member,
    Shared,
    SidecarMember,
    java_classes,
)

GRACEFUL = ["enforce", "join", "leave", "restart"]
CHAOS = ["kill_app", "kill_sidecar"]
# A rolling migration: each step restarts the next member under the other group protocol.
MIGRATION = {"to_consumer": "consumer", "to_classic": "classic"}
CONTENDERS = {
    "python": "rebalance-sidecar + Python app",
    "go": "rebalance-sidecar + Go app",
    "java": "Java consumer + ConsumerRebalanceListener",
    "dapr": "Dapr pubsub.kafka (daprd) + app",
}


@dataclass
class Footprint:
    sidecar_rss: float = 0.0  # bytes, mean per member
    sidecar_cpu: float = 0.0  # % of a core, mean per member
    app_rss: float = 0.0
    app_cpu: float = 0.0


@dataclass
class FleetResult:
    contender: str
    group: str
    counts: Counts
    footprint: Footprint
    skipped: list[str] = field(default_factory=list)  # churn steps this contender cannot do
    steps: list[tuple[str, float, float]] = field(default_factory=list)  # (name, began, ended)


class Producer_:
    """Keyed records (a user id, an amount) at a steady rate, on a thread."""

    def __init__(self, bootstrap: str, topic: str, rate: float, users: int = 5000) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self.topic = topic
        self.rate = rate
        self.users = users
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> Producer_:
        self._thread.start()
        return self

    def _run(self) -> None:
        rng = random.Random(14)
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                key = f"user-{rng.randrange(self.users)}"
                self.producer.produce(self.topic, key=key, value=str(rng.randint(1, 9)))
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)
    for _ in range(100):
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic and topic.error is None and len(topic.partitions) == partitions:
            return
        time.sleep(0.1)


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "handover-watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def commit_start(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Start the (empty) group at these offsets: commit them from outside the group."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


class Fleet:
    def __init__(
        self,
        contender: str,
        shared: Shared,
        size: int,
        work: Path,
        protocol: str = "classic",
        strategy: str = "range",
    ) -> None:
        self.contender = contender
        self.shared = shared
        self.members: list[Member] = []
        classes = java_classes(work) if contender == "java" else None
        for i in range(size + 1):  # the last one joins during the churn
            name = f"{contender}-{i}"
            member: Member
            if contender in ("python", "go"):
                member = SidecarMember(shared, name, contender)
            elif contender == "java":
                assert classes is not None
                member = JavaMember(shared, name, classes)
            elif contender == "dapr":
                member = DaprMember(shared, name)
            else:
                raise ValueError(f"unknown contender {contender}")
            member.protocol, member.strategy = protocol, strategy
            self.members.append(member)
        self.size = size
        self.migrated = 0  # migration steps done: the next one restarts the next member
        self.skipped: list[str] = []
        self.live: list[Member] = []

    def start(self) -> None:
        for member in self.members[: self.size]:
            member.start()
            self.live.append(member)

    def step(self, name: str) -> None:
        """One churn step; members are chosen by position so every fleet does the same."""
        if name in MIGRATION:
            member = self.live[self.migrated % len(self.live)]
            self.migrated += 1
            if "restart" in member.unsupported:
                self.skipped.append(name)
                return
            member.protocol = MIGRATION[name]
            member.restart()
            return
        if name == "join":
            joining = self.members[self.size]
            joining.start()
            self.live.append(joining)
            return
        target = {
            "enforce": 0,
            "leave": 1,
            "restart": 2 % self.size,
            "kill_app": 0,
            "kill_sidecar": 1 % self.size,
        }[name]
        member = self.members[target]
        if name in member.unsupported:
            self.skipped.append(name)
            return
        if name == "enforce":
            member.enforce()
        elif name == "leave":
            member.leave()
            self.live.remove(member)
        elif name == "restart":
            member.restart()
        elif name == "kill_app":
            member.kill_app()
        elif name == "kill_sidecar":
            member.kill_sidecar()

    def stop(self) -> None:
        for member in reversed(self.members):  # also any caught half-way through a start
            with contextlib.suppress(Exception):  # best effort at the end of a run
                member.stop()
        self.live.clear()

    def footprint(self, seconds: float) -> Footprint:
        """Mean RSS and CPU per member and role, over ``seconds`` of steady processing."""
        processes: dict[str, list[psutil.Process]] = {"app": [], "sidecar": []}
        for member in self.live:
            for role, pid in member.pids().items():
                processes[role].append(psutil.Process(pid))
        before = {p.pid: p.cpu_times() for ps in processes.values() for p in ps}
        started = time.monotonic()
        rss: dict[str, list[int]] = {"app": [], "sidecar": []}
        while time.monotonic() - started < seconds:
            for role, ps in processes.items():
                rss[role].append(sum(p.memory_info().rss for p in ps))
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        result = Footprint()
        for role, ps in processes.items():
            if not ps:
                continue
            cpu = 0.0
            for p in ps:
                after = p.cpu_times()
                cpu += (after.user - before[p.pid].user) + (after.system - before[p.pid].system)
            mean_rss = sum(rss[role]) / max(1, len(rss[role])) / len(ps)
            if role == "app":
                result.app_rss, result.app_cpu = mean_rss, 100 * cpu / elapsed / len(ps)
            else:
                result.sidecar_rss, result.sidecar_cpu = mean_rss, 100 * cpu / elapsed / len(ps)
        return result


def _processing_everywhere(shared: Shared, partitions: int, since: float) -> bool:
    processed = read_logs(shared.work / "records")[0]
    return all(
        any(p.time >= since for p in processed.get((shared.topic, i), [])[-50:])
        for i in range(partitions)
    )


def _caught_up(shared: Shared, end: dict[int, int]) -> bool:
    effective = read_logs(shared.work / "records")[3]
    for partition, last in end.items():
        seen = {p.offset for p in effective.get((shared.topic, partition), [])}
        if last > 0 and (last - 1) not in seen:
            return False
    return True


def run_handover(
    bootstrap: str,
    work: Path,
    contenders: list[str],
    *,
    steps: list[str],
    members: int = 3,
    partitions: int = 6,
    rate: float = 300.0,
    step_seconds: float = 8.0,
    footprint_seconds: float = 5.0,
    say: Callable[[str], None] = print,
    producer: Producer_ | None = None,
    protocol: str = "classic",
    strategy: str = "range",
    after_step: Callable[[str, list[str]], None] | None = None,
) -> list[FleetResult]:
    """Run the contenders' fleets side by side under the same churn; count each.

    Without ``producer``, a topic and a producer of its own; with one (already started),
    its topic, from its current end, and the producer is left running. ``protocol`` and
    ``strategy``: every member's group protocol and (classic) assignment strategy at start.
    """
    stamp = f"{int(time.time())}-{random.randrange(1 << 16):04x}"
    own = producer is None
    if producer is None:
        topic = f"handover-{stamp}"
        create_topic(bootstrap, topic, partitions)
        producer = Producer_(bootstrap, topic, rate).start()
    topic = producer.topic
    fleets: list[Fleet] = []
    starts: dict[str, dict[int, int]] = {}
    try:
        time.sleep(1.0)
        start = watermarks(bootstrap, topic, partitions)
        for contender in contenders:
            group = f"handover-{contender}-{stamp}"
            commit_start(bootstrap, group, topic, start)
            starts[contender] = start
            shared = Shared(bootstrap, group, topic, work / f"{contender}-{stamp}")
            fleets.append(Fleet(contender, shared, members, work, protocol, strategy))
        say(
            f"  topic {topic}: {partitions} partitions, {producer.rate:.0f} records/s; "
            f"fleets of {members}"
        )
        with ThreadPoolExecutor(max_workers=len(fleets)) as pool:
            list(pool.map(lambda f: f.start(), fleets))
            since = time.time()
            for fleet in fleets:
                try:
                    _wait(partial(_processing_everywhere, fleet.shared, partitions, since), 90)
                except TimeoutError:
                    say(f"  {fleet.contender}: not processing every partition after 90 s")
            footprints = list(pool.map(lambda f: f.footprint(footprint_seconds), fleets))
            windows: list[tuple[str, float, float]] = []
            for name in steps:
                began = time.time()
                say(f"  step {name}")
                list(pool.map(partial(Fleet.step, name=name), fleets))
                time.sleep(step_seconds)
                if after_step is not None:  # a test's look at the groups (their names)
                    after_step(name, [fleet.shared.group for fleet in fleets])
                windows.append((name, began, time.time()))
        if own:
            producer.stop()
        end = watermarks(bootstrap, topic, partitions)
        for fleet in fleets:
            try:
                _wait(partial(_caught_up, fleet.shared, end), 90)
            except TimeoutError:
                say(f"  {fleet.contender}: not caught up after 90 s")
    finally:
        if own:
            producer.stop()
        with ThreadPoolExecutor(max_workers=max(1, len(fleets))) as pool:
            list(pool.map(lambda f: f.stop(), fleets))
    results = []
    for fleet, footprint in zip(fleets, footprints, strict=True):
        ranges = {(topic, p): (starts[fleet.contender][p], end[p]) for p in range(partitions)}
        # A step this contender cannot do (Dapr has no enforce) measures nothing: left out.
        done = [w for w in windows if w[0] not in fleet.skipped]
        counts = count(fleet.shared.work / "records", ranges, done)
        results.append(
            FleetResult(fleet.contender, fleet.shared.group, counts, footprint, fleet.skipped, done)
        )
    return results


def _wait(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError
