"""Reference application for rebalance-sidecar: reads its own partitions, keeps state per partition.

The sidecar holds the consumer-group membership; this app reads the partitions it is given
with its own confluent-kafka ``Consumer`` (manual assignment, no group membership) and keeps
the running tally per user of Kafka's ``ConsumerRebalanceListener`` documentation example:

* ``assigned``: start reading each partition at the committed offset carried in the event
  (``offset_status: unknown`` or a re-sync: read the committed offset itself first);
* ``revoked``: stop reading, flush the partition's tallies to the store and answer the position
  as the offset to commit — the sidecar commits it before any other member is told ``assigned``;
* ``lost``: stop reading and drop the tallies (someone else may already own the partition);
* every ``COMMIT_INTERVAL_MS``: flush and commit through ``POST /commit`` (fenced by generation);
  a partition's tallies are also flushed when they grow past ``FLUSH_USERS`` users.

Offsets committed are always positions whose effects were flushed: a crash loses only work that
will be redone (at-least-once, duplicates bounded by the commit interval), never skips records.

For the handover benchmark it writes one line per processed record and per flush to
``RECORD_LOG`` (tab-separated: ``P topic partition offset app time_us``,
``F topic partition app time_us reason position``, and ``L topic partition app time_us`` when a
partition's tallies are dropped unflushed).

Settings (environment): ``WEBHOOK_SECRET`` (whsec_..., required), ``SIDECAR_URL``
(http://127.0.0.1:8080), ``SIDECAR_API_TOKEN``, ``KAFKA_BOOTSTRAP_SERVERS`` (required; else
``SIDECAR_BOOTSTRAP_SERVERS``), ``GROUP_ID`` (the sidecar's group, else ``SIDECAR_GROUP_ID``:
to read committed offsets, never to join), ``HOST``
(0.0.0.0), ``PORT`` (8082: 8080 and 8081 are the sidecar's), ``APP_ID`` (hostname),
``STORE_DIR`` (/var/lib/example-app),
``RECORD_LOG`` (off), ``FLUSH_USERS`` (1000), ``COMMIT_INTERVAL_MS`` (2000).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo, when run from it
from sidecar.subscriber import (
    Assigned,
    CommitFailed,
    EventInfo,
    Fenced,
    Offset,
    Partition,
    SidecarClient,
    Subscriber,
    Watchdog,
    serve,
)
from sidecar.subscriber.trace import export_from_environment

log = logging.getLogger("example-app")


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass
class PartitionState:
    position: int  # the next offset to read
    tallies: dict[str, int] = field(default_factory=dict)
    flushed: int = -1  # position at the last flush: what may be committed


class RecordLog:
    """The benchmark's ground truth: what was processed and flushed, by whom, when."""

    def __init__(self, path: str | None, app_id: str) -> None:
        self.app_id = app_id
        self._file: IO[str] | None = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
        self._lines: list[str] = []

    def processed(self, topic: str, partition: int, offset: int) -> None:
        if self._file is not None:
            self._lines.append(f"P\t{topic}\t{partition}\t{offset}\t{self.app_id}\t{now_us()}\n")

    def flushed(self, tp: Partition, reason: str, position: int) -> None:
        if self._file is not None:
            self._lines.append(
                f"F\t{tp.topic}\t{tp.partition}\t{self.app_id}\t{now_us()}\t{reason}\t{position}\n"
            )

    def dropped(self, tp: Partition) -> None:
        if self._file is not None:
            self._lines.append(f"L\t{tp.topic}\t{tp.partition}\t{self.app_id}\t{now_us()}\n")

    def sync(self) -> None:
        """Hand the lines to the OS (they survive kill -9 of this process)."""
        if self._file is not None and self._lines:
            self._file.write("".join(self._lines))
            self._file.flush()
            self._lines.clear()


class Store:
    """Where tallies go on a flush: one JSON line per partition flush (a stand-in database)."""

    def __init__(self, directory: Path, app_id: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._file = (directory / f"tallies-{app_id}.jsonl").open("a", encoding="utf-8")

    def save(self, tp: Partition, position: int, tallies: dict[str, int]) -> None:
        self._file.write(
            json.dumps(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "position": position,
                    "tallies": tallies,
                }
            )
            + "\n"
        )
        self._file.flush()


