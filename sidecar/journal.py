"""The on-disk journal: events, subscriptions and their delivery state, in one SQLite file.

SQLite in WAL mode lets the consumer thread append while the loop reads and records
deliveries. A ``Journal`` is one connection and belongs to the thread that opened it:
the consumer thread opens a *durable* one (``synchronous=FULL``: an appended event is on
disk before the rebalance callback returns, as docs/contract.md promises), the loop opens its
own with ``synchronous=NORMAL`` (a delivery record lost to a power cut only means one
more redelivery, which at-least-once allows; a process crash loses nothing in WAL mode).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Literal

from sidecar.model import (
    Delivery,
    DeliveryOutcome,
    Event,
    EventDraft,
    EventType,
    Subscription,
    encode,
)

FILE_NAME = "journal.sqlite3"
_APPEND_ATTEMPTS = 3

# Retention by size cuts to this share of the budget, not just under it: the events of
# the next minute then fit without another cut at every prune.
SIZE_TARGET = 0.8
# At most this many bytes' worth of events per transaction of a size prune: a cut of
# hundreds of MiB at once (the first prune under a new budget) wrote a WAL of a tenth of
# it and held the write lock the member thread's appends wait for; in slices each commit
# lets a checkpoint run and an append through.
_SIZE_SLICE_BYTES = 16 * 1024 * 1024
# What the WAL file is cut back to once a checkpoint emptied it. Without it the file keeps
# the size of the largest stretch between two checkpoints for ever (SQLite reuses it
# from its start rather than shrinking it): a long reader or one large prune would leave
# it at tens of megabytes, on a volume whose size limit counts it.
WAL_SIZE_LIMIT = 4 * 1024 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('sequence', 0);
CREATE TABLE IF NOT EXISTS events (
    sequence   INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    type       TEXT NOT NULL,
    body       BLOB NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS subscriptions (
    id              TEXT PRIMARY KEY,
    url             TEXT NOT NULL,
    events          TEXT NOT NULL,
    mode            TEXT NOT NULL,
    secret          TEXT NOT NULL,
    timeout_ms      INTEGER NOT NULL,
    origin          TEXT NOT NULL,
    created_at      REAL NOT NULL,
    cursor          INTEGER NOT NULL,
    disabled_reason TEXT
);
CREATE TABLE IF NOT EXISTS deliveries (
    rowid           INTEGER PRIMARY KEY,
    subscription_id TEXT NOT NULL,
    sequence        INTEGER NOT NULL,
    event_id        TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    status_code     INTEGER,
    error           TEXT,
    at              REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS deliveries_by_subscription ON deliveries (subscription_id, rowid);
-- The newest sequence handed out: the newest event's, or the high-water mark in meta that
-- pruning keeps when it deleted them all (sequences are never reused).
CREATE VIEW IF NOT EXISTS newest (sequence) AS
    SELECT MAX(value, COALESCE((SELECT MAX(sequence) FROM events), 0))
    FROM meta WHERE key = 'sequence';
"""

_SUBSCRIPTION_COLUMNS = (
    "id, url, events, mode, secret, timeout_ms, origin, created_at, cursor, disabled_reason"
)


# SQLite's primary result codes that mean the storage failed (full, I/O error, read-only,
# locked, unopenable, corrupt): a request that meets one is a 503, not a bug.
_STORAGE_FAILURES = (
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_READONLY",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_CANTOPEN",
    "SQLITE_CORRUPT",
    "SQLITE_NOTADB",
)


