"""KIP-848 commit errors as the protocol means them (issue 41.5), and the bound of a
commit inside a rebalance callback (issue 41.2)."""

from __future__ import annotations

import time
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from sidecar.callback_commits import (
    Outcome,
    Verdict,
    commit_bounded,
    fenced_message,
    verdict_of_codes,
)
from sidecar.errors import CommitFenced, http_status
from sidecar.model import OffsetStatus, PartitionOffset


def test_no_error_is_committed() -> None:
    assert verdict_of_codes([None, None]) == (Verdict.COMMITTED, None)


def test_a_stale_member_epoch_is_retriable() -> None:
    stale = KafkaError.STALE_MEMBER_EPOCH
    assert verdict_of_codes([None, stale]) == (Verdict.RETRIABLE, stale)


def test_unknown_member_id_and_fenced_member_epoch_are_final() -> None:
    for code in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.FENCED_MEMBER_EPOCH):
        assert verdict_of_codes([code]) == (Verdict.FENCED, code)
        # A fence anywhere wins over a stale epoch elsewhere: retrying cannot help.
        assert verdict_of_codes([KafkaError.STALE_MEMBER_EPOCH, code]) == (Verdict.FENCED, code)


def test_other_errors_fail() -> None:
    code = KafkaError.OFFSET_METADATA_TOO_LARGE
    assert verdict_of_codes([code]) == (Verdict.FAILED, code)
    assert verdict_of_codes([KafkaError.STALE_MEMBER_EPOCH, code]) == (Verdict.FAILED, code)


def test_the_409_names_the_fence() -> None:
    for code, name in (
        (KafkaError.UNKNOWN_MEMBER_ID, "UNKNOWN_MEMBER_ID"),
        (KafkaError.FENCED_MEMBER_EPOCH, "FENCED_MEMBER_EPOCH"),
    ):
        error = CommitFenced(fenced_message(code))
        assert http_status(error) == 409
        assert name in str(error) and "nothing was committed" in str(error)


class _Consumer:
    """What ``commit_bounded`` asks of a consumer: an asynchronous commit and a read."""

    def __init__(self, committed: dict[tuple[str, int], int], refuse: bool = False) -> None:
        self._committed = committed
        self._refuse = refuse
        self.sent: list[list[tuple[str, int, int]]] = []
        self.timeouts: list[float] = []

    def commit(self, offsets: list[Any], asynchronous: bool) -> None:
        assert asynchronous  # never a synchronous commit inside a callback
        if self._refuse:
            raise KafkaException(KafkaError(KafkaError._STATE, "no coordinator"))
        self.sent.append([(o.topic, o.partition, o.offset) for o in offsets])

    def committed(self, partitions: list[Any], timeout: float) -> list[Any]:
        self.timeouts.append(timeout)
        return [
            TopicPartition(p.topic, p.partition, self._committed.get((p.topic, p.partition), -1))
            for p in partitions
        ]


OFFSETS = (PartitionOffset("t", 0, 5, OffsetStatus.COMMITTED),)


def test_a_commit_read_back_is_committed() -> None:
    consumer = _Consumer({("t", 0): 5})
    deadline = time.monotonic() + 60
    result = commit_bounded(cast(Any, consumer), OFFSETS, deadline)
    assert result.outcome is Outcome.COMMITTED
    assert consumer.sent == [[("t", 0, 5)]]
    assert all(t <= 60 for t in consumer.timeouts)  # each read bounded by the time left


def test_a_commit_not_read_back_by_the_bound_is_unknown() -> None:
    consumer = _Consumer({("t", 0): 4})
    result = commit_bounded(cast(Any, consumer), OFFSETS, time.monotonic() - 1)
    assert result.outcome is Outcome.UNKNOWN
    assert result.error is not None and "outcome of the commit is unknown" in result.error
    assert consumer.sent == [[("t", 0, 5)]]  # sent: it may still land


def test_a_commit_librdkafka_refuses_to_send_failed() -> None:
    consumer = _Consumer({}, refuse=True)
    result = commit_bounded(cast(Any, consumer), OFFSETS, time.monotonic() + 60)
    assert result.outcome is Outcome.FAILED and consumer.timeouts == []