class Worker:
    """Owns the ``Consumer`` (one thread calls it); the webhook thread sends it commands."""

    def __init__(
        self,
        consumer: Consumer,
        records: RecordLog,
        store: Store,
        commits: queue.Queue[tuple[int, dict[Partition, int]]],
        flush_users: int,
        commit_interval: float,
    ) -> None:
        self.consumer = consumer
        self.records = records
        self.store = store
        self.commits = commits
        self.flush_users = flush_users
        self.commit_interval = commit_interval
        self.owned: dict[Partition, PartitionState] = {}
        self.waiting: set[Partition] = set()  # assigned, committed offset not known yet
        self.generation = -1
        self.epoch = 0  # bumped on every change of assignment: stale commits are dropped
        self._commands: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker", daemon=True)

    # -- called from other threads -----------------------------------------------------------

    def call(self, action: Callable[[], Any], timeout: float = 30.0) -> Any:
        future: Future[Any] = Future()
        self._commands.put((action, future))
        return future.result(timeout)

    def start(self) -> Worker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    # -- the consumer thread -----------------------------------------------------------------

    def _run(self) -> None:
        self._connect(10.0)
        last_commit = time.monotonic()
        while not self._stop.is_set():
            self._drain_commands()
            if self.waiting:
                self._resolve_waiting()
            if not self.owned:
                self._wait_for_command(0.05)
                continue
            try:
                # poll() returns with the first record; consume(timeout=0) adds what is queued
                # (consume() with a timeout would wait for a full batch).
                first = self.consumer.poll(0.05)
                messages = [] if first is None else [first, *self.consumer.consume(499, 0)]
            except KafkaException as exc:
                log.warning("consume failed: %s", exc)
                continue
            for message in messages:
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if message.error() or topic is None or partition is None or offset is None:
                    continue
                self._process(topic, partition, offset, message.key(), message.value())
            self.records.sync()
            if time.monotonic() - last_commit >= self.commit_interval:
                last_commit = time.monotonic()
                self._flush_and_commit()
        self._drain_commands()
        self._flush_and_commit()
        self.records.sync()

    def _connect(self, seconds: float) -> None:
        """Connect now (the first assignment should not wait for a connection), in short
        tries: a stop while Kafka is unreachable is not held up for ``seconds``."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():
            try:
                self.consumer.list_topics(timeout=0.5)
                return
            except KafkaException as exc:
                if time.monotonic() >= deadline:
                    log.warning("Kafka not reachable yet: %s", exc)
                    return

    def _wait_for_command(self, timeout: float) -> None:
        try:
            action, future = self._commands.get(timeout=timeout)
        except queue.Empty:
            return
        self._run_command(action, future)

    def _run_command(self, action: Callable[[], Any], future: Future[Any]) -> None:
        try:
            future.set_result(action())
        except Exception as exc:
            future.set_exception(exc)

    def _drain_commands(self) -> None:
        while True:
            try:
                action, future = self._commands.get_nowait()
            except queue.Empty:
                return
            self._run_command(action, future)

    def _process(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> None:
        tp = Partition(topic, partition)
        state = self.owned.get(tp)
        if state is None or offset < state.position:
            return  # no longer ours, or a record before our start
        user = (key or b"").decode(errors="replace")
        try:
            amount = int(value or b"1")
        except ValueError:
            amount = 1
        state.tallies[user] = state.tallies.get(user, 0) + amount
        state.position = offset + 1
        self.records.processed(topic, partition, offset)
        if len(state.tallies) >= self.flush_users:
            self._flush(tp, state, "size")

    def _flush(self, tp: Partition, state: PartitionState, reason: str) -> None:
        self.records.sync()  # the records before the flush are on record first
        self.store.save(tp, state.position, state.tallies)
        state.tallies = {}
        state.flushed = state.position
        self.records.flushed(tp, reason, state.position)
        self.records.sync()

    def _flush_and_commit(self) -> None:
        offsets: dict[Partition, int] = {}
        for tp, state in self.owned.items():
            if state.tallies:
                self._flush(tp, state, "commit")
            if state.flushed >= 0:
                offsets[tp] = state.flushed
        if offsets:
            self.commits.put((self.epoch, offsets))

    def _resolve_waiting(self) -> None:
        wanted = sorted(self.waiting)
        try:
            found = self.consumer.committed(
                [TopicPartition(tp.topic, tp.partition) for tp in wanted], timeout=5
            )
        except KafkaException as exc:
            log.warning("reading committed offsets failed (will retry): %s", exc)
            return
        start = [
            Assigned(
                tp.topic,
                tp.partition,
                f.offset if f.offset >= 0 else None,
                "committed" if f.offset >= 0 else "none",
            )
            for tp, f in zip(wanted, found, strict=True)
        ]
        self.waiting.clear()
        self._start(start)

    def _start(self, partitions: list[Assigned]) -> None:
        request = []
        for p in partitions:
            offset = p.offset if p.offset is not None else OFFSET_BEGINNING
            self.owned[p.tp] = PartitionState(position=p.offset or 0, flushed=-1)
            request.append(TopicPartition(p.topic, p.partition, offset))
            log.info("reading %s[%d] from %s", p.topic, p.partition, p.offset)
        if request:
            self.consumer.incremental_assign(request)

    def _stop_reading(self, partitions: list[Partition]) -> list[Partition]:
        self.epoch += 1
        gone = [tp for tp in partitions if tp in self.owned]
        for tp in partitions:
            self.waiting.discard(tp)
        if gone:
            self.consumer.incremental_unassign(
                [TopicPartition(tp.topic, tp.partition) for tp in gone]
            )
        return gone

    # -- commands (run on this thread) -------------------------------------------------------

    def assign(self, partitions: list[Assigned], generation: int) -> None:
        self.epoch += 1
        self.generation = generation
        known = [p for p in partitions if p.status != "unknown"]
        self.waiting |= {p.tp for p in partitions if p.status == "unknown"}
        self._start(known)

    def revoke(self, partitions: list[Partition]) -> list[Offset]:
        offsets = []
        for tp in self._stop_reading(partitions):
            state = self.owned.pop(tp)
            self._flush(tp, state, "revoke")
            offsets.append(Offset(tp.topic, tp.partition, state.position))
        return offsets

    def lose(self, partitions: list[Partition]) -> None:
        for tp in self._stop_reading(partitions):
            self.owned.pop(tp)  # the tallies are dropped: someone else redoes this work
            self.records.dropped(tp)
        self.records.sync()


class App:
    """The rebalance listener: each callback is a command run on the worker thread."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def on_assigned(self, partitions: list[Assigned], info: EventInfo) -> None:
        self.worker.call(lambda: self.worker.assign(partitions, info.generation_id))

    def on_revoked(self, partitions: list[Partition], info: EventInfo) -> list[Offset]:
        offsets: list[Offset] = self.worker.call(lambda: self.worker.revoke(partitions))
        return offsets

    def on_lost(self, partitions: list[Partition], info: EventInfo) -> None:
        log.warning("lost %d partitions (%s): state dropped", len(partitions), info.reason)
        self.worker.call(lambda: self.worker.lose(partitions))


