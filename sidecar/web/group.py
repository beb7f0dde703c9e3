"""``GET /group``: the whole consumer group as Kafka's coordinator describes it.

Read with a confluent-kafka ``AdminClient`` (``describe_consumer_groups`` and topic
metadata), never through the member's ``Consumer``: that one belongs to the consumer
thread (see ``member.py``). The AdminClient calls block, so they run in a worker
thread; one description is shared by every request for ``CACHE_SECONDS`` (and by
requests that arrive while it is being read), so a busy status page does not hammer
the coordinator.

The coordinator's DescribeGroups answer carries no generation (and librdkafka does not
expose the KIP-848 epochs), so ``generation_id`` is this member's view of it, labelled so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from sidecar.handoff import Handoff
from sidecar.logs import kafka_logger
from sidecar.model import Assignment, TopicPartition, rfc3339
from sidecar.positions import PositionsView, admin_properties, read_positions, reader_client
from sidecar.schemas import ErrorOut, PartitionOut
from sidecar.settings import Settings

CACHE_SECONDS = 2.0
REQUEST_TIMEOUT_SECONDS = 10.0


class GroupSource(Protocol):
    """What ``/group`` needs from the running sidecar."""

    @property
    def settings(self) -> Settings: ...

    @property
    def handoff(self) -> Handoff: ...

    @property
    def positions(self) -> PositionsView: ...


# -- response model ---------------------------------------------------------------------------


class GroupMemberOut(BaseModel):
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: list[PartitionOut]
    target_assignment: list[PartitionOut] | None = Field(
        description="KIP-848 groups: what the coordinator is moving this member to"
    )
    this_member: bool = Field(description="This sidecar's own membership")


class GroupPartitionOut(BaseModel):
    topic: str
    partition: int
    owner: str | None = Field(description="member_id of the owner; null when unowned")
    committed: int | None = Field(
        None, description="The group's committed offset; null: none, or not read"
    )
    high_watermark: int | None = Field(None, description="High watermark; null: not read")
    lag: int | None = Field(
        None, description="max(high_watermark - committed, 0); null when either is null"
    )


class CoordinatorOut(BaseModel):
    id: int
    host: str
    port: int


class RebalancesOut(BaseModel):
    last_at: float | None = Field(description="Unix time of this member's last rebalance")
    in_window: int = Field(description="Rebalances within SIDECAR_FLAPPING_WINDOW_MS")
    window_seconds: float
    flapping: bool = Field(description="in_window > SIDECAR_FLAPPING_REBALANCES")


class GroupOut(BaseModel):
    group_id: str
    source: Literal["coordinator", "demo"] = Field(
        description="`coordinator`: DescribeGroups; `demo`: the mock cluster cannot describe "
        "groups, so the demo's own roster of its simulated peers"
    )
    state: str = Field(description="Coordinator's group state: stable, preparing_rebalance, ...")
    type: str = Field(description="Group type: classic or consumer (KIP-848); unknown if old")
    partition_assignor: str = Field(description="Protocol (assignor) the group agreed on")
    simple: bool = Field(description="A simple group (commits only, no members)")
    coordinator: CoordinatorOut | None
    generation_id: int = Field(
        description="This member's generation (member epoch with group.protocol=consumer); "
        "-1 when unknown. DescribeGroups does not carry it."
    )
    member_id: str | None = Field(description="This sidecar's member id")
    members: list[GroupMemberOut]
    partitions: list[GroupPartitionOut] = Field(
        description="Every partition of the group's topics, with its owner"
    )
    described_at: str
    positions_available: bool = Field(
        False, description="Whether committed offsets and high watermarks were read"
    )
    positions_error: str | None = Field(None, description="Why not, when they were not")
    rebalances: RebalancesOut | None = None
    trace_url_template: str | None = Field(
        None, description="SIDECAR_TRACE_URL_TEMPLATE: the page links events to traces"
    )


GROUP_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorOut, "description": "The coordinator could not be asked or answered"}
}


# -- reading the group --------------------------------------------------------------------------


class GroupUnavailable(Exception):
    """The coordinator could not describe the group (Kafka down, not authorized, ...)."""


@dataclass(frozen=True, slots=True)
class _Described:
    body: dict[str, Any]
    at: float


def describe_group(
    admin: AdminClient,
    group_id: str,
    topics: tuple[str, ...],
    timeout: float,
    own: Assignment | None = None,
) -> dict[str, Any]:
    """Blocking: one DescribeGroups plus the metadata of the topics in play.

    A cluster that cannot describe groups (librdkafka's mock cluster) falls back to the
    demo's roster when one is installed (``use_roster``), labelled ``source: demo``.
    """
    try:
        future = admin.describe_consumer_groups([group_id], request_timeout=timeout)[group_id]
        group = future.result(timeout=timeout + 1)
    except KafkaException as exc:
        error = exc.args[0]
        roster = _roster
        if roster is not None and error.code() == KafkaError._UNSUPPORTED_FEATURE:  # noqa: SLF001 - public, underscored
            return _from_roster(admin, roster, group_id, topics, timeout, own)
        raise GroupUnavailable(f"cannot describe group {group_id!r}: {error}") from None
    except TimeoutError:
        raise GroupUnavailable(f"no answer describing group {group_id!r} in {timeout} s") from None
    members = [
        _member(
            m.member_id,
            m.client_id,
            m.host,
            m.group_instance_id,
            [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions],
            None
            if m.target_assignment is None
            else [(tp.topic, tp.partition) for tp in m.target_assignment.topic_partitions],
        )
        for m in group.members
    ]
    coordinator = group.coordinator
    return {
        "group_id": group.group_id,
        "source": "coordinator",
        "state": _enum_name(getattr(group, "state", None)),
        "type": _enum_name(getattr(group, "type", None)),
        "partition_assignor": group.partition_assignor or "",
        "simple": bool(group.is_simple_consumer_group),
        "coordinator": None
        if coordinator is None
        else {"id": coordinator.id, "host": coordinator.host, "port": coordinator.port},
        **_layout(admin, members, topics, timeout),
    }


def _member(
    member_id: str,
    client_id: str,
    host: str,
    group_instance_id: str | None,
    owned: list[tuple[str, int]],
    target: list[tuple[str, int]] | None,
) -> dict[str, Any]:
    return {
        "member_id": member_id,
        "client_id": client_id,
        "host": host,
        "group_instance_id": group_instance_id or None,
        "assignment": [{"topic": t, "partition": p} for t, p in sorted(owned)],
        "target_assignment": None
        if target is None
        else [{"topic": t, "partition": p} for t, p in sorted(target)],
    }


def _layout(
    admin: AdminClient, members: list[dict[str, Any]], topics: tuple[str, ...], timeout: float
) -> dict[str, Any]:
    """Members in a stable order, and every partition of the group's topics with its owner."""
    members.sort(key=lambda m: (m["client_id"], m["member_id"]))
    owners = {
        (p["topic"], p["partition"]): m["member_id"] for m in members for p in m["assignment"]
    }
    names = {t for t in topics if not t.startswith("^")} | {t for t, _ in owners}
    counts = _partition_counts(admin, sorted(names), timeout)
    partitions = [
        {"topic": topic, "partition": p, "owner": owners.get((topic, p))}
        for topic in sorted(counts)
        for p in range(counts[topic])
    ]
    # Partitions a member owns that metadata does not show (topic deleted meanwhile).
    shown = {(p["topic"], p["partition"]) for p in partitions}
    partitions += [
        {"topic": t, "partition": p, "owner": owner}
        for (t, p), owner in sorted(owners.items())
        if (t, p) not in shown
    ]
    return {"members": members, "partitions": partitions}


# -- the demo's fallback ----------------------------------------------------------------------


class Roster(Protocol):
    """Who else is in the group, as the demo (which runs the other members) knows it."""

    def members(self) -> list[RosterMember]: ...


@dataclass(frozen=True, slots=True)
class RosterMember:
    member_id: str
    client_id: str
    partitions: tuple[tuple[str, int], ...]


_roster: Roster | None = None


def use_roster(roster: Roster | None) -> None:
    """Install the demo's roster, for clusters that cannot describe groups (mock cluster)."""
    global _roster
    _roster = roster


def _from_roster(
    admin: AdminClient,
    roster: Roster,
    group_id: str,
    topics: tuple[str, ...],
    timeout: float,
    own: Assignment | None,
) -> dict[str, Any]:
    members = [
        _member(m.member_id, m.client_id, "demo peer", None, list(m.partitions), None)
        for m in roster.members()
    ]
    if own is not None and own.member_id:
        members.append(
            _member(
                own.member_id,
                "rebalance-sidecar",
                "this process",
                own.group_instance_id,
                [(tp.topic, tp.partition) for tp in own.partitions],
                None,
            )
        )
    return {
        "group_id": group_id,
        "source": "demo",
        "state": "unknown",
        "type": "classic",
        "partition_assignor": "",
        "simple": False,
        "coordinator": None,
        **_layout(admin, members, topics, timeout),
    }


def _partition_counts(admin: AdminClient, topics: list[str], timeout: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    for topic in topics:
        try:
            metadata = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise GroupUnavailable(f"cannot read metadata of {topic!r}: {exc.args[0]}") from None
        if metadata is not None and metadata.error is None and metadata.partitions:
            counts[topic] = len(metadata.partitions)
    return counts


def _enum_name(value: Any) -> str:
    if value is None:
        return "unknown"
    name = getattr(value, "name", None)
    return str(name if name is not None else value).lower()


class GroupView:
    """Describes the group on demand, at most once per ``ttl`` seconds, off the event loop."""

    def __init__(
        self,
        source: GroupSource,
        ttl: float = CACHE_SECONDS,
        admin_factory: Callable[[dict[str, Any]], AdminClient] = AdminClient,
    ) -> None:
        self._source = source
        self._ttl = ttl
        self._admin_factory = admin_factory
        self._admin: AdminClient | None = None
        self._reader: Consumer | None = None  # reads the positions (``reader_client``)
        self._last: _Described | None = None
        self._pending: asyncio.Future[_Described] | None = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            s = self._source.settings
            if not s.bootstrap_servers:
                raise GroupUnavailable("no Kafka configured (SIDECAR_BOOTSTRAP_SERVERS)")
            self._admin = self._admin_factory(
                {
                    **admin_properties(s.kafka),
                    "bootstrap.servers": s.bootstrap_servers,
                    "client.id": f"rebalance-sidecar-admin-{s.group_id}",
                    # Reading a topic's metadata must never create it.
                    "allow.auto.create.topics": "false",
                    # Connection failures reach the caller as 503s (and the member logs its
                    # own); librdkafka's raw log lines on stderr would only repeat them.
                    "log_level": 2,
                    "logger": kafka_logger("admin"),  # debug lines too, in the log's format
                }
            )
        return self._admin

    async def describe(self) -> dict[str, Any]:
        last = self._last
        if last is None or time.monotonic() - last.at >= self._ttl:
            if self._pending is None:  # requests that arrive meanwhile share this read
                self._pending = asyncio.ensure_future(self._read())
                self._pending.add_done_callback(self._settled)
            # shield: a client that goes away does not cancel the others' read
            last = await asyncio.shield(self._pending)
        snapshot = self._source.handoff.snapshot
        body = dict(last.body)
        body["generation_id"] = snapshot.generation_id
        body["member_id"] = snapshot.member_id
        body["members"] = [
            {**m, "this_member": m["member_id"] == snapshot.member_id} for m in body["members"]
        ]
        s = self._source.settings
        body["rebalances"] = self._source.positions.history.summary(
            s.flapping_window_ms / 1000, s.flapping_rebalances
        )
        body["trace_url_template"] = s.trace_url_template
        return body

    def _settled(self, read: asyncio.Future[_Described]) -> None:
        self._pending = None
        if not read.cancelled() and read.exception() is None:
            self._last = read.result()

    async def _read(self) -> _Described:
        s = self._source.settings
        loop = asyncio.get_running_loop()
        admin = self._client()
        if self._reader is None:
            self._reader = reader_client(s, "group")
        body = await loop.run_in_executor(
            None,
            describe_with_positions,
            admin,
            self._reader,
            s.group_id,
            s.topics,
            REQUEST_TIMEOUT_SECONDS,
            self._source.handoff.snapshot,
        )
        body["described_at"] = rfc3339(time.time())
        return _Described(body, time.monotonic())


def describe_with_positions(
    admin: AdminClient,
    reader: Consumer,
    group_id: str,
    topics: tuple[str, ...],
    timeout: float,
    own: Assignment | None = None,
) -> dict[str, Any]:
    """``describe_group``, with each partition's committed offset, high watermark and lag
    (``sidecar.positions``): figures that cannot be read are null, never an error."""
    body = describe_group(admin, group_id, topics, timeout, own)
    wanted = [TopicPartition(p["topic"], p["partition"]) for p in body["partitions"]]
    positions = read_positions(reader, wanted)
    found = positions.by_partition()
    for entry in body["partitions"]:
        position = found.get((entry["topic"], entry["partition"]))
        if position is not None:
            entry.update(position.as_dict())
    body["positions_available"] = positions.available
    body["positions_error"] = positions.error
    return body


def group_router(source: GroupSource) -> APIRouter:
    router = APIRouter(tags=["group"])
    view = GroupView(source)

    @router.get("/group", response_model=GroupOut, responses=GROUP_RESPONSES)
    async def get_group() -> dict[str, Any]:
        """The group as Kafka's coordinator describes it: every member (sidecars or not),
        client ids, hosts, assignments, state and assignor; read with an AdminClient,
        cached for a couple of seconds. `503` when the coordinator cannot be asked."""
        try:
            return await view.describe()
        except GroupUnavailable as exc:
            raise HTTPException(503, str(exc)) from None
        except KafkaException as exc:
            raise HTTPException(503, f"Kafka: {exc.args[0]}") from None

    return router
