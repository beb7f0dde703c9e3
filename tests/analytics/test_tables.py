"""The tables on small hand-built fleets whose answers are worked out by hand.

All scenarios live in one event set (one group each) so Spark builds the tables once;
a second build reads the same events redelivered and shuffled and must agree.

Times are seconds after 2024-01-01T00:00:00Z. Topic ``t``; partitions 0-3.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from sidecar.analytics.generator import cloud_event

pytestmark = pytest.mark.spark

T0 = datetime(2024, 1, 1)
Event = dict[str, Any]
Rows = list[dict[str, Any]]
TableRows = dict[str, Rows]

ASSIGNED = "kafka.partitions.assigned"
REVOKED = "kafka.partitions.revoked"
LOST = "kafka.partitions.lost"
REQUESTED = "kafka.rebalance.requested"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Member:
    """One sidecar: numbers its events and tracks its assignment after each."""

    def __init__(
        self, group: str, member_id: str, *, instance: str | None = None, protocol: str = "eager"
    ) -> None:
        self.group = group
        self.member_id = member_id
        self.instance = instance
        self.protocol = protocol
        self.sequence = 0
        self.owned: set[int] = set()

    def event(
        self,
        type: str,
        seconds: float,
        generation: int,
        parts: list[int],
        reason: str | None = None,
    ) -> Event:
        if type == ASSIGNED:
            self.owned |= set(parts)
        elif type in (REVOKED, LOST):
            self.owned -= set(parts)
        self.sequence += 1
        return cloud_event(
            type=type,
            group_id=self.group,
            member_id=self.member_id,
            group_instance_id=self.instance,
            time=stamp(seconds),
            sequence=self.sequence,
            generation_id=generation,
            protocol=self.protocol,
            partitions=[("t", p) for p in parts],
            assignment=[("t", p) for p in sorted(self.owned)],
            reason=reason,
            event_id=f"{self.group}/{self.member_id}/{self.sequence}",
        )


def eager_group() -> list[Event]:
    """a alone (gen 1), then b joins (gen 2): a keeps 0-1, b takes 2-3."""
    a, b = Member("eager", "a"), Member("eager", "b")
    return [
        a.event(ASSIGNED, 0, 1, [0, 1, 2, 3], "group formed"),
        a.event(REVOKED, 10, 1, [0, 1, 2, 3], "member joined"),
        a.event(ASSIGNED, 12, 2, [0, 1], "member joined"),
        b.event(ASSIGNED, 12.5, 2, [2, 3], "member joined"),
    ]


def cooperative_group() -> list[Event]:
    """a: 0-1, b: 2-3; c joins: b revokes 3 in gen 2, c gets 3 in gen 3."""
    a, b, c = (Member("coop", m, protocol="cooperative") for m in "abc")
    return [
        a.event(ASSIGNED, 0, 1, [0, 1]),
        b.event(ASSIGNED, 1, 1, [2, 3]),
        a.event(ASSIGNED, 20.0, 2, []),
        b.event(REVOKED, 20.1, 2, [3], "member joined"),
        b.event(ASSIGNED, 20.2, 2, []),
        c.event(ASSIGNED, 20.3, 2, []),
        a.event(ASSIGNED, 21.0, 3, []),
        b.event(ASSIGNED, 21.1, 3, []),
        c.event(ASSIGNED, 21.5, 3, [3]),
    ]


def lost_group() -> list[Event]:
    """b is lost at 100 and never returns; a takes everything in gen 2."""
    a, b = Member("lost", "a"), Member("lost", "b")
    return [
        a.event(ASSIGNED, 0, 1, [0, 1]),
        b.event(ASSIGNED, 0.5, 1, [2, 3]),
        b.event(LOST, 100, 1, [2, 3], "max poll interval exceeded"),
        a.event(REVOKED, 103, 1, [0, 1]),
        a.event(ASSIGNED, 105, 2, [0, 1, 2, 3]),
    ]


def unknown_generation_group() -> list[Event]:
    """Like lost_group, but b's client had reset its generation to -1 when it noticed."""
    a, b = Member("nogen", "a"), Member("nogen", "b")
    return [
        a.event(ASSIGNED, 0, 1, [0, 1]),
        b.event(ASSIGNED, 0.5, 1, [2, 3]),
        b.event(LOST, 100, -1, [2, 3], "session timed out"),
        a.event(REVOKED, 103, 1, [0, 1]),
        a.event(ASSIGNED, 105, 2, [0, 1, 2, 3]),
        # Noticed long after the group moved on: opens nothing (no later rebalance).
        b.event(LOST, 300, -1, []),
    ]


