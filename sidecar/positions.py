"""How far behind each partition is: committed offset, high watermark and lag.

Read through a confluent-kafka ``AdminClient`` (``list_consumer_group_offsets`` for the
group's committed offsets, ``list_offsets`` with ``OffsetSpec.latest()`` for the high
watermarks), never through the member's ``Consumer`` (it belongs to the consumer thread).
Lag is ``max(high watermark - committed, 0)``, as Redpanda Console and
``kafka-consumer-groups.sh --describe`` compute it; ``None`` where either side is unknown
(nothing committed, or Kafka did not answer).

A read never raises and never leaves an exception unretrieved: every AdminClient future
gets a done callback that retrieves its outcome, each is waited for within one deadline,
and whatever did not answer is marked unavailable. A broker that pauses makes the figures
``available: false``; it is never a 500, and never a "Future exception was never
retrieved" in the log (the cause of a failed CI run before this module existed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

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


def _retrieve(future: concurrent.futures.Future[Any]) -> None:
    """A done callback: fetch the outcome, so no failure is left unretrieved."""
    if not future.cancelled():
        future.exception()


def _watch(futures: Iterable[concurrent.futures.Future[Any]]) -> None:
    for future in futures:
        future.add_done_callback(_retrieve)


def _outcome(future: concurrent.futures.Future[Any], deadline: float) -> tuple[Any, str | None]:
    try:
        return future.result(timeout=max(deadline - time.monotonic(), 0.0)), None
    except KafkaException as exc:
        return None, str(exc.args[0])
    except TimeoutError:
        return None, "Kafka did not answer in time"
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def read_positions(
    admin: AdminClient,
    group_id: str,
    partitions: Iterable[TopicPartition],
    timeout: float = READ_TIMEOUT_SECONDS,
) -> Positions:
    """Blocking: the positions of ``partitions`` for ``group_id``. Never raises."""
    wanted = sorted(set(partitions))
    now = time.time()
    if not wanted:
        return Positions((), True, None, now)
    deadline = time.monotonic() + timeout
    errors: list[str] = []
    committed: dict[tuple[str, int], int | None] = {}
    watermarks: dict[tuple[str, int], int] = {}
    request = [KafkaTopicPartition(tp.topic, tp.partition) for tp in wanted]
    try:
        offset_futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id, request)], request_timeout=timeout
        )
        _watch(offset_futures.values())
    except Exception as exc:  # refused before sending: unavailable, never raised
        offset_futures = {}
        errors.append(f"committed offsets: {exc}")
    try:
        spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        latest = {KafkaTopicPartition(tp.topic, tp.partition): spec for tp in wanted}
        end_futures = admin.list_offsets(latest, request_timeout=timeout)
        _watch(end_futures.values())
    except Exception as exc:  # as above
        end_futures = {}
        errors.append(f"high watermarks: {exc}")
    for future in offset_futures.values():
        answer, error = _outcome(future, deadline)
        if error is not None:
            errors.append(f"committed offsets: {error}")
            continue
        for tp in answer.topic_partitions:
            if tp.error is not None:
                errors.append(f"committed offset of {tp.topic}[{tp.partition}]: {tp.error}")
                continue
            committed[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
    for ktp, future in end_futures.items():
        answer, error = _outcome(future, deadline)
        if error is not None:
            errors.append(f"high watermark of {ktp.topic}[{ktp.partition}]: {error}")
            continue
        watermarks[(ktp.topic, ktp.partition)] = int(answer.offset)
    rows = []
    for tp in wanted:
        key = (tp.topic, tp.partition)
        c, hw = committed.get(key), watermarks.get(key)
        rows.append(Position(tp.topic, tp.partition, c, hw, lag_of(c, hw)))
    error = "; ".join(dict.fromkeys(errors))[:500] if errors else None
    return Positions(tuple(rows), error is None, error, now)


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


def admin_client(settings: Settings, purpose: str) -> AdminClient:
    """An AdminClient with the member's connection settings (consumer-only ones left out)."""
    config: dict[str, str | int | float | bool] = {
        **admin_properties(settings.kafka),
        "bootstrap.servers": settings.bootstrap_servers or "",
        "client.id": f"rebalance-sidecar-{purpose}-{settings.group_id}",
        "allow.auto.create.topics": "false",
        "log_level": 2,
    }
    return AdminClient(config)


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
        admin_factory: Callable[[Settings], AdminClient] | None = None,
        history: RebalanceHistory | None = None,
    ) -> None:
        #: This member's completed rebalances, shown beside the positions (``/group``).
        self.history = history or RebalanceHistory()
        self._settings = settings
        self._snapshot = snapshot
        self._ttl = ttl
        self._timeout = timeout
        self._admin_factory = admin_factory or (lambda s: admin_client(s, "positions"))
        self._admin: AdminClient | None = None
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
                if self._admin is None:
                    self._admin = self._admin_factory(self._settings)
                positions = await asyncio.get_running_loop().run_in_executor(
                    None,
                    read_positions,
                    self._admin,
                    self._settings.group_id,
                    key,
                    self._timeout,
                )
        except Exception as exc:
            positions = unavailable(key, f"{type(exc).__name__}: {exc}")
        return _Read(key, positions, time.monotonic())


def unavailable(partitions: Iterable[TopicPartition], why: str) -> Positions:
    rows = tuple(Position(tp.topic, tp.partition, None, None, None) for tp in partitions)
    return Positions(rows, False, why, time.time())
