"""A bare confluent-kafka group member: what an application would run in process.

Same settings as the sidecar's consumer (auto-commit off, the same group timeouts and
strategy) and the same poll loop as ``GroupMember._session``: ``poll()`` (0.1 s in the
rebalance sections; the sidecar's own poll timeout for the idle floor of the footprint
section), commands between polls, and the member id / group metadata read every 0.5 s.
That last read matters for timing: it wakes librdkafka's main thread, which is where heartbeats are
sent (on an idle, paused consumer that thread otherwise sleeps up to 1 s, so the member
notices a rebalance later). The callbacks do what the sidecar's do minus the sidecar's
work: assign and pause (the sidecar holds membership without fetching), nothing else.
A rebalance is triggered the way ``GroupMember._rejoin`` does it: eager,
``unsubscribe()`` + ``subscribe()``; cooperative, a subscription change adding a fresh
missing topic name (as sidecar/member.py does).
"""

from __future__ import annotations

import json
import queue
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from bench.common import REPO
from sidecar.member import generation_of

IDENTITY_READ_SECONDS = 0.5  # sidecar.member._IDENTITY_CHECK_SECONDS


@dataclass(frozen=True)
class Assigned:
    at: float  # time.time() when on_assign returned
    generation: int
    assignment: int  # partitions owned after it


class BareMember:
    """One member on its own poll thread (in this process; see ``BareProcess``)."""

    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        cooperative: bool,
        report: Callable[[dict[str, Any]], None] | None = None,
        poll_seconds: float = 0.1,
    ) -> None:
        self.poll_seconds = poll_seconds
        self.config = {
            **config,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
        self.topic = topic
        self.cooperative = cooperative
        self.created_at = 0.0
        self.assigned: list[Assigned] = []
        self.triggered: list[float] = []
        self._report = report
        self._lock = threading.Lock()
        self._commands: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bare-member", daemon=True)

    def start(self) -> BareMember:
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Stop without waiting (stop several members at once, then ``stop()`` each)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def rejoin(self) -> None:
        """Ask the poll thread to force a rebalance (it stamps when it does)."""
        self._commands.put("rejoin")

    def history(self) -> list[Assigned]:
        with self._lock:
            return list(self.assigned)

    def _run(self) -> None:
        self.created_at = time.time()
        consumer = Consumer(self.config)
        self._subscribe(consumer)
        # Independent processes have independent timers: start this loop's cadence at a
        # random phase, or members started together would wake librdkafka in lockstep.
        next_identity_read = time.monotonic() + random.uniform(0, IDENTITY_READ_SECONDS)
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_identity_read:  # as GroupMember._session does
                    next_identity_read = now + IDENTITY_READ_SECONDS
                    consumer.memberid()
                    consumer.consumer_group_metadata()
                try:
                    while True:
                        self._commands.get_nowait()
                        at = time.time()
                        with self._lock:
                            self.triggered.append(at)
                        if self._report is not None:
                            self._report({"kind": "triggered", "at": at})
                        self._rejoin(consumer)
                except queue.Empty:
                    pass
                consumer.poll(self.poll_seconds)
        finally:
            consumer.close()

    def _subscribe(self, consumer: Consumer, extra: tuple[str, ...] = ()) -> None:
        topics = self.topic.split(",")  # one topic, or several comma-separated
        consumer.subscribe([*topics, *extra], on_assign=self._on_assign)

    def _rejoin(self, consumer: Consumer) -> None:
        if not self.cooperative:
            consumer.unsubscribe()
            self._subscribe(consumer)
        else:
            self._subscribe(consumer, (f"__bench_rejoin_{uuid.uuid4().hex}",))

    def _on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        if self.cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        generation = generation_of(bytes(consumer.consumer_group_metadata()))
        owned = len(consumer.assignment())
        found = Assigned(time.time(), generation, owned)
        with self._lock:
            self.assigned.append(found)
        if self._report is not None:
            self._report({"kind": "assigned", **asdict(found)})


class BareProcess:
    """A ``BareMember`` in a process of its own, as each sidecar is: no shared GIL.

    It reports its assignments and triggers as JSON lines on stdout; "rejoin" on stdin
    forces a rebalance, closing stdin stops it.
    """

    def __init__(
        self, config: dict[str, Any], topic: str, cooperative: bool, poll_seconds: float = 0.1
    ) -> None:
        self.assigned: list[Assigned] = []
        self.triggered: list[float] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.bare",
                json.dumps(config),
                topic,
                "cooperative" if cooperative else "eager",
                str(poll_seconds),
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)

    def start(self) -> BareProcess:
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            found = json.loads(line)
            with self._lock:
                if found.pop("kind") == "assigned":
                    self.assigned.append(Assigned(**found))
                else:
                    self.triggered.append(float(found["at"]))

    def rejoin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("rejoin\n")
        self.process.stdin.flush()

    def history(self) -> list[Assigned]:
        with self._lock:
            return list(self.assigned)

    def request_stop(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()

    def stop(self) -> None:
        self.request_stop()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._reader.join(10)


def main() -> None:
    config, topic, protocol = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    poll_seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
    lock = threading.Lock()

    def report(found: dict[str, Any]) -> None:
        with lock:
            print(json.dumps(found), flush=True)

    member = BareMember(config, topic, protocol == "cooperative", report, poll_seconds).start()
    for line in sys.stdin:
        if line.strip() == "rejoin":
            member.rejoin()
    member.stop()


if __name__ == "__main__":
    main()