def abandoned_group() -> list[Event]:
    """c is lost at 50 and nobody takes partition 0 before the data ends."""
    c = Member("abandoned", "c")
    return [c.event(ASSIGNED, 0, 1, [0]), c.event(LOST, 50, 1, [0])]


def static_group() -> list[Event]:
    """w-0 restarts inside its session (gen 1 kept), then an enforced rebalance (gen 2)."""
    w0 = Member("static", "m0a", instance="w-0")
    w1 = Member("static", "m1", instance="w-1")
    w0_again = Member("static", "m0b", instance="w-0")
    w0_again.sequence = 2  # same sidecar journal after the restart
    return [
        w0.event(ASSIGNED, 0, 1, [0, 1]),
        w1.event(ASSIGNED, 0.2, 1, [2, 3]),
        w0.event(REVOKED, 60, 1, [0, 1], "shutdown"),
        w0_again.event(ASSIGNED, 70, 1, [0, 1]),
        w1.event(REQUESTED, 200, 1, [], "ops"),
        w0_again.event(REVOKED, 200.5, 1, [0, 1]),
        w1.event(REVOKED, 200.6, 1, [2, 3]),
        w0_again.event(ASSIGNED, 201, 2, [0, 1]),
        w1.event(ASSIGNED, 201.2, 2, [2, 3]),
    ]


def kip848_group() -> list[Event]:
    """KIP-848: a owns 0-3; b joins (member epoch 2) while a still releases 2-3. b holds
    nothing past the revoke timeout + 10 s, so its sidecar says it joined with nothing,
    then the partitions come, in the same epoch: b is told twice."""
    a, b = (Member("kip848", m, protocol="cooperative") for m in "ab")
    return [
        a.event(ASSIGNED, 0, 1, [0, 1, 2, 3]),
        b.event(ASSIGNED, 40, 2, []),
        a.event(REVOKED, 45, 2, [2, 3], "member joined"),
        b.event(ASSIGNED, 45.5, 2, [2, 3]),
    ]


def all_events() -> list[Event]:
    return (
        eager_group()
        + cooperative_group()
        + lost_group()
        + unknown_generation_group()
        + abandoned_group()
        + static_group()
        + kip848_group()
    )


@pytest.fixture(scope="module")
def tables(tables_of: Callable[[list[Event]], TableRows]) -> TableRows:
    return tables_of(all_events())


@pytest.fixture(scope="module")
def redelivered(tables_of: Callable[[list[Event]], TableRows]) -> TableRows:
    events = all_events()
    rng = random.Random(7)
    copies = events + [dict(e) for e in rng.sample(events, 9)]
    rng.shuffle(copies)
    copies.reverse()
    return tables_of(copies)


def rows(table: Rows, group: str, *order: str) -> Rows:
    selected = [r for r in table if r["group_id"] == group]
    return sorted(selected, key=lambda r: tuple((r[k] is None, r[k]) for k in order))


def pick(table: Rows, *columns: str) -> list[tuple[Any, ...]]:
    return [tuple(r[c] for c in columns) for r in table]


REBALANCE = (
    "generation_id",
    "started_at",
    "ended_at",
    "members",
    "partitions_moved",
    "partitions_assigned",
    "trigger",
)


def test_eager_rebalance(tables: TableRows) -> None:
    rebalances = rows(tables["rebalances"], "eager", "generation_id")
    assert pick(rebalances, *REBALANCE) == [
        (1, at(0), at(0), 1, 0, 4, "member_joined"),
        (2, at(10), at(12.5), 2, 2, 4, "member_joined"),
    ]
    assert [r["duration_seconds"] for r in rebalances] == [0.0, 2.5]
    assert rebalances[1]["protocol"] == "eager"
    assert rebalances[1]["reason"] == "member joined"
    # Stop the world: every partition is unowned from the revoke to its new assign.
    assert rebalances[1]["downtime_partition_seconds"] == pytest.approx(9.0)
    downtime = rows(tables["downtime"], "eager", "partition")
    assert pick(downtime, "partition", "unowned_from", "unowned_to", "seconds", "cause") == [
        (0, at(10), at(12), 2.0, "revoked"),
        (1, at(10), at(12), 2.0, "revoked"),
        (2, at(10), at(12.5), 2.5, "revoked"),
        (3, at(10), at(12.5), 2.5, "revoked"),
    ]
    ownership = rows(tables["ownership"], "eager", "partition", "owned_from")
    assert pick(ownership, "partition", "member", "owned_from", "owned_to", "end_reason") == [
        (0, "a", at(0), at(10), "revoked"),
        (0, "a", at(12), None, None),
        (1, "a", at(0), at(10), "revoked"),
        (1, "a", at(12), None, None),
        (2, "a", at(0), at(10), "revoked"),
        (2, "b", at(12.5), None, None),
        (3, "a", at(0), at(10), "revoked"),
        (3, "b", at(12.5), None, None),
    ]


