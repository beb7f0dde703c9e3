"""The application's commits between polls (``sidecar.commits``): held, in flight,
answered by librdkafka's ``on_commit``, which names no request."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.commands import Commit
from sidecar.commits import CommitsInFlight, commit_key
from sidecar.errors import CommitFailed, CommitUnanswered
from sidecar.handoff import PendingCommand
from sidecar.kafka.group_calls import commit_failure
from sidecar.model import PartitionOffset


def _commit(*triples: tuple[str, int, int]) -> Commit:
    return Commit(tuple(PartitionOffset(t, p, o) for t, p, o in triples))


def _answer(*triples: tuple[str, int, int]) -> list[KafkaTopicPartition]:
    return [KafkaTopicPartition(t, p, o) for t, p, o in triples]


def _caller(command: Commit) -> PendingCommand:
    return PendingCommand(command)


def _take(flights: CommitsInFlight, command: Commit, at: float = 0.0) -> PendingCommand:
    caller = _caller(command)
    flights.take(caller, command, at)
    return caller


def test_one_commit_of_a_partition_in_flight_the_next_is_held_until_it_is_answered() -> None:
    flights = CommitsInFlight(10.0)
    first = _take(flights, _commit(("t", 0, 5), ("t", 1, 7)))
    other = _take(flights, _commit(("t", 2, 1)))
    second = _take(flights, _commit(("t", 1, 9)))  # t[1] again: behind the first
    third = _take(flights, _commit(("t", 1, 11)))  # and behind the second, not beside it
    ready = flights.sendable()
    assert [c.caller for c in ready] == [first, other]
    for commit in ready:
        flights.sent(commit)
    assert flights.sendable() == []

    answered = flights.answered(_answer(("t", 1, 7), ("t", 0, 5)))  # any order
    assert answered is not None and answered.caller is first
    answered.succeed()
    assert first.future.result(timeout=0) == _commit(("t", 0, 5), ("t", 1, 7)).offsets
    [next_one] = flights.sendable()
    assert next_one.caller is second  # the third still waits for the second
    flights.sent(next_one)
    assert flights.sendable() == []
    assert not third.future.done()


def test_an_answer_that_is_none_of_ours_matches_nothing() -> None:
    flights = CommitsInFlight(10.0)
    _take(flights, _commit(("t", 0, 5)))
    for commit in flights.sendable():
        flights.sent(commit)
    assert flights.answered(_answer(("t", 0, 6))) is None
    assert flights.answered(_answer(("t", 0, 5))) is not None
    assert len(flights) == 0


def test_past_the_deadline_a_sent_commit_is_unknown_and_a_held_one_is_not_sent() -> None:
    flights = CommitsInFlight(1.5)
    sent = _take(flights, _commit(("t", 0, 5)), at=10.0)
    for commit in flights.sendable():
        flights.sent(commit)
    held = _take(flights, _commit(("t", 0, 6)), at=10.5)
    assert flights.overdue(11.4).unknown == []
    told = flights.overdue(11.5)
    assert [c.caller for c in told.unknown] == [None] and told.not_sent == []
    with pytest.raises(CommitUnanswered, match=r"no answer from Kafka within 1\.5 s"):
        sent.future.result(timeout=0)
    told = flights.overdue(12.0)
    assert told.unknown == [] and len(told.not_sent) == 1  # told once each
    with pytest.raises(CommitFailed, match="not committed: an earlier commit") as refused:
        held.future.result(timeout=0)
    assert not isinstance(refused.value, CommitUnanswered)  # certain: nothing committed
    late = flights.answered(_answer(("t", 0, 5)))
    assert late is not None and late.caller is None  # Kafka's late answer: logged only
    assert len(flights) == 0


def test_a_rebalance_tells_every_waiting_caller_at_once_and_keeps_the_flights() -> None:
    flights = CommitsInFlight(10.0)
    sent = _take(flights, _commit(("t", 0, 5)))
    for commit in flights.sendable():
        flights.sent(commit)
    held = _take(flights, _commit(("t", 0, 6)))
    told = flights.interrupt("a rebalance began")
    assert len(told.unknown) == 1 and len(told.not_sent) == 1
    with pytest.raises(CommitUnanswered, match="no answer from Kafka before a rebalance began"):
        sent.future.result(timeout=0)
    with pytest.raises(CommitFailed, match="before a rebalance began"):
        held.future.result(timeout=0)
    told = flights.interrupt("a rebalance began")
    assert told.unknown == [] and told.not_sent == []  # once
    _take(flights, _commit(("t", 0, 7)))
    assert flights.sendable() == []  # the first is still in flight: one at a time
    assert flights.answered(_answer(("t", 0, 5))) is not None


def test_abandoning_tells_the_waiting_callers_and_forgets_every_commit() -> None:
    flights = CommitsInFlight(1.0)
    waiting = _take(flights, _commit(("t", 0, 2)))
    for commit in flights.sendable():
        flights.sent(commit)
    told = flights.abandon("the consumer closed")
    assert len(told.unknown) == 1
    with pytest.raises(CommitUnanswered, match="before the consumer closed"):
        waiting.future.result(timeout=0)
    assert len(flights) == 0
    _take(flights, _commit(("t", 0, 3)))
    assert len(flights.sendable()) == 1


def test_a_caller_that_gave_up_is_not_answered() -> None:
    flights = CommitsInFlight(1.0)
    caller = _take(flights, _commit(("t", 0, 1)))
    caller.future.cancel()
    for commit in flights.sendable():
        flights.sent(commit)
    assert len(flights.overdue(2.0).unknown) == 1  # no InvalidStateError


def test_what_failed_in_an_answer() -> None:
    ok = _answer(("t", 0, 5))
    assert commit_failure(None, ok) is None
    refused = KafkaError(KafkaError.REBALANCE_IN_PROGRESS)
    assert commit_failure(refused, ok) == f"commit failed: {refused.str()}"
    # A TopicPartition's error is read-only in Python: one as librdkafka fills it in.
    partial = [
        SimpleNamespace(topic="t", partition=0, offset=5, error=None),
        SimpleNamespace(
            topic="t", partition=1, offset=6, error=KafkaError(KafkaError.UNKNOWN_MEMBER_ID)
        ),
    ]
    failure = commit_failure(None, partial)  # type: ignore[arg-type]
    assert failure is not None and failure.startswith("commit failed for t[1]: ")
    assert commit_key(_commit(("t", 0, 1)).offsets) == commit_key(_answer(("t", 0, 1)))


def test_the_next_deadline_is_the_earliest_caller_still_waiting() -> None:
    """What the poll loop shortens its poll for: held and sent commits whose callers
    wait; not one whose caller was told already."""
    flights = CommitsInFlight(10.0)
    assert flights.next_deadline() is None
    _take(flights, _commit(("t", 0, 1)), at=5.0)
    _take(flights, _commit(("t", 0, 2)), at=3.0)  # held behind the first: still waits
    assert flights.next_deadline() == 13.0
    [sent] = flights.sendable()
    flights.sent(sent)
    assert flights.next_deadline() == 13.0
    flights.overdue(14.0)  # the held one is dropped, its caller told
    assert flights.next_deadline() == 15.0
    flights.overdue(15.0)  # the sent one's caller is told "unknown": nobody waits
    assert flights.next_deadline() is None
