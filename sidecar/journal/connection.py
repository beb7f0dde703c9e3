"""The journal's connection: the file, its pragmas, transactions and how storage fails.

SQLite in WAL mode lets the consumer thread append while the loop reads and records
deliveries. A connection belongs to the thread that opened it: the consumer thread opens
a *durable* one (``synchronous=FULL``: an appended event is on disk before the rebalance
callback returns, as docs/contract.md promises), the loop opens its own with
``synchronous=NORMAL`` (a delivery record lost to a power cut only means one more
redelivery, which at-least-once allows; a process crash loses nothing in WAL mode).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Literal

FILE_NAME = "journal.sqlite3"

# What the WAL file is cut back to once a checkpoint emptied it. Without it the file keeps
# the size of the largest stretch between two checkpoints for ever (SQLite reuses it
# from its start rather than shrinking it): a long reader or one large prune would leave
# it at tens of megabytes, on a volume whose size limit counts it.
WAL_SIZE_LIMIT = 4 * 1024 * 1024

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

    def __init__(self, path: Path, error: sqlite3.Error | str) -> None:
        super().__init__(f"cannot open the journal {path}: {error}")
        self.path = path
        self.error = error


def connect(path: Path, *, durable: bool) -> sqlite3.Connection:
    """A connection to ``path`` (created when missing), autocommit; ``JournalUnopenable``
    when SQLite cannot open it. Sets nothing yet: the schema version is read first, so a
    file from a newer version is left as it is (``sidecar.journal.schema``)."""
    try:
        return sqlite3.connect(path, timeout=10.0, isolation_level=None)
    except sqlite3.Error as exc:
        raise JournalUnopenable(path, exc) from exc


def configure(db: sqlite3.Connection, *, durable: bool) -> None:
    """The pragmas of every connection (after the schema version was checked)."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
    db.execute("PRAGMA busy_timeout=10000")
    db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    # Debian's SQLite (the image's) zeroes every freed page by default, so a prune
    # wrote as much WAL as it dropped (a 20 MB cut: a 21 MB WAL). FAST still zeroes
    # what is deleted inside pages kept (a deleted webhook's secret), not whole pages.
    db.execute("PRAGMA secure_delete=FAST")


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: take the write lock up front, never mid-way."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


class Connected:
    """What every part of ``Journal`` stands on: its one connection."""

    _db: sqlite3.Connection

    def _transaction(self) -> Transaction:
        return Transaction(self._db)

    @staticmethod
    def _if_readable(read: Callable[[], int]) -> int | None:
        try:
            return read()
        except sqlite3.Error as exc:
            if storage_failed(exc):
                return None
            raise