def test_cooperative_rebalance(tables: TableRows) -> None:
    rebalances = rows(tables["rebalances"], "coop", "generation_id")
    assert pick(rebalances, *REBALANCE) == [
        (1, at(0), at(1), 2, 0, 4, "member_joined"),
        # c joins; empty assigns still count every member as taking part.
        (2, at(20.0), at(20.3), 3, 0, 0, "member_joined"),
        # the follow-up generation starts at b's revoke and moves partition 3 to c.
        (3, at(20.1), at(21.5), 3, 1, 1, "revocation"),
    ]
    assert [r["duration_seconds"] for r in rebalances] == pytest.approx([1.0, 0.3, 1.4])
    # Partitions kept across generations are never unowned: only 3 is.
    downtime = rows(tables["downtime"], "coop", "partition")
    assert pick(downtime, "partition", "unowned_from", "unowned_to", "next_owner") == [
        (3, at(20.1), at(21.5), "c"),
    ]
    assert downtime[0]["seconds"] == pytest.approx(1.4)
    ownership = rows(tables["ownership"], "coop", "partition", "owned_from")
    assert pick(ownership, "partition", "member", "owned_from", "owned_to") == [
        (0, "a", at(0), None),
        (1, "a", at(0), None),
        (2, "b", at(1), None),
        (3, "b", at(1), at(20.1)),
        (3, "c", at(21.5), None),
    ]
    members = rows(tables["members"], "coop", "member")
    assert pick(members, "member", "joins", "leaves", "lost", "rebalances", "active") == [
        ("a", 1, 0, 0, 3, True),
        ("b", 1, 0, 0, 3, True),
        ("c", 1, 0, 0, 2, True),
    ]


def test_lost_member_that_never_returns(tables: TableRows) -> None:
    rebalances = rows(tables["rebalances"], "lost", "generation_id")
    second = rebalances[1]
    assert pick([second], *REBALANCE) == [(2, at(100), at(105), 1, 2, 4, "lost")]
    assert second["members_left"] == 1
    assert second["reason"] == "max poll interval exceeded"
    downtime = rows(tables["downtime"], "lost", "partition")
    assert pick(downtime, "partition", "unowned_from", "unowned_to", "seconds", "cause") == [
        (0, at(103), at(105), 2.0, "revoked"),
        (1, at(103), at(105), 2.0, "revoked"),
        (2, at(100), at(105), 5.0, "lost"),
        (3, at(100), at(105), 5.0, "lost"),
    ]
    lost_owner = [r for r in tables["ownership"] if r["group_id"] == "lost" and r["member"] == "b"]
    assert sorted(pick(lost_owner, "partition", "owned_from", "owned_to", "end_reason")) == [
        (2, at(0.5), at(100), "lost"),
        (3, at(0.5), at(100), "lost"),
    ]
    members = {r["member"]: r for r in rows(tables["members"], "lost", "member")}
    assert pick([members["b"]], "joins", "leaves", "lost", "active", "session_seconds") == [
        (1, 0, 1, False, 99.5)
    ]
    assert members["a"]["active"] is True


def test_loss_with_unknown_generation_opens_the_next_rebalance(tables: TableRows) -> None:
    rebalances = rows(tables["rebalances"], "nogen", "generation_id")
    assert pick(rebalances, *REBALANCE) == [
        (1, at(0), at(0.5), 2, 0, 4, "member_joined"),
        (2, at(100), at(105), 1, 2, 4, "lost"),
    ]
    assert rebalances[1]["reason"] == "session timed out"


def test_partition_left_without_owner_stays_open(tables: TableRows) -> None:
    downtime = rows(tables["downtime"], "abandoned", "partition")
    assert pick(downtime, "partition", "unowned_from", "unowned_to", "seconds", "cause") == [
        (0, at(50), None, None, "lost"),
    ]
    ownership = rows(tables["ownership"], "abandoned", "partition")
    assert pick(ownership, "member", "owned_from", "owned_to", "end_reason") == [
        ("c", at(0), at(50), "lost"),
    ]


