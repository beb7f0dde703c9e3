"""Commits in flight (``sidecar.commits``): librdkafka's ``on_commit`` names no request."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.commits import CommitsInFlight, commit_failure, commit_key
from sidecar.errors import CommitUnanswered
from sidecar.handoff import PendingCommand
from sidecar.model import PartitionOffset


def _offsets(*triples: tuple[str, int, int]) -> tuple[PartitionOffset, ...]:
    return tuple(PartitionOffset(t, p, o) for t, p, o in triples)


def _answer(*triples: tuple[str, int, int]) -> list[KafkaTopicPartition]:
    return [KafkaTopicPartition(t, p, o) for t, p, o in triples]


def test_an_answer_is_matched_by_its_offsets_in_any_order_oldest_first() -> None:
    flights = CommitsInFlight(1.0)
    first, second, other = PendingCommand(None), PendingCommand(None), PendingCommand(None)  # type: ignore[arg-type]
    flights.sent(first, _offsets(("t", 0, 5), ("t", 1, 7)), now=0.0)
    flights.sent(other, _offsets(("t", 0, 6)), now=0.0)
    flights.sent(second, _offsets(("t", 1, 7), ("t", 0, 5)), now=0.1)

    answered = flights.answered(_answer(("t", 1, 7), ("t", 0, 5)))
    assert answered is not None and answered.caller is first
    answered = flights.answered(_answer(("t", 0, 5), ("t", 1, 7)))
    assert answered is not None and answered.caller is second
    assert flights.answered(_answer(("t", 0, 5), ("t", 1, 7))) is None  # a sync commit's
    assert len(flights) == 1


def test_an_overdue_commit_is_told_unknown_once_and_its_late_answer_still_matches() -> None:
    flights = CommitsInFlight(1.5)
    caller = PendingCommand(None)  # type: ignore[arg-type]
    flights.sent(caller, _offsets(("t", 0, 5)), now=10.0)
    assert flights.overdue(11.4) == []
    [late] = flights.overdue(11.5)
    assert late.caller is None
    with pytest.raises(CommitUnanswered, match=r"no answer from Kafka within 1\.5 s"):
        caller.future.result(timeout=0)
    assert flights.overdue(20.0) == []  # told once
    answered = flights.answered(_answer(("t", 0, 5)))
    assert answered is late and answered.caller is None  # logged, not answered twice
    assert len(flights) == 0


def test_abandoning_tells_the_callers_still_waiting_and_forgets_every_commit() -> None:
    flights = CommitsInFlight(1.0)
    waiting, told = PendingCommand(None), PendingCommand(None)  # type: ignore[arg-type]
    flights.sent(told, _offsets(("t", 0, 1)), now=0.0)
    flights.overdue(5.0)
    flights.sent(waiting, _offsets(("t", 0, 2)), now=4.5)
    assert flights.abandon("the consumer closed") == 1
    with pytest.raises(CommitUnanswered, match="the consumer closed before Kafka answered"):
        waiting.future.result(timeout=0)
    assert len(flights) == 0


def test_a_caller_that_gave_up_is_not_answered() -> None:
    flights = CommitsInFlight(1.0)
    caller = PendingCommand(None)  # type: ignore[arg-type]
    caller.future.cancel()
    flights.sent(caller, _offsets(("t", 0, 1)), now=0.0)
    assert len(flights.overdue(2.0)) == 1  # no InvalidStateError from a cancelled future


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
    assert commit_key(_offsets(("t", 0, 1))) == commit_key(_answer(("t", 0, 1)))
