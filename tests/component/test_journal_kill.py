"""The journal survives a writer killed with SIGKILL (a real process, a real SQLite file)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

from sidecar.journal import Journal
from sidecar.model import EventDraft, EventType, PartitionOffset
from sidecar.testkit.events import draft as plain_draft


def draft() -> EventDraft:
    return plain_draft(EventType.ASSIGNED, (PartitionOffset("t", 0, 7),), generation_id=3)


def _append_forever(data_dir: str, ready: multiprocessing.synchronize.Event) -> None:
    journal = Journal(Path(data_dir), durable=True)
    journal.append(draft())
    ready.set()
    while True:
        journal.append(draft())


def test_an_appended_event_survives_kill_9(tmp_path: Path) -> None:
    ready = multiprocessing.get_context("spawn").Event()
    writer = multiprocessing.get_context("spawn").Process(
        target=_append_forever, args=(str(tmp_path), ready)
    )
    writer.start()
    assert ready.wait(30)
    time.sleep(0.2)
    assert writer.pid is not None
    os.kill(writer.pid, signal.SIGKILL)
    writer.join(10)
    journal = Journal(tmp_path, durable=False)
    events = journal.events_after(0, 1_000_000)
    assert events  # committed appends are there, intact and in order
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert journal.append(draft()).sequence == len(events) + 1
    journal.close()
