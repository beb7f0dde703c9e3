"""The chaos run's verdict: pure functions over what the run recorded.

* **nothing lost**: every journaled event reached every subscriber that subscribed to
  it, or the journal's delivery log says it was given up; redeliveries carry the same
  id and the same bytes; each subscriber saw its events in sequence order.
* **no double ownership** from the applications' view: a blocking subscriber owns a
  partition from receiving the ``assigned`` event that gives it, until it acknowledged
  the ``revoked`` (or received the ``lost``) that takes it away. Overlaps between two
  applications are classified by what allowed them; only unexplained ones fail.
* **bounded stalls**: no rebalance callback held the group longer than the revoke
  timeout plus protocol time, and the group recovered after the faults.
* **no crash**: every process ended because we ended it, SIGTERM exits 0, liveness held.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

from sidecar.model import Delivery, Event, Subscription
from tests.chaos.broker import BrokerOutage
from tests.chaos.report import (
    BARRIER_TIMEOUT,
    BROKER_FAULT,
    KILLED,
    LOST_EVENT,
    UNEXPLAINED,
    Exit,
    HealthProblem,
    Partition,
    Report,
    Window,
)
from tests.support.receiver import Received

REVOKED = "kafka.partitions.revoked"
LOST = "kafka.partitions.lost"
ASSIGNED = "kafka.partitions.assigned"
GIVEN_UP = ("gave_up", "disabled")


@dataclass
class MemberRecord:
    """Everything one member slot left behind (all its process incarnations)."""

    name: str
    static: bool
    events: list[Event]
    subscriptions: list[Subscription]
    deliveries: dict[str, list[Delivery]]
    received: dict[str, list[Received]]  # by subscription id
    blocking: str  # the id of the application's (blocking) subscription
    kills: list[float]
    exits: list[Exit]
    log_lines: list[dict[str, Any]]
    tracebacks: list[str] = field(default_factory=list)  # raw (non-JSON) tracebacks in its log
    health: list[HealthProblem] = field(default_factory=list)
    # When its link to Kafka was cut or slowed. Not an explanation of a window by itself: a
    # member cut off past its session must say `lost` (a window ended by it is explained).
    link_faults: list[tuple[float, float]] = field(default_factory=list)


# -- nothing lost ---------------------------------------------------------------------------


def check_delivery(report: Report, members: list[MemberRecord]) -> None:
    for member in members:
        report.journaled += len(member.events)
        by_id = {e.id: e for e in member.events}
        for sub in member.subscriptions:
            deliveries = member.deliveries.get(sub.id, [])
            given_up = {d.sequence for d in deliveries if d.outcome in GIVEN_UP}
            report.barrier_timeouts += sum(d.outcome == "barrier_timeout" for d in deliveries)
            report.offsets_committed += sum(d.outcome == "offsets_committed" for d in deliveries)
            report.commit_failures += sum(d.outcome == "commit_failed" for d in deliveries)
            report.commits_unknown += sum(d.outcome == "commit_unknown" for d in deliveries)
            receipts = member.received.get(sub.id, [])
            report.receipts += len(receipts)
            seen: dict[str, Received] = {}
            for received in receipts:
                event_id = str(received.event["id"])
                first = seen.setdefault(event_id, received)
                if first is not received:
                    report.duplicates += 1
                    if first.event != received.event:
                        report.mismatched.append(
                            f"{member.name}/{sub.id}: event {event_id} redelivered with "
                            "different content"
                        )
                journaled = by_id.get(event_id)
                if journaled is None:
                    report.mismatched.append(
                        f"{member.name}/{sub.id}: received {event_id}, which is not journaled"
                    )
                elif json.loads(journaled.body) != received.event:
                    report.mismatched.append(
                        f"{member.name}/{sub.id}: event {event_id} differs from the journal"
                    )
            expected = [e for e in member.events if e.type in sub.events]
            report.expected_deliveries += len(expected)
            for event in expected:
                if event.id in seen:
                    report.delivered += 1
                elif event.sequence in given_up:
                    report.given_up += 1
                else:
                    report.lost.append(
                        f"{member.name}/{sub.id}: {event.type.value} seq {event.sequence} "
                        f"({event.id}) never delivered nor given up"
                    )
            order = [int(r.event["sequence"]) for r in _first_receipts(receipts)]
            for before, after in pairwise(order):
                if after <= before:
                    report.out_of_order.append(
                        f"{member.name}/{sub.id}: seq {after} first received after {before}"
                    )


def _first_receipts(receipts: list[Received]) -> list[Received]:
    seen: set[str] = set()
    firsts = []
    for received in sorted(receipts, key=lambda r: r.received_at):
        if received.event["id"] not in seen:
            seen.add(received.event["id"])
            firsts.append(received)
    return firsts


# -- no double ownership -------------------------------------------------------------------


@dataclass
class _Interval:
    member: str
    partition: Partition
    started: float
    ended: float
    ended_by: str  # "revoked", "lost", "assigned" (a restart's fresh assignment), "end"
    ending_sequence: int | None


def ownership_intervals(member: MemberRecord, run_ended: float) -> list[_Interval]:
    """The application's ownership, replayed from its first receipts in sequence order."""
    receipts = member.received.get(member.blocking, [])
    firsts = sorted(_first_receipts(receipts), key=lambda r: int(r.event["sequence"]))
    held: dict[Partition, float] = {}
    intervals: list[_Interval] = []
    for received in firsts:
        kind = received.event["type"]
        data = received.event["data"]
        after = {(p["topic"], int(p["partition"])) for p in data["assignment"]}
        if kind == REVOKED:
            at, ended_by = received.answered_at, "revoked"
        elif kind == LOST:
            at, ended_by = received.received_at, "lost"
        else:
            at, ended_by = received.received_at, "assigned"
        for partition in sorted(set(held) - after):
            intervals.append(
                _Interval(
                    member.name,
                    partition,
                    held.pop(partition),
                    at,
                    ended_by,
                    int(received.event["sequence"]),
                )
            )
        if kind == ASSIGNED:
            for partition in after - set(held):
                held[partition] = received.received_at
    for partition, since in held.items():
        intervals.append(_Interval(member.name, partition, since, run_ended, "end", None))
    return intervals


