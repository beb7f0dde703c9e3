"""The journal's schema, its version and the migrations between versions.

The version is SQLite's ``PRAGMA user_version`` (an integer in the file's header, 0 in a
file that never set it). Version ``n`` is the schema after ``MIGRATIONS[:n]``:

- 0: a file of release 0.1.0 or older, which set no version (its tables are version 1's),
  or a new empty file;
- 1: the tables of 0.1.0, created if missing, and the version recorded.

Opening a journal reads the version before anything else touches the file. Older: the
missing migrations run in one ``BEGIN IMMEDIATE`` transaction, the version last, so a
crash or an error leaves the file as it was (and two connections opening at once migrate
it once: the second sees the new version inside its own transaction). Newer (a release
that was rolled back): refused with ``JournalTooNew``, and the file is left untouched;
no pragma is set, no table created. docs/decisions/0001-journal-schema-version.md says
why; docs/contract.md ("Journal schema") what a future migration must keep.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from sidecar.journal.connection import JournalUnopenable

_SCHEMA_1 = """
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
    FROM meta WHERE key = 'sequence'
"""


def _statements(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _to_1(db: sqlite3.Connection) -> None:
    """0 -> 1: the schema of 0.1.0 as it was (a file of 0.1.0 has it already)."""
    for statement in _statements(_SCHEMA_1):
        db.execute(statement)


Migration = Callable[[sqlite3.Connection], None]

# MIGRATIONS[n] takes a journal from version n to n + 1. Append only: never change one
# that shipped (files on users' volumes went through it).
MIGRATIONS: tuple[Migration, ...] = (_to_1,)
SCHEMA_VERSION = len(MIGRATIONS)


class JournalTooNew(JournalUnopenable):
    """The file was written by a newer release (a higher schema version): refused, left
    as it is."""

    def __init__(self, path: Path, version: int) -> None:
        super().__init__(
            path,
            f"its schema version is {version}, written by a newer rebalance-sidecar; this "
            f"one reads versions up to {SCHEMA_VERSION}: run the newer release, or move the "
            "file away to start an empty journal (its undelivered events are then lost)",
        )
        self.version = version


def version_of(db: sqlite3.Connection) -> int:
    (version,) = db.execute("PRAGMA user_version").fetchone()
    return int(version)


def check_version(db: sqlite3.Connection, path: Path) -> int:
    """The file's schema version; ``JournalTooNew`` when it is newer than this release's.
    Reads the header only: writes nothing."""
    version = version_of(db)
    if version > SCHEMA_VERSION:
        raise JournalTooNew(path, version)
    return version


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring the file to ``SCHEMA_VERSION``: the missing migrations and the new version in
    one transaction (all or nothing)."""
    if check_version(db, path) == SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        version = check_version(db, path)  # another connection may have migrated it
        for step in MIGRATIONS[version:]:
            step(db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
