"""How far behind each partition is: committed offset, high watermark and lag.

Read by a ``Consumer`` of the group that never subscribes (``reader_client``: it never
joins, it only asks, with ``committed`` and ``get_watermark_offsets``), never through the
member's ``Consumer`` (it belongs to the consumer thread). Not through the AdminClient's
``list_consumer_group_offsets`` and ``list_offsets``: their requests, timed out during a
broker pause, aborted the process inside librdkafka when the broker came back (see
``reader_client``). Lag is ``max(high watermark - committed, 0)``, as Redpanda Console and
``kafka-consumer-groups.sh --describe`` compute it; ``None`` where either side is unknown
(nothing committed, or Kafka did not answer).

A read never raises and never leaves an exception unretrieved: the blocking calls run in a
worker thread within one deadline, whatever did not answer is marked unavailable, and the
loop-side future of a read is settled by a done callback that retrieves its outcome even
when no request awaits it (a scrape's refresh). A broker that pauses makes the figures
``available: false``; it is never a 500, and never a "Task exception was never retrieved"
in the log (the cause of a failed CI run before this module existed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.model import Assignment, TopicPartition, rfc3339
from sidecar.rebalance_history import RebalanceHistory
from sidecar.settings import Settings

log = structlog.get_logger("sidecar.positions")

#: The same bound as ``/group``'s description (``sidecar.web.group.CACHE_SECONDS``).
CACHE_SECONDS = 2.0
#: One read's deadline: both requests, all their futures.
READ_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Position:
    topic: str
    partition: int
    committed: int | None  # None: nothing committed, or not read
    high_watermark: int | None  # None: not read
    lag: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "committed": self.committed,
            "high_watermark": self.high_watermark,
            "lag": self.lag,
        }


@dataclass(frozen=True, slots=True)
class Positions:
    """One read of a set of partitions; ``available`` is false when any part failed."""

    partitions: tuple[Position, ...]
    available: bool
    error: str | None
    read_at: float  # unix time

    def as_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "error": self.error,
            "read_at": rfc3339(self.read_at),
            "partitions": [p.as_dict() for p in self.partitions],
        }

    def by_partition(self) -> dict[tuple[str, int], Position]:
        return {(p.topic, p.partition): p for p in self.partitions}


def lag_of(committed: int | None, high_watermark: int | None) -> int | None:
    if committed is None or high_watermark is None:
        return None
    return max(high_watermark - committed, 0)


def read_positions(
    reader: Consumer,
    partitions: Iterable[TopicPartition],
    timeout: float = READ_TIMEOUT_SECONDS,
) -> Positions:
    """Blocking: the positions of ``partitions`` in ``reader``'s group. Never raises.

    ``reader`` is a ``Consumer`` of the group that never subscribes (``reader_client``):
    it never joins, it only asks (``committed``: OffsetFetch; ``get_watermark_offsets``:
    ListOffsets), each call within what is left of one deadline.
    """
    wanted = sorted(set(partitions))
    now = time.time()
    if not wanted:
        return Positions((), True, None, now)
    deadline = time.monotonic() + timeout
    errors: list[str] = []
    committed: dict[tuple[str, int], int | None] = {}
    watermarks: dict[tuple[str, int], int] = {}

    def left() -> float:
        return max(deadline - time.monotonic(), 0.001)

    request = [KafkaTopicPartition(tp.topic, tp.partition) for tp in wanted]
    try:
        for answer in reader.committed(request, timeout=left()):
            where = (answer.topic, answer.partition)
            if answer.error is not None:
                errors.append(f"committed offset of {where[0]}[{where[1]}]: {answer.error}")
                continue
            committed[where] = answer.offset if answer.offset >= 0 else None
    except KafkaException as exc:
        errors.append(f"committed offsets: {_why(exc)}")
    except Exception as exc:  # a read must never raise: it is marked unavailable
        errors.append(f"committed offsets: {type(exc).__name__}: {exc}")
    for ktp in request:
        if time.monotonic() >= deadline:
            errors.append("high watermarks: Kafka did not answer in time")
            break
        try:
            marks = reader.get_watermark_offsets(ktp, timeout=left(), cached=False)
        except KafkaException as exc:
            errors.append(f"high watermark of {ktp.topic}[{ktp.partition}]: {_why(exc)}")
            continue
        except Exception as exc:  # as above
            errors.append(f"high watermark of {ktp.topic}[{ktp.partition}]: {exc}")
            continue
        if marks is None:
            errors.append("high watermarks: Kafka did not answer in time")
            break
        watermarks[(ktp.topic, ktp.partition)] = int(marks[1])
    rows = []
    for tp in wanted:
        key = (tp.topic, tp.partition)
        c, hw = committed.get(key), watermarks.get(key)
        rows.append(Position(tp.topic, tp.partition, c, hw, lag_of(c, hw)))
    error = "; ".join(dict.fromkeys(errors))[:500] if errors else None
    return Positions(tuple(rows), error is None, error, now)


def _why(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else exc
    if isinstance(error, KafkaError) and error.code() == KafkaError._TIMED_OUT:  # noqa: SLF001
        return "Kafka did not answer in time"
    return str(error)


# Consumer-only properties make an AdminClient (a producer-type handle) log a warning each.
_CONSUMER_ONLY = (
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "group.",
    "partition.assignment.strategy",
    "auto.offset.reset",
    "enable.auto.",
    "auto.commit.",
    "fetch.",
    "queued.",
    "isolation.level",
    "check.crcs",
)


def admin_properties(kafka: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in kafka.items() if not k.startswith(_CONSUMER_ONLY)}


def reader_client(settings: Settings, purpose: str) -> Consumer:
    """A ``Consumer`` of the member's group that never subscribes, to read positions.

    Not the member's consumer (that one belongs to the consumer thread), and not the
    AdminClient's ListOffsets and ListConsumerGroupOffsets: their requests, timed out
    during a broker pause, aborted the process inside librdkafka once the broker came back
    (``rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0 failed``,
    confluent-kafka 2.16.1; ``tests/integration/test_lag_outage.py``).
    """
    config: dict[str, str | int | float | bool] = {
        **{k: v for k, v in settings.kafka.items() if not k.startswith(_MEMBER_ONLY)},
        "bootstrap.servers": settings.bootstrap_servers or "",
        "group.id": settings.group_id,
        "client.id": f"rebalance-sidecar-{purpose}-{settings.group_id}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "allow.auto.create.topics": False,
        "log_level": 2,
    }
    return Consumer(config)


# What the reader does not take from the member's settings: it never joins the group.
_MEMBER_ONLY = (
    "group.",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "enable.auto.",
    "auto.commit.",
)


@dataclass(frozen=True, slots=True)
class _Read:
    key: tuple[TopicPartition, ...]
    positions: Positions
    at: float  # monotonic


class PositionsView:
    """This member's owned partitions' positions, read at most once per ``ttl`` seconds,
    off the event loop; shared by ``/assignment?offsets=true``, ``/group`` and metrics.

    Construct it on the running loop. ``read()`` never raises; ``last_known()`` is the
    latest figure per partition that was read (what the metrics keep while Kafka is away).
    """

    def __init__(
        self,
        settings: Settings,
        snapshot: Callable[[], Assignment],
        *,
        ttl: float = CACHE_SECONDS,
        timeout: float = READ_TIMEOUT_SECONDS,
        reader_factory: Callable[[Settings], Consumer] | None = None,
        history: RebalanceHistory | None = None,
    ) -> None:
        #: This member's completed rebalances, shown beside the positions (``/group``).
        self.history = history or RebalanceHistory()
        self._settings = settings
        self._snapshot = snapshot
        self._ttl = ttl
        self._timeout = timeout
        self._reader_factory = reader_factory or (lambda s: reader_client(s, "positions"))
        self._reader: Consumer | None = None
        self._loop = asyncio.get_running_loop()
        self._last: _Read | None = None
        self._pending: asyncio.Future[_Read] | None = None
        self._known: dict[tuple[str, int], Position] = {}

    async def read(self) -> Positions:
        key = tuple(sorted(self._snapshot().partitions))
        last = self._last
        if last is not None and last.key == key and time.monotonic() - last.at < self._ttl:
            return last.positions
        pending = self._start(key)
        # shield: a client that goes away does not cancel the others' read
        return (await asyncio.shield(pending)).positions

    def refresh_soon(self) -> None:
        """From any thread: start a read if the last one is stale (for the scrape)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process stops
            self._loop.call_soon_threadsafe(self._refresh)

    def last_known(self) -> dict[tuple[str, int], Position]:
        return self._known

    def _refresh(self) -> None:
        key = tuple(sorted(self._snapshot().partitions))
        last = self._last
        if last is None or last.key != key or time.monotonic() - last.at >= self._ttl:
            self._start(key)

    def _start(self, key: tuple[TopicPartition, ...]) -> asyncio.Future[_Read]:
        pending = self._pending
        if pending is None or pending.done():
            pending = self._pending = asyncio.ensure_future(self._read(key))
            pending.add_done_callback(self._settled)
        return pending

    def _settled(self, read: asyncio.Future[_Read]) -> None:
        if self._pending is read:
            self._pending = None
        if read.cancelled() or read.exception() is not None:  # retrieved: never logged
            return
        done = read.result()
        self._last = done
        known = {k: v for k, v in self._known.items() if TopicPartition(*k) in done.key}
        for position in done.positions.partitions:
            if position.high_watermark is not None:
                known[(position.topic, position.partition)] = position
        self._known = known

    async def _read(self, key: tuple[TopicPartition, ...]) -> _Read:
        try:
            if not key:
                positions = Positions((), True, None, time.time())
            elif not self._settings.bootstrap_servers:
                positions = unavailable(key, "no Kafka configured (SIDECAR_BOOTSTRAP_SERVERS)")
            else:
                if self._reader is None:
                    self._reader = self._reader_factory(self._settings)
                positions = await asyncio.get_running_loop().run_in_executor(
                    None, read_positions, self._reader, key, self._timeout
                )
        except Exception as exc:
            positions = unavailable(key, f"{type(exc).__name__}: {exc}")
        return _Read(key, positions, time.monotonic())


def unavailable(partitions: Iterable[TopicPartition], why: str) -> Positions:
    rows = tuple(Position(tp.topic, tp.partition, None, None, None) for tp in partitions)
    return Positions(rows, False, why, time.time())
