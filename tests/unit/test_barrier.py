"""What a revoke barrier commits when several blocking subscribers hand offsets back."""

from __future__ import annotations

import pytest

from sidecar.barrier import Barriers, parse_offsets
from sidecar.model import Event, EventType, PartitionOffset, TopicPartition
from tests.support.outcomes import Outcomes

REVOKED = Event(1, "e1", EventType.REVOKED, b"{}")


def test_two_subscribers_handing_back_one_partition_commit_the_lower_offset() -> None:
    """Committing the higher offset (as before) skipped, for the slower subscriber, the
    records between the two: it never handled them, and the next owner starts after them.
    The lower offset is what every subscriber has handled: at least once for each."""
    outcomes = Outcomes()
    barriers = Barriers()
    barriers.open(REVOKED, ["fast", "slow"], outcomes)
    assert barriers.settle(
        "fast", REVOKED, True, (PartitionOffset("t", 0, 90), PartitionOffset("t", 1, 7))
    )
    assert barriers.settle("slow", REVOKED, True, (PartitionOffset("t", 0, 40),))
    (outcome,) = outcomes
    assert outcome.offsets == (PartitionOffset("t", 0, 40), PartitionOffset("t", 1, 7))
    assert outcome.handed_back == ("fast", "slow") and not outcome.timed_out


def test_one_answer_naming_a_partition_twice_is_rejected() -> None:
    """As ``POST /commit`` refuses it: the lower of the two was committed before."""
    owned = {TopicPartition("t", 0)}
    body = (
        b'{"offsets": [{"topic": "t", "partition": 0, "offset": 9},'
        b' {"topic": "t", "partition": 0, "offset": 3}]}'
    )
    with pytest.raises(ValueError, match=r"offsets\[1\] names t\[0\] a second time"):
        parse_offsets(body, owned)
