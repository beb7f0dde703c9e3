"""The chaos checkers themselves: a verdict that can never fail would prove nothing.

Pure tests on synthetic records (no broker): the plan is deterministic and undoes every
fault; the ownership checker finds an overlap and blames the right cause; the delivery
checker finds a lost event and a tampered redelivery.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import pytest

from sidecar.model import Delivery, DeliveryOutcome, Event, EventType, Subscription
from tests.chaos import invariants
from tests.chaos import report as verdict
from tests.chaos.broker import BrokerOutage
from tests.chaos.plan import FAULTS, Kind, plan
from tests.support.receiver import Received

TOPIC = "orders"


def test_the_plan_is_a_function_of_the_seed_and_undoes_every_fault() -> None:
    assert plan(5, 4, 40, 200) == plan(5, 4, 40, 200)
    assert plan(5, 4, 40, 200) != plan(6, 4, 40, 200)
    steps = plan(5, 4, 40, 200)
    kinds = Counter(s.kind for s in steps)
    assert sum(kinds[k] for k in FAULTS) == 40
    assert set(FAULTS) <= set(kinds)  # a first round of every kind
    assert kinds[Kind.START] == kinds[Kind.KILL] + kinds[Kind.TERM]
    assert kinds[Kind.BROKER_RESUME] == kinds[Kind.BROKER_PAUSE]
    assert kinds[Kind.SUBSCRIBER_UP] == kinds[Kind.SUBSCRIBER_DOWN]
    assert kinds[Kind.SUBSCRIBER_NORMAL] == kinds[Kind.SUBSCRIBER_SLOW]
    down: set[str] = set()
    for step in steps:  # never stops a member that is already down
        if step.kind in (Kind.KILL, Kind.TERM):
            assert step.target not in down
            down.add(step.target)
        elif step.kind is Kind.START:
            down.discard(step.target)


def test_a_plan_with_stops_in_pauses_stops_members_inside_pauses_and_starts_them_again() -> None:
    steps = plan(5, 4, 200, 1200, stops_in_pauses=True)
    pauses = [
        (pause.at, resume.at)
        for pause, resume in zip(
            [s for s in steps if s.kind is Kind.BROKER_PAUSE],
            [s for s in steps if s.kind is Kind.BROKER_RESUME],
            strict=True,
        )
    ]
    inside = [s for s in steps if s.kind is Kind.TERM and any(a < s.at < b for a, b in pauses)]
    assert inside, "no member stopped during a broker pause"
    kinds = Counter(s.kind for s in steps)
    assert kinds[Kind.START] == kinds[Kind.KILL] + kinds[Kind.TERM]
    down: set[str] = set()
    for step in steps:  # never stops a member that is already down
        if step.kind in (Kind.KILL, Kind.TERM):
            assert step.target not in down
            down.add(step.target)
        elif step.kind is Kind.START:
            down.discard(step.target)


def event(
    sequence: int, kind: str, assignment: list[int], partitions: list[int], generation: int = -1
) -> Event:
    event_id = str(uuid.UUID(int=sequence))
    body: dict[str, Any] = {
        "specversion": "1.0",
        "id": event_id,
        "type": kind,
        "sequence": str(sequence),
        "data": {
            "generation_id": generation,
            "partitions": [{"topic": TOPIC, "partition": p} for p in partitions],
            "assignment": [{"topic": TOPIC, "partition": p} for p in assignment],
        },
    }
    return Event(sequence, event_id, EventType(kind), json.dumps(body).encode())


def receipt(e: Event, received_at: float, answered_at: float | None = None) -> Received:
    return Received(json.loads(e.body), {}, received_at, answered_at or received_at, 204)


def member(
    name: str, timeline: list[tuple[Event, float, float]], **extra: Any
) -> invariants.MemberRecord:
    sub = Subscription(
        "app",
        "http://127.0.0.1:9/app",
        (EventType.ASSIGNED, EventType.REVOKED, EventType.LOST),
        "blocking",
        "whsec_x",
        10_000,
        "settings",
        0.0,
        0,
    )
    return invariants.MemberRecord(
        name=name,
        static=False,
        events=[e for e, _, _ in timeline],
        subscriptions=[sub],
        deliveries=extra.get("deliveries", {}),
        received={"app": [receipt(e, r, a) for e, r, a in timeline]},
        blocking="app",
        kills=extra.get("kills", []),
        exits=[],
        log_lines=[],
    )


ASSIGNED, REVOKED, LOST = (
    "kafka.partitions.assigned",
    "kafka.partitions.revoked",
    "kafka.partitions.lost",
)


def handover(revoke_acknowledged: float) -> list[invariants.MemberRecord]:
    """a owns partition 0 from t=1; b is told it owns it at t=5; a acknowledges the revoke
    at ``revoke_acknowledged``."""
    a = [
        (event(1, ASSIGNED, [0], [0]), 1.0, 1.0),
        (event(2, REVOKED, [], [0]), 4.0, revoke_acknowledged),
    ]
    b = [(event(1, ASSIGNED, [0], [0]), 5.0, 5.0)]
    return [member("a", a), member("b", b)]


def ownership(
    members: list[invariants.MemberRecord], outages: list[BrokerOutage] | None = None
) -> verdict.Report:
    report = verdict.Report("test")
    invariants.check_ownership(report, members, outages or [], run_ended=100.0)
    return report


def test_a_clean_handover_has_no_window() -> None:
    report = ownership(handover(revoke_acknowledged=4.5))
    assert report.windows == []
    assert report.intervals == 2


def test_an_acknowledgement_after_the_new_owner_was_told_is_unexplained() -> None:
    report = ownership(handover(revoke_acknowledged=6.0))
    [window] = report.unexplained
    assert (window.stale, window.new, window.partition) == ("a", "b", (TOPIC, 0))
    assert window.seconds == pytest.approx(1.0)
    assert not report.ok


@pytest.mark.parametrize("cause", ["barrier", "kill", "broker"])
def test_windows_the_protocol_allows_are_counted_not_failed(cause: str) -> None:
    a_events = [
        (event(1, ASSIGNED, [0], [0]), 1.0, 1.0),
        (event(2, REVOKED, [], [0]), 4.0, 6.0),
    ]
    extra: dict[str, Any] = {}
    outages: list[BrokerOutage] = []
    if cause == "barrier":
        extra["deliveries"] = {
            "app": [Delivery("app", 2, "x", DeliveryOutcome.BARRIER_TIMEOUT, 0, None, None, 4.1)]
        }
    elif cause == "kill":
        extra["kills"] = [3.0]
    else:
        outages = [BrokerOutage("pause", 2.0, 3.0)]
    b = member("b", [(event(1, ASSIGNED, [0], [0]), 5.0, 5.0)])
    report = ownership([member("a", a_events, **extra), b], outages)
    [window] = report.windows
    expected = {
        "barrier": verdict.BARRIER_TIMEOUT,
        "kill": verdict.KILLED,
        "broker": verdict.BROKER_FAULT,
    }
    assert window.cause == expected[cause]
    assert report.unexplained == []


def test_a_lost_event_ends_ownership_at_its_receipt() -> None:
    a = [
        (event(1, ASSIGNED, [0], [0]), 1.0, 1.0),
        (event(2, LOST, [], [0]), 6.0, 9.0),
    ]
    b = member("b", [(event(1, ASSIGNED, [0], [0]), 5.0, 5.0)])
    [window] = ownership([member("a", a), b]).windows
    assert window.cause == verdict.LOST_EVENT
    assert window.seconds == pytest.approx(1.0)


def test_a_missing_delivery_is_lost_and_a_changed_redelivery_is_caught() -> None:
    first = event(1, ASSIGNED, [0], [0])
    second = event(2, REVOKED, [], [0])
    record = member("a", [(first, 1.0, 1.0)])
    record.events.append(second)  # journaled, never received, not given up
    tampered = json.loads(first.body)
    tampered["data"]["assignment"] = []
    record.received["app"].append(Received(tampered, {}, 2.0, 2.0, 204))
    report = verdict.Report("test")
    invariants.check_delivery(report, [record])
    assert len(report.lost) == 1 and "seq 2" in report.lost[0]
    assert report.duplicates == 1
    assert any("different content" in m for m in report.mismatched)

    record.deliveries["app"] = [
        Delivery("app", 2, second.id, DeliveryOutcome.GAVE_UP, 5, 503, "x", 3.0)
    ]
    report = verdict.Report("test")
    invariants.check_delivery(report, [record])
    assert report.lost == [] and report.given_up == 1


def test_an_old_kill_does_not_excuse_an_overlap_after_the_partition_was_reassigned() -> None:
    a = [
        (event(1, ASSIGNED, [0], [0]), 1.0, 1.0),
        # killed at 2.0; the restarted sidecar assigns the partition again at 3.0
        (event(2, ASSIGNED, [0], [0]), 3.0, 3.0),
        (event(3, REVOKED, [], [0]), 4.0, 6.0),
    ]
    b = member("b", [(event(1, ASSIGNED, [0], [0]), 5.0, 5.0)])
    report = ownership([member("a", a, kills=[2.0]), b])
    assert [w.cause for w in report.windows] == [verdict.UNEXPLAINED]


def test_an_old_assignment_learned_late_is_blamed_on_its_own_barrier() -> None:
    """b is told (generation 8) before a's application even hears of its generation-7
    assignment, which was delivered late because a's barrier timed out."""
    b = member("b", [(event(1, ASSIGNED, [0], [0], generation=8), 1.0, 1.0)])
    a_events = [
        (event(1, ASSIGNED, [0], [0], generation=7), 2.0, 2.0),
        (event(2, REVOKED, [], [0], generation=7), 2.1, 2.2),
    ]
    timed_out = {
        "app": [Delivery("app", 2, "x", DeliveryOutcome.BARRIER_TIMEOUT, 0, None, None, 0.5)]
    }
    [window] = ownership([b, member("a", a_events, deliveries=timed_out)]).windows
    assert (window.stale, window.new, window.cause) == ("a", "b", verdict.BARRIER_TIMEOUT)
    assert window.seconds == pytest.approx(0.2)


def test_an_assignment_issued_before_a_kill_and_received_after_it_is_the_kills() -> None:
    """Seed 21, eager: a's subscriber was down; the member issued `assigned` (time 1.0), was
    killed at 2.0 and restarted; the old `assigned` reached the application only at 4.0,
    and the restarted member's new one (without the partition) at 4.5, after b got it."""
    old = event(1, ASSIGNED, [0], [0], generation=134)
    body = json.loads(old.body)
    body["time"] = "1970-01-01T00:00:01Z"  # issued at 1.0
    old = Event(1, old.id, EventType.ASSIGNED, json.dumps(body).encode())
    a = member("a", [(old, 4.0, 4.0), (event(2, ASSIGNED, [], [], generation=135), 4.5, 4.5)])
    a.kills.append(2.0)
    b = member("b", [(event(1, ASSIGNED, [0], [0], generation=135), 4.2, 4.2)])
    [window] = ownership([a, b]).windows
    assert (window.stale, window.cause) == ("a", verdict.KILLED)
