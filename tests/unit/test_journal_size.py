"""Retention by size (``SIDECAR_JOURNAL_MAX_BYTES``), on a real SQLite file.

The journal's retention was by count and age only: 100,000 events of a member owning 48
partitions are ~526 MiB, and the charts put the journal on an emptyDir limited to 256Mi.
Past its ``sizeLimit`` the kubelet evicts the pod (no ENOSPC the journal could handle, no
drain): the journal is lost, undelivered events with it. ``Journal.size_cuts`` now keeps the
database's used bytes under a budget, never dropping an event a reader has still to take.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sidecar.fleet import CURSOR
from sidecar.journal import FILE_NAME, SIZE_TARGET, WAL_SIZE_LIMIT, Journal
from sidecar.metrics import StateCollector, StateSources
from sidecar.model import (
    Assignment,
    Delivery,
    DeliveryOutcome,
    EventDraft,
    MemberState,
    PartitionOffset,
    TopicPartition,
)
from sidecar.testkit.events import draft
from tests.support.journals import subscription

MIB = 1024 * 1024
BUDGET = 2 * MIB


def wide_draft() -> EventDraft:
    """A member owning 48 partitions: ~5.9 kB of body."""
    return draft(
        partitions=[PartitionOffset("orders-events", p, 123_456_789) for p in range(48)],
        assignment=[TopicPartition("orders-events", p) for p in range(48)],
        member_id="rdkafka-6c1d2f7e-1234-4a5b-9c8d-0123456789ab",
        group_instance_id="orders-worker-0",
    )


def prune_to_size(journal: Journal, max_bytes: int) -> int:
    """Every slice of the size prune at once, as the daemon runs them (between slices it
    lets its loop run); how many events were dropped."""
    return sum(journal.size_cuts(max_bytes))


def fill(journal: Journal, count: int) -> None:
    for _ in range(count):
        journal.append(wide_draft())


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    opened = Journal(tmp_path, durable=True)
    yield opened
    opened.close()


def test_prune_to_size_brings_used_bytes_under_the_budget(journal: Journal) -> None:
    fill(journal, 1000)  # ~6 MB: three times the budget
    assert journal.used_bytes() > 2 * BUDGET
    dropped = prune_to_size(journal, BUDGET)
    assert journal.used_bytes() <= BUDGET * SIZE_TARGET
    kept = journal.events_after(0, 2000)
    assert len(kept) == 1000 - dropped
    assert [e.sequence for e in kept] == list(range(dropped + 1, 1001))  # the oldest went
    assert journal.last_sequence() == 1000
    assert prune_to_size(journal, BUDGET) == 0  # under the budget: nothing more
    assert prune_to_size(journal, 0) == 0  # 0: no limit


def test_the_file_stops_growing(journal: Journal) -> None:
    """Freed pages are reused: appending and pruning on, the file keeps its size."""
    fill(journal, 400)  # just over the budget
    prune_to_size(journal, BUDGET)
    sizes = []
    for _ in range(10):
        fill(journal, 150)  # ~0.9 MB between two prunes
        prune_to_size(journal, BUDGET)
        sizes.append(journal.path.stat().st_size)
    # ~9 MB appended in all; the file holds the budget and one stretch between prunes
    assert max(sizes) <= BUDGET + 1 * MIB
    assert journal.used_bytes() <= BUDGET


def test_the_wal_stays_small_through_a_large_prune(journal: Journal) -> None:
    """Debian's SQLite zeroes freed pages, so a 15 MB cut wrote ~18 MB of WAL, and the WAL
    file kept that size for good (SQLite reuses it from its start): on a volume whose
    size limit counts it. Now the cut writes little, in slices a checkpoint can follow,
    and a checkpoint cuts the file back."""
    wal = journal.path.with_name(FILE_NAME + "-wal")
    fill(journal, 3000)  # ~17 MB
    assert prune_to_size(journal, BUDGET) > 2500
    assert wal.stat().st_size <= WAL_SIZE_LIMIT
    fill(journal, 300)  # past a checkpoint or two
    assert wal.stat().st_size <= WAL_SIZE_LIMIT


def test_events_a_subscription_has_not_taken_are_kept(journal: Journal) -> None:
    journal.save_subscription(subscription("slow", cursor=0))
    fill(journal, 1000)
    assert prune_to_size(journal, BUDGET) == 0  # all undelivered: over the budget, kept
    assert journal.used_bytes() > BUDGET
    assert len(journal.events_after(0, 2000)) == 1000
    delivered = Delivery("slow", 600, "id", DeliveryOutcome.DELIVERED, 1, 200, None, 0.0)
    journal.advance("slow", 600, delivered)
    dropped = prune_to_size(journal, BUDGET)
    assert dropped <= 600
    assert journal.events_after(0, 1)[0].sequence == dropped + 1
    assert [e.sequence for e in journal.events_after(600, 2000)] == list(range(601, 1001))
    assert journal.pending_events() == 400


def test_events_the_fleet_producer_has_not_taken_are_kept(journal: Journal) -> None:
    journal.keep_for(CURSOR)
    fill(journal, 1000)
    journal.set_mark(CURSOR, 100)
    assert prune_to_size(journal, BUDGET) == 100
    assert journal.events_after(0, 1)[0].sequence == 101
    assert journal.used_bytes() > BUDGET  # the 900 left are the producer's to take
    journal.set_mark(CURSOR, 1000)
    prune_to_size(journal, BUDGET)
    assert journal.used_bytes() <= BUDGET * SIZE_TARGET


def test_the_journal_size_and_its_budget_are_gauges(journal: Journal) -> None:
    """What an alert needs to warn before the volume's limit evicts the pod: the used
    bytes the size prune works on, and the budget (absent when there is none)."""
    for _ in range(50):
        journal.append(wide_draft())

    def scrape(max_bytes: int) -> dict[str, float]:
        registry = CollectorRegistry()
        sources = StateSources(
            pending_events=journal.pending_events_if_readable,
            journal_used_bytes=journal.used_bytes_if_readable,
            journal_max_bytes=max_bytes,
        )
        snapshot = Assignment("g", None, None, -1, "eager", MemberState.STABLE, (), 0)
        registry.register(StateCollector(lambda: snapshot, sources))
        return {
            sample.name: sample.value
            for family in registry.collect()
            for sample in family.samples
            if sample.name.startswith("rebalance_sidecar_journal_")
        }

    gauges = scrape(BUDGET)
    assert gauges["rebalance_sidecar_journal_used_bytes"] == journal.used_bytes() > 50 * 5000
    assert gauges["rebalance_sidecar_journal_max_bytes"] == BUDGET
    assert "rebalance_sidecar_journal_max_bytes" not in scrape(0)
