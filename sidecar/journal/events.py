"""The journal's events: appending them in sequence, reading them back, and the marks
(``meta`` rows) readers keep their place with."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import IO

from sidecar.journal.connection import Connected
from sidecar.model import Event, EventDraft, EventType, encode

_APPEND_ATTEMPTS = 3


class Events(Connected):
    """Appends and reads of events; one connection (``Connected``)."""

    path: Path
    _next_sequence: int | None  # known once this connection appended

    def append(self, draft: EventDraft) -> Event:
        """Give the draft the next sequence number and store it; returns once committed.

        One statement, one commit on the callback's path: the appending connection (the
        member thread's) keeps the next sequence in memory, and the INSERT itself checks
        it against the newest sequence handed out (the ``newest`` view: the newest event,
        or the high-water mark in ``meta`` that pruning keeps). Another connection that
        appended, or appended and pruned, since makes the check fail: the sequence is read
        again, so a sequence is never reused and never goes backwards.
        """
        for _ in range(_APPEND_ATTEMPTS):
            if self._next_sequence is None:
                self._next_sequence = self.last_sequence() + 1
            sequence = self._next_sequence
            body = encode(draft.cloudevent(sequence))
            inserted = self._db.execute(
                "INSERT INTO events (sequence, id, type, body, created_at) "
                "SELECT ?, ?, ?, ?, ? WHERE (SELECT sequence FROM newest) = ?",
                (sequence, draft.id, draft.type.value, body, draft.time, sequence - 1),
            ).rowcount
            if inserted == 1:
                self._next_sequence = sequence + 1
                return Event(sequence=sequence, id=draft.id, type=draft.type, body=body)
            self._next_sequence = None  # someone else appended: read the newest again
        raise sqlite3.OperationalError(
            f"journal append: another connection kept appending ({_APPEND_ATTEMPTS} tries)"
        )

    def last_sequence(self) -> int:
        (value,) = self._db.execute("SELECT sequence FROM newest").fetchone()
        return int(value)

    def events_after(
        self, sequence: int, limit: int, types: tuple[EventType, ...] | None = None
    ) -> list[Event]:
        if types is not None:
            marks = ",".join("?" * len(types))
            rows = self._db.execute(
                f"SELECT sequence, id, type, body FROM events WHERE sequence > ? "  # noqa: S608
                f"AND type IN ({marks}) ORDER BY sequence LIMIT ?",
                (sequence, *(t.value for t in types), limit),
            ).fetchall()
        else:
            rows = self._db.execute(
                "SELECT sequence, id, type, body FROM events WHERE sequence > ? "
                "ORDER BY sequence LIMIT ?",
                (sequence, limit),
            ).fetchall()
        return [Event(row[0], row[1], EventType(row[2]), bytes(row[3])) for row in rows]

    def event(self, sequence: int) -> Event | None:
        found = self.events_after(sequence - 1, 1)
        return found[0] if found and found[0].sequence == sequence else None

    def first_created_at(self, sequence: int) -> float | None:
        row = self._db.execute(
            "SELECT created_at FROM events WHERE sequence = ?", (sequence,)
        ).fetchone()
        return float(row[0]) if row else None

    def export_jsonl(self, out: IO[str], after: int = 0) -> int:
        """Write every event after ``after`` as one CloudEvent JSON per line."""
        count = 0
        while True:
            batch = self.events_after(after, 1000)
            if not batch:
                return count
            for event in batch:
                out.write(event.body.decode() + "\n")
            count += len(batch)
            after = batch[-1].sequence

    def aged_out(self, after: int, journaled_before: float) -> tuple[int, int]:
        """The newest event after ``after`` journaled before ``journaled_before`` (epoch
        seconds), and how many events there are up to it: a reader that gives up what it
        could not read within an age skips to there. ``(after, 0)`` when none is that old.

        The oldest event after ``after`` is looked up first (by key): when it is not that
        old (the usual case, read on every turn of the reader's loop), nothing is scanned."""
        oldest = self._db.execute(
            "SELECT created_at FROM events WHERE sequence > ? ORDER BY sequence LIMIT 1",
            (after,),
        ).fetchone()
        if oldest is None or oldest[0] >= journaled_before:
            return after, 0
        (last,) = self._db.execute(
            "SELECT MAX(sequence) FROM events WHERE sequence > ? AND created_at < ?",
            (after, journaled_before),
        ).fetchone()
        if last is None:
            return after, 0
        (count,) = self._db.execute(
            "SELECT COUNT(*) FROM events WHERE sequence > ? AND sequence <= ?", (after, last)
        ).fetchone()
        return int(last), int(count)

    def pending_events(self) -> int:
        """Events some active subscription has not yet acknowledged or given up."""
        (count,) = self._db.execute(
            "SELECT COUNT(*) FROM events WHERE sequence > (SELECT COALESCE(MIN(cursor), "
            "(SELECT sequence FROM newest)) FROM subscriptions WHERE disabled_reason IS NULL)"
        ).fetchone()
        return int(count)

    def pending_events_if_readable(self) -> int | None:
        """:meth:`pending_events`, or None while the journal's storage fails."""
        return self._if_readable(self.pending_events)

    def events_past(self, mark: str) -> int:
        """Events after the ``meta`` mark ``mark`` (every event while it is unset): what a
        reader registered with ``keep_for`` has still to read."""
        (count,) = self._db.execute(
            "SELECT COUNT(*) FROM events WHERE sequence > "
            "COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?), 0)",
            (mark,),
        ).fetchone()
        return int(count)

    def events_past_if_readable(self, mark: str) -> int | None:
        """:meth:`events_past`, or None while the journal's storage fails."""
        return self._if_readable(lambda: self.events_past(mark))

    def mark(self, key: str) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def set_mark(self, key: str, value: int) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