def check_ownership(
    report: Report,
    members: list[MemberRecord],
    outages: list[BrokerOutage],
    run_ended: float,
    group_generations: bool = True,
) -> None:
    """``group_generations``: the events' ``generation_id`` is the group's generation
    (classic protocol), so the older one is the stale side. Under KIP-848 it is each
    member's own epoch, which says nothing across members: both readings are tried."""
    by_name = {m.name: m for m in members}
    timeouts = {
        m.name: {
            d.sequence for d in m.deliveries.get(m.blocking, []) if d.outcome == "barrier_timeout"
        }
        for m in members
    }
    per_partition: dict[Partition, list[_Interval]] = defaultdict(list)
    for member in members:
        for interval in ownership_intervals(member, run_ended):
            per_partition[interval.partition].append(interval)
            report.intervals += 1
    for _, intervals in sorted(per_partition.items()):
        intervals.sort(key=lambda i: i.started)
        for index, first in enumerate(intervals):
            for second in intervals[index + 1 :]:
                if second.started >= first.ended or second.member == first.member:
                    continue
                report.windows.append(
                    _window(first, second, by_name, timeouts, outages, group_generations)
                )


def _window(
    first: _Interval,
    second: _Interval,
    by_name: dict[str, MemberRecord],
    timeouts: dict[str, set[int]],
    outages: list[BrokerOutage],
    group_generations: bool = True,
) -> Window:
    """Classify an overlap. The stale side is the one whose belief comes from the older
    generation (an application may learn of an old assignment late, after a barrier
    timed out); without generations to tell, both readings are tried."""
    opened = max(first.started, second.started)
    closed = min(first.ended, second.ended)
    generations = {
        i.member: _confirmed(by_name[i.member], i.partition, opened)[1] for i in (first, second)
    }
    if group_generations and -1 < generations[first.member] != generations[second.member] > -1:
        pairs = (
            [(first, second)]
            if generations[first.member] < generations[second.member]
            else [(second, first)]
        )
    else:
        pairs = [(first, second), (second, first)]
    stale, new = pairs[0]
    cause = UNEXPLAINED
    for candidate, other in pairs:
        found = _cause(candidate, opened, by_name[candidate.member], timeouts, outages)
        if found != UNEXPLAINED:
            stale, new, cause = candidate, other, found
            break
    confirmed = _confirmed(by_name[stale.member], stale.partition, opened)[0]
    kills = [k for k in by_name[stale.member].kills if confirmed <= k <= opened]
    return Window(
        stale.partition,
        stale.member,
        new.member,
        opened,
        closed,
        cause,
        new.started - kills[-1] if cause == KILLED and kills else None,
    )


def _cause(
    stale: _Interval,
    opened: float,
    owner: MemberRecord,
    timeouts: dict[str, set[int]],
    outages: list[BrokerOutage],
) -> str:
    if stale.ending_sequence is not None and stale.ending_sequence in timeouts[stale.member]:
        return BARRIER_TIMEOUT
    if stale.ended_by == "lost":
        return LOST_EVENT
    # The fault must come after the member issued the last `assigned` that (re)confirmed
    # the partition to the stale application: a restart that assigned it again makes the
    # belief current again. Issued, not received: an application whose subscriber was down
    # learns of an assignment late, maybe after the member that issued it was killed.
    confirmed = _issued(owner, stale.partition, before=opened)
    if any(confirmed <= k <= opened for k in owner.kills):
        return KILLED
    if any(confirmed <= o.ended and o.started <= opened for o in outages):
        return BROKER_FAULT
    return UNEXPLAINED