def test_static_member_rejoin_is_not_a_rebalance(tables: TableRows) -> None:
    rebalances = rows(tables["rebalances"], "static", "generation_id")
    # The restart at 60-70 neither ends generation 1 late nor starts generation 2.
    assert pick(rebalances, *REBALANCE) == [
        (1, at(0), at(0.2), 2, 0, 4, "member_joined"),
        (2, at(200), at(201.2), 2, 0, 4, "requested"),
    ]
    assert rebalances[1]["reason"] == "ops"
    assert rebalances[1]["downtime_partition_seconds"] == pytest.approx(2.2)
    # Same member identity before and after the restart; the gap is downtime.
    ownership = rows(tables["ownership"], "static", "partition", "owned_from")
    assert pick(
        [r for r in ownership if r["partition"] == 0],
        "member",
        "owned_from",
        "owned_to",
        "member_id",
    ) == [
        ("w-0", at(0), at(60), "m0a"),
        ("w-0", at(70), at(200.5), "m0b"),
        ("w-0", at(201), None, "m0b"),
    ]
    gaps = rows(tables["downtime"], "static", "partition", "unowned_from")
    assert pick(
        [g for g in gaps if g["partition"] == 0], "unowned_from", "unowned_to", "rejoin"
    ) == [
        (at(60), at(70), True),
        (at(200.5), at(201), False),
    ]
    members = {r["member"]: r for r in rows(tables["members"], "static", "member")}
    assert pick([members["w-0"]], "joins", "leaves", "lost", "static", "rebalances") == [
        (2, 1, 0, True, 2)
    ]
    assert pick([members["w-1"]], "joins", "leaves", "rebalances") == [(1, 0, 2)]


def test_a_member_told_twice_in_one_epoch_took_part_in_one_rebalance(tables: TableRows) -> None:
    """b's two assigns of epoch 2 (nothing, then its partitions) counted as two rebalances
    in the members table; the rebalance of epoch 2 ends when the partitions came."""
    members = rows(tables["members"], "kip848", "member")
    assert pick(members, "member", "joins", "leaves", "rebalances", "active") == [
        ("a", 1, 0, 1, True),
        ("b", 1, 0, 1, True),
    ]
    rebalances = rows(tables["rebalances"], "kip848", "generation_id")
    assert pick(rebalances, "generation_id", "ended_at", "members", "partitions_moved") == [
        (1, at(0), 1, 0),
        (2, at(45.5), 1, 2),
    ]
    ownership = rows(tables["ownership"], "kip848", "partition", "owned_from")
    assert pick(
        [r for r in ownership if r["partition"] == 2], "member", "owned_from", "owned_to"
    ) == [
        ("a", at(0), at(45)),
        ("b", at(45.5), None),
    ]


def test_summary_per_group_and_hour(tables: TableRows) -> None:
    eager = rows(tables["summary"], "eager", "hour")
    assert pick(eager, "hour", "rebalances", "max_seconds", "partitions_moved") == [
        (at(0), 2, 2.5, 2),
    ]
    assert eager[0]["p50_seconds"] == pytest.approx(1.25)
    assert eager[0]["p95_seconds"] == pytest.approx(2.375)
    assert eager[0]["downtime_partition_seconds"] == pytest.approx(9.0)
    # Open downtime has no length yet, so it adds nothing.
    abandoned = rows(tables["summary"], "abandoned", "hour")
    assert pick(abandoned, "rebalances", "downtime_partition_seconds") == [(1, 0.0)]


def test_duplicates_and_disorder_change_nothing(tables: TableRows, redelivered: TableRows) -> None:
    for name in ("rebalances", "ownership", "downtime", "members", "summary"):

        def key(row: dict[str, Any]) -> str:
            return repr(sorted(row.items()))

        assert sorted(redelivered[name], key=key) == sorted(tables[name], key=key), name
    assert sum(r["duplicates"] for r in redelivered["delivery"]) == 9
    assert sum(r["duplicates"] for r in tables["delivery"]) == 0
    assert sum(r["events"] for r in redelivered["delivery"]) == len(all_events()) + 9


def test_delivery_counts_sequence_gaps(tables: TableRows) -> None:
    by_source = {r["source"]: r for r in tables["delivery"]}
    # w-0's journal went on across the restart: 1-2 then 3-5, no gap.
    assert pick(
        [by_source["kafka://static/w-0"]],
        "events",
        "first_sequence",
        "last_sequence",
        "missing_sequences",
    ) == [(5, 1, 5, 0)]