def storage_failed(exc: sqlite3.Error) -> bool:
    """``exc`` says the journal's storage failed (rather than a bug in how it is used)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    return name.startswith(_STORAGE_FAILURES)


class JournalUnopenable(Exception):
    """The journal file cannot be opened as a journal: SQLite cannot open it (a directory
    it may not create files in), it is not a database, it is corrupt, or it stays locked.

    Raised by ``Journal()`` only, so a start-up or an export can say so in one line; a
    journal that fails once open raises ``sqlite3.Error`` as before (the member thread's
    fail stop, the API's 503).
    """

    def __init__(self, path: Path, error: sqlite3.Error) -> None:
        super().__init__(f"cannot open the journal {path}: {error}")
        self.path = path
        self.error = error


class Journal:
    """One connection to the journal; use it only from the thread that opened it."""

    def __init__(self, data_dir: Path, *, durable: bool) -> None:
        """``OSError`` if ``data_dir`` cannot be created, ``JournalUnopenable`` if the
        file in it cannot be opened, set up and read as a journal."""
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / FILE_NAME
        self._next_sequence: int | None = None  # known once this connection appended
        # Readers other than the subscriptions whose cursor (a ``meta`` mark) pruning
        # keeps the events after: the fleet producer's, while a fleet topic is configured.
        self._readers: set[str] = set()
        try:
            self._db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        except sqlite3.Error as exc:
            raise JournalUnopenable(self.path, exc) from exc
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._db.execute("PRAGMA busy_timeout=10000")
            self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            # Debian's SQLite (the image's) zeroes every freed page by default, so a prune
            # wrote as much WAL as it dropped (a 20 MB cut: a 21 MB WAL). FAST still zeroes
            # what is deleted inside pages kept (a deleted webhook's secret), not whole pages.
            self._db.execute("PRAGMA secure_delete=FAST")
            for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                self._db.execute(statement)
            self.last_sequence()  # the first read, before anyone relies on the file
        except sqlite3.Error as exc:
            self._db.close()
            raise JournalUnopenable(self.path, exc) from exc

    def close(self) -> None:
        if self._next_sequence is not None:
            # Keep meta current on a clean close, so an older version (which counts from
            # meta alone) can still append to this file after a downgrade.
            with contextlib.suppress(sqlite3.Error):
                self._db.execute(
                    "UPDATE meta SET value = (SELECT sequence FROM newest) WHERE key = 'sequence'"
                )
        self._db.close()

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    # -- events -------------------------------------------------------------------------

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

    def keep_for(self, mark: str) -> None:
        """Pruning on this connection keeps every event after the ``meta`` mark ``mark``
        (0 while unset): a reader that is not a subscription, the fleet producer. Not
        stored: a mark nobody registers any more (a fleet topic no longer configured)
        holds nothing. The reader bounds its own hold, as a courier gives a delivery up."""
        self._readers.add(mark)

    def prune(self, *, keep_events: int, max_age_seconds: float) -> int:
        """Drop old events that every active subscription, and every reader registered
        with ``keep_for``, is past; returns how many."""
        with self._transaction():
            floor = self._prune_floor()
            newest = self.last_sequence()
            cut = self._db.execute(
                "DELETE FROM events WHERE sequence <= ? AND (sequence <= ? OR created_at < ?)",
                (floor, newest - keep_events, time.time() - max_age_seconds),
            ).rowcount
            self._drop_orphan_deliveries()
        return int(cut)

    def size_cuts(self, max_bytes: int) -> Iterator[int]:
        """Retention by size, one slice of at most ``_SIZE_SLICE_BYTES`` per step (each its
        own transaction, committed before it yields how many events it dropped): the
        caller may let other work run between them. When the database uses more than
        ``max_bytes`` (``used_bytes``: events, their indexes and the delivery log), drop
        the oldest events every reader is past (the floor of :meth:`prune`) until it uses
        at most ``SIZE_TARGET`` of it. 0 or less: no limit.

        An event some reader has still to take is never dropped: when those alone exceed
        the budget, this cuts what it may and the database stays over it (the backlog is
        what to alert on). The pages freed are reused by later appends, so the file stops
        growing; it does not shrink (no VACUUM: it would rewrite the whole file)."""
        if max_bytes <= 0 or self.used_bytes() <= max_bytes:
            return
        target = int(max_bytes * SIZE_TARGET)
        while True:
            with self._transaction():
                used = self.used_bytes()
                (rows,) = self._db.execute("SELECT COUNT(*) FROM events").fetchone()
                if used <= target or not rows:
                    return
                # The excess's share of the used bytes, as a share of the rows: the
                # average row stands for its indexes and deliveries too. A slice where
                # the rows are smaller than the average leaves some over: the next one.
                share = -(-rows * min(used - target, _SIZE_SLICE_BYTES) // used)
                deleted = int(
                    self._db.execute(
                        "DELETE FROM events WHERE sequence IN (SELECT sequence FROM events "
                        "WHERE sequence <= ? ORDER BY sequence LIMIT ?)",
                        (self._prune_floor(), share),
                    ).rowcount
                )
                self._drop_orphan_deliveries()
            yield deleted
            if deleted < share:
                return  # the rest is not delivered yet: nothing more may go

    def used_bytes(self) -> int:
        """Bytes of the database file in use: its pages but the free ones (which SQLite
        reuses before it grows the file). Counts indexes and the delivery log; not the
        WAL."""
        # One statement, one snapshot: the member thread writes meanwhile.
        (used,) = self._db.execute(
            "SELECT (pages.page_count - free.freelist_count) * size.page_size "
            "FROM pragma_page_count AS pages, pragma_freelist_count AS free, "
            "pragma_page_size AS size"
        ).fetchone()
        return int(used)

    def _prune_floor(self) -> int:
        """The newest sequence every active subscription and every ``keep_for`` reader is
        past; in a write transaction. Keeps the high-water mark first: the events up to
        the floor may be all there are."""
        self._db.execute(
            "UPDATE meta SET value = (SELECT sequence FROM newest) WHERE key = 'sequence'"
        )
        (floor,) = self._db.execute(
            "SELECT COALESCE(MIN(cursor), (SELECT value FROM meta WHERE key='sequence')) "
            "FROM subscriptions WHERE disabled_reason IS NULL"
        ).fetchone()
        for mark in sorted(self._readers):
            floor = min(floor, self.mark(mark))
        return int(floor)

    def _drop_orphan_deliveries(self) -> None:
        self._db.execute(
            "DELETE FROM deliveries WHERE sequence < (SELECT COALESCE(MIN(sequence), 0) "
            "FROM events)"
        )

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

    def used_bytes_if_readable(self) -> int | None:
        """:meth:`used_bytes`, or None while the journal's storage fails."""
        return self._if_readable(self.used_bytes)

    def events_past_if_readable(self, mark: str) -> int | None:
        """:meth:`events_past`, or None while the journal's storage fails."""
        return self._if_readable(lambda: self.events_past(mark))

    @staticmethod
    def _if_readable(read: Callable[[], int]) -> int | None:
        try:
            return read()
        except sqlite3.Error as exc:
            if storage_failed(exc):
                return None
            raise

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

    # -- subscriptions --------------------------------------------------------------------

    def save_subscription(self, sub: Subscription) -> None:
        with self._transaction():
            self._db.execute(
                f"INSERT INTO subscriptions ({_SUBSCRIPTION_COLUMNS}) "  # noqa: S608
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                "url=excluded.url, events=excluded.events, mode=excluded.mode, "
                "secret=excluded.secret, timeout_ms=excluded.timeout_ms, origin=excluded.origin, "
                "disabled_reason=excluded.disabled_reason",
                (
                    sub.id,
                    sub.url,
                    json.dumps([e.value for e in sub.events]),
                    sub.mode,
                    sub.secret,
                    sub.timeout_ms,
                    sub.origin,
                    sub.created_at,
                    sub.cursor,
                    sub.disabled_reason,
                ),
            )

    def subscriptions(self) -> list[Subscription]:
        rows = self._db.execute(
            f"SELECT {_SUBSCRIPTION_COLUMNS} FROM subscriptions ORDER BY created_at, id"  # noqa: S608
        ).fetchall()
        return [_subscription(row) for row in rows]

    def subscription(self, sub_id: str) -> Subscription | None:
        row = self._db.execute(
            f"SELECT {_SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE id = ?",  # noqa: S608
            (sub_id,),
        ).fetchone()
        return _subscription(row) if row else None

    def delete_subscription(self, sub_id: str) -> bool:
        with self._transaction():
            deleted = self._db.execute("DELETE FROM subscriptions WHERE id = ?", (sub_id,))
            self._db.execute("DELETE FROM deliveries WHERE subscription_id = ?", (sub_id,))
        return deleted.rowcount > 0

    def advance(self, sub_id: str, sequence: int, delivery: Delivery) -> None:
        """Move the cursor past ``sequence`` and log how it ended, atomically."""
        with self._transaction():
            self._db.execute(
                "UPDATE subscriptions SET cursor = MAX(cursor, ?) WHERE id = ?", (sequence, sub_id)
            )
            self._insert_delivery(delivery)

    def pass_over(self, sub_id: str, sequence: int) -> None:
        """Move the cursor past events the subscription does not want (nothing to log)."""
        with self._transaction():
            self._db.execute(
                "UPDATE subscriptions SET cursor = MAX(cursor, ?) WHERE id = ?", (sequence, sub_id)
            )

    def disable(self, sub_id: str, reason: str) -> None:
        with self._transaction():
            self._db.execute(
                "UPDATE subscriptions SET disabled_reason = ? WHERE id = ?", (reason, sub_id)
            )

    def record(self, delivery: Delivery) -> None:
        with self._transaction():
            self._insert_delivery(delivery)

    def _insert_delivery(self, d: Delivery) -> None:
        self._db.execute(
            "INSERT INTO deliveries (subscription_id, sequence, event_id, outcome, attempts, "
            "status_code, error, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                d.subscription_id,
                d.sequence,
                d.event_id,
                d.outcome.value,
                d.attempts,
                d.status_code,
                d.error,
                d.at,
            ),
        )

    def deliveries(self, sub_id: str, limit: int) -> list[Delivery]:
        rows = self._db.execute(
            "SELECT subscription_id, sequence, event_id, outcome, attempts, status_code, error, "
            "at FROM deliveries WHERE subscription_id = ? ORDER BY rowid DESC LIMIT ?",
            (sub_id, limit),
        ).fetchall()
        return [
            Delivery(
                subscription_id=row[0],
                sequence=row[1],
                event_id=row[2],
                outcome=DeliveryOutcome(row[3]),
                attempts=row[4],
                status_code=row[5],
                error=row[6],
                at=row[7],
            )
            for row in rows
        ]


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: take the write lock up front, never mid-way."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def _subscription(row: tuple[object, ...]) -> Subscription:
    (sub_id, url, events, mode, secret, timeout_ms, origin, created_at, cursor, disabled) = row
    return Subscription(
        id=str(sub_id),
        url=str(url),
        events=tuple(EventType(e) for e in json.loads(str(events))),
        mode="blocking" if mode == "blocking" else "async",
        secret=str(secret),
        timeout_ms=int(str(timeout_ms)),
        origin="settings" if origin == "settings" else "api",
        created_at=float(str(created_at)),
        cursor=int(str(cursor)),
        disabled_reason=None if disabled is None else str(disabled),
    )


def iter_jsonl(path: Path) -> Iterator[dict[str, object]]:
    """Read a JSONL export back (tests, analytics inputs)."""
    with path.open() as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)
