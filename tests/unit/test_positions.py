"""Lag arithmetic and the rebalance history behind the flapping mark (pure)."""

from __future__ import annotations

from sidecar.model import TopicPartition
from sidecar.positions import lag_of, unavailable
from sidecar.rebalance_history import RebalanceHistory


def test_lag_is_never_negative_and_unknown_when_a_side_is() -> None:
    assert lag_of(5, 12) == 7
    assert lag_of(12, 12) == 0
    assert lag_of(15, 12) == 0  # committed past a truncated log
    assert lag_of(None, 12) is None
    assert lag_of(5, None) is None


def test_unavailable_positions_say_why_and_carry_no_figures() -> None:
    read = unavailable([TopicPartition("t", 1), TopicPartition("t", 0)], "Kafka did not answer")
    body = read.as_dict()
    assert body["available"] is False and body["error"] == "Kafka did not answer"
    assert [p["lag"] for p in body["partitions"]] == [None, None]


def test_flapping_is_more_than_n_rebalances_in_the_window() -> None:
    history = RebalanceHistory(keep_seconds=3600)
    for at in (990.0, 1100.0, 1200.0, 1250.0):
        history.completed(at)
    assert history.summary(300, 3, now=1300.0)["in_window"] == 3
    assert not history.summary(300, 3, now=1300.0)["flapping"]
    history.completed(1290.0)
    assert history.summary(300, 3, now=1300.0)["flapping"]
    assert history.last == 1290.0
    history.completed(9000.0)  # older ones fall out of what is kept
    assert history.since(0) == 1