def _event_time(event: dict[str, Any], default: float) -> float:
    stamp = event.get("time")
    return datetime.fromisoformat(str(stamp)).timestamp() if stamp else default


def _issued(member: MemberRecord, partition: Partition, before: float) -> float:
    """When the member issued (the event's ``time``) the last `assigned` its application
    received before ``before`` that gave it ``partition``; 0.0 when none."""
    found = [
        min(r.received_at, _event_time(r.event, r.received_at))
        for r in _first_receipts(member.received.get(member.blocking, []))
        if r.received_at <= before
        and r.event["type"] == ASSIGNED
        and partition in {(p["topic"], int(p["partition"])) for p in r.event["data"]["assignment"]}
    ]
    return max(found, default=0.0)


def _confirmed(member: MemberRecord, partition: Partition, before: float) -> tuple[float, int]:
    """When and in which generation an `assigned` last gave ``partition`` to the member's
    application, up to ``before``; ``(0.0, -1)`` when never."""
    found = [
        (r.received_at, int(r.event["data"].get("generation_id", -1)))
        for r in _first_receipts(member.received.get(member.blocking, []))
        if r.received_at <= before
        and r.event["type"] == ASSIGNED
        and partition in {(p["topic"], int(p["partition"])) for p in r.event["data"]["assignment"]}
    ]
    return max(found, default=(0.0, -1))


# -- bounded stalls ----------------------------------------------------------------------


CALLBACK_LOG_EVENTS = {
    "partitions revoked": "revoked",
    "partitions lost": "lost",
    "partitions assigned": "assigned",
}


def check_stalls(
    report: Report,
    members: list[MemberRecord],
    metric_scrapes: list[str],
    stall_bound: float,
) -> None:
    report.stall_bound = stall_bound
    for member in members:
        for line in member.log_lines:
            kind = CALLBACK_LOG_EVENTS.get(str(line.get("event")))
            if kind is not None and isinstance(line.get("duration_s"), int | float):
                held = float(line["duration_s"])
                report.callback_max[kind] = max(report.callback_max.get(kind, 0.0), held)
            elif line.get("event") == "rebalance completed":
                report.rebalances += 1
                report.rebalance_max = max(report.rebalance_max, float(line["duration_s"]))
    for text in metric_scrapes:
        for kind, bucket in histogram_max_buckets(text).items():
            report.callback_bucket[kind] = max(report.callback_bucket.get(kind, 0.0), bucket)


def histogram_max_buckets(text: str) -> dict[str, float]:
    """For each callback histogram: the smallest ``le`` that holds every observation."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for kind in ("revoked", "lost", "assigned"):
            if family.name != f"rebalance_sidecar_partitions_{kind}_callback_seconds":
                continue
            buckets = [
                (float(s.labels["le"]), s.value)
                for s in family.samples
                if s.name.endswith("_bucket")
            ]
            total = max((count for _, count in buckets), default=0.0)
            if total:
                found[kind] = min(le for le, count in buckets if count >= total)
    return found


# -- no crash ---------------------------------------------------------------------------


def check_processes(report: Report, members: list[MemberRecord]) -> None:
    for member in members:
        report.exits.extend(member.exits)
        report.health.extend(member.health)
        report.exceptions.extend(f"{member.name}: raw traceback: {t}" for t in member.tracebacks)
        for line in member.log_lines:
            if line.get("level") in ("error", "critical"):
                if str(line.get("logger", "")).startswith("librdkafka."):
                    # librdkafka's own lines (refused connections while a broker restarts
                    # or a link is cut): counted by kind, not one entry per port and time.
                    report.log_errors["librdkafka: " + _kafka_log_kind(line)] += 1
                else:
                    report.log_errors[str(line.get("event"))] += 1
            if "exception" in line:
                first = str(line["exception"]).strip().splitlines()[-1:]
                report.exceptions.append(f"{member.name}: {line.get('event')}: {first}")


def parse_log(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON log lines, and the last line of every raw (non-JSON) traceback."""
    lines: list[dict[str, Any]] = []
    tracebacks: list[str] = []
    raw_lines = text.splitlines()
    for index, raw in enumerate(raw_lines):
        if raw.startswith("Traceback (most recent call last)"):
            tail = next(
                (r for r in raw_lines[index + 1 :] if r and not r.startswith((" ", "\t"))), "?"
            )
            tracebacks.append(tail.strip())
    for raw in raw_lines:
        raw = raw.strip()
        if not raw.startswith("{"):
            continue
        try:
            parsed = json.loads(raw)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            lines.append(parsed)
    return lines, tracebacks


def _kafka_log_kind(line: dict[str, Any]) -> str:
    """``FAIL`` from ``"FAIL [rdkafka#consumer-2] [thrd:...]: ..."``."""
    return str(line.get("event", "")).split(" ", 1)[0] or "?"
