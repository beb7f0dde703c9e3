"""The journal on a real SQLite file: sequences, durability across reopen, retention."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

from sidecar.journal import Journal
from sidecar.model import (
    Delivery,
    DeliveryOutcome,
    EventDraft,
    EventType,
    PartitionOffset,
)
from sidecar.testkit.events import draft as plain_draft
from tests.support.journals import subscription


def draft(kind: EventType = EventType.ASSIGNED, partition: int = 0) -> EventDraft:
    return plain_draft(kind, (PartitionOffset("t", partition, 7),), generation_id=3)


def test_sequences_increase_and_survive_reopening(tmp_path: Path) -> None:
    journal = Journal(tmp_path, durable=True)
    first = [journal.append(draft(partition=p)) for p in range(3)]
    journal.close()
    again = Journal(tmp_path, durable=True)
    later = again.append(draft())
    assert [e.sequence for e in first] == [1, 2, 3]
    assert later.sequence == 4
    stored = again.events_after(0, 10)
    assert [e.id for e in stored] == [e.id for e in [*first, later]]
    body = json.loads(stored[0].body)
    assert body["sequence"] == "0000000000000000001"  # fixed width: string order = numeric
    assert body["data"]["partitions"] == [{"topic": "t", "partition": 0, "offset": 7}]
    again.close()


def test_prune_keeps_what_a_subscriber_still_needs(tmp_path: Path) -> None:
    journal = Journal(tmp_path, durable=True)
    for p in range(10):
        journal.append(draft(partition=p))
    journal.save_subscription(subscription("slow", cursor=4))
    dropped = journal.prune(keep_events=2, max_age_seconds=3600)
    assert dropped == 4  # only what every subscription is past
    assert journal.events_after(0, 100)[0].sequence == 5
    assert journal.pending_events() == 6
    journal.advance(
        "slow", 10, Delivery("slow", 10, "id", DeliveryOutcome.DELIVERED, 1, 200, None, 0.0)
    )
    assert journal.prune(keep_events=2, max_age_seconds=3600) == 4
    assert journal.pending_events() == 0
    journal.close()


def test_sequences_are_never_reused_after_pruning_everything(tmp_path: Path) -> None:
    """The appender keeps the next sequence in memory; the high-water mark that survives
    a prune of every event (and a restart) must still be the newest ever handed out."""
    journal = Journal(tmp_path, durable=True)
    for p in range(5):
        journal.append(draft(partition=p))
    loop_side = Journal(tmp_path, durable=False)  # the loop's connection prunes
    assert loop_side.last_sequence() == 5
    assert loop_side.prune(keep_events=0, max_age_seconds=0) == 5
    assert loop_side.events_after(0, 10) == []
    assert loop_side.last_sequence() == 5
    assert loop_side.pending_events() == 0
    assert journal.append(draft()).sequence == 6  # the same appender goes on
    journal.close()
    loop_side.prune(keep_events=0, max_age_seconds=0)
    again = Journal(tmp_path, durable=True)  # a restart after everything was pruned
    assert again.last_sequence() == 6
    assert again.append(draft()).sequence == 7
    again.close()
    loop_side.close()


def test_two_appenders_on_one_file_continue_after_each_other(tmp_path: Path) -> None:
    """The appender keeps the next sequence in memory; another connection appending to
    the same file (the bench's fill, a second process on one data directory) must neither
    overwrite an event nor make an append fail: the next append continues after it."""
    first, second = Journal(tmp_path, durable=True), Journal(tmp_path, durable=False)
    assert first.append(draft()).sequence == 1
    assert [second.append(draft()).sequence for _ in range(3)] == [2, 3, 4]
    assert first.append(draft()).sequence == 5
    assert second.append(draft()).sequence == 6
    assert [e.sequence for e in first.events_after(0, 10)] == [1, 2, 3, 4, 5, 6]
    # The other connection appends and prunes what it appended: the appender's stale
    # next sequence (7) must not be handed out again below the newest (9).
    assert [second.append(draft()).sequence for _ in range(3)] == [7, 8, 9]
    second.prune(keep_events=1, max_age_seconds=3600)
    assert first.append(draft()).sequence == 10
    assert [e.sequence for e in first.events_after(0, 20)][-2:] == [9, 10]
    first.close()
    second.close()


def test_a_cleanly_closed_journal_keeps_the_old_high_water_mark_current(tmp_path: Path) -> None:
    """An older version counts from ``meta`` alone: after a clean close it still appends."""
    journal = Journal(tmp_path, durable=True)
    for _ in range(3):
        journal.append(draft())
    journal.close()
    db = sqlite3.connect(tmp_path / "journal.sqlite3")
    (value,) = db.execute("SELECT value FROM meta WHERE key = 'sequence'").fetchone()
    db.close()
    assert value == 3


def test_export_jsonl_writes_one_cloudevent_per_line(tmp_path: Path) -> None:
    journal = Journal(tmp_path, durable=True)
    ids = [journal.append(draft(partition=p)).id for p in range(1500)]
    out = io.StringIO()
    assert journal.export_jsonl(out) == 1500
    lines = out.getvalue().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ids
    journal.close()


def test_subscriptions_and_delivery_log_round_trip(tmp_path: Path) -> None:
    journal = Journal(tmp_path, durable=False)
    journal.save_subscription(subscription("a", cursor=0))
    journal.record(Delivery("a", 1, "e1", DeliveryOutcome.FAILED, 1, 503, "HTTP 503", 1.0))
    journal.advance("a", 1, Delivery("a", 1, "e1", DeliveryOutcome.DELIVERED, 2, 200, None, 2.0))
    assert journal.subscription("a") is not None
    assert journal.subscription("a").cursor == 1  # type: ignore[union-attr]
    assert [d.outcome for d in journal.deliveries("a", 10)] == ["delivered", "failed"]
    journal.disable("a", "410 Gone")
    assert journal.subscription("a").disabled_reason == "410 Gone"  # type: ignore[union-attr]
    assert journal.delete_subscription("a")
    assert journal.deliveries("a", 10) == []
    journal.close()