def committer(
    client: SidecarClient,
    worker: Worker,
    commits: queue.Queue[tuple[int, dict[Partition, int]]],
    stop: threading.Event,
) -> None:
    """Periodic commits, off the worker thread: a commit can wait for a rebalance to finish."""
    while not stop.is_set() or not commits.empty():
        try:
            epoch, offsets = commits.get(timeout=0.2)
        except queue.Empty:
            continue
        if epoch != worker.epoch:
            continue  # the assignment changed since: the revoke answer committed instead
        try:
            client.commit(
                [Offset(tp.topic, tp.partition, o) for tp, o in sorted(offsets.items())],
                generation_id=worker.generation,
            )
        except Fenced as exc:
            log.info("commit fenced (the member moved on): %s", exc)
        except CommitFailed as exc:
            log.warning("commit failed: %s", exc)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    env = os.environ
    secret = env.get("WEBHOOK_SECRET", "")
    # Beside the sidecar, its own settings say where Kafka is and which group it holds.
    bootstrap = env.get("KAFKA_BOOTSTRAP_SERVERS") or env.get("SIDECAR_BOOTSTRAP_SERVERS", "")
    if not secret.startswith("whsec_") or not bootstrap:
        print(
            "WEBHOOK_SECRET (whsec_...) and KAFKA_BOOTSTRAP_SERVERS are required", file=sys.stderr
        )
        return 2
    app_id = env.get("APP_ID") or socket.gethostname()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # Only to read the group's committed offsets: this consumer never joins the group.
            "group.id": env.get("GROUP_ID") or env.get("SIDECAR_GROUP_ID", "example-app"),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
        }
    )
    records = RecordLog(env.get("RECORD_LOG"), app_id)
    store = Store(Path(env.get("STORE_DIR", "/var/lib/example-app")), app_id)
    commits: queue.Queue[tuple[int, dict[Partition, int]]] = queue.Queue()
    worker = Worker(
        consumer,
        records,
        store,
        commits,
        flush_users=int(env.get("FLUSH_USERS", "1000")),
        commit_interval=int(env.get("COMMIT_INTERVAL_MS", "2000")) / 1000,
    ).start()
    export_from_environment(env, env.get("OTEL_SERVICE_NAME") or "example-app")
    subscriber = Subscriber(secret, App(worker))
    client = SidecarClient(
        env.get("SIDECAR_URL", "http://127.0.0.1:8080"), env.get("SIDECAR_API_TOKEN")
    )
    # All interfaces: in a pod the sidecar and the kubelet reach the pod IP. Events are signed.
    server = serve(subscriber, env.get("HOST", "0.0.0.0"), int(env.get("PORT", "8082")))  # noqa: S104
    watchdog = Watchdog(subscriber, client).start()
    stop_commits = threading.Event()
    commit_thread = threading.Thread(
        target=committer, args=(client, worker, commits, stop_commits), daemon=True
    )
    commit_thread.start()

    def stop(signum: int, frame: FrameType | None) -> None:
        # By now the preStop hook has drained the sidecar: revoked was handled.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("%s listening on %s:%d", app_id, *server.server_address[:2])
    server.serve_forever()
    watchdog.stop()
    worker.stop()  # flushes and queues a last commit of what it still owns
    stop_commits.set()
    commit_thread.join(10)
    server.server_close()
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
