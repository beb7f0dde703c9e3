"""The on-disk journal: events, subscriptions and their delivery state, in one SQLite file.

A ``Journal`` is one connection and belongs to the thread that opened it (the member
thread's is durable, the loop's is not: ``connection``). Its parts, one module each:
``connection`` (the file, pragmas, transactions, storage failures), ``schema`` (the
tables, the schema version and the migrations), ``events`` (append and read),
``retention`` (what may be dropped, by count, age and size) and ``subscriptions``
(webhooks, cursors and delivery logs). ``sidecar.journal`` is the public import path.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from sidecar.journal.connection import (
    FILE_NAME,
    WAL_SIZE_LIMIT,
    JournalUnopenable,
    configure,
    connect,
    storage_failed,
)
from sidecar.journal.retention import SIZE_TARGET, Retention
from sidecar.journal.schema import SCHEMA_VERSION, JournalTooNew, check_version, migrate
from sidecar.journal.subscriptions import Subscriptions

__all__ = [
    "FILE_NAME",
    "SCHEMA_VERSION",
    "SIZE_TARGET",
    "WAL_SIZE_LIMIT",
    "Journal",
    "JournalTooNew",
    "JournalUnopenable",
    "iter_jsonl",
    "storage_failed",
]


class Journal(Retention, Subscriptions):
    """One connection to the journal; use it only from the thread that opened it."""

    def __init__(self, data_dir: Path, *, durable: bool) -> None:
        """``OSError`` if ``data_dir`` cannot be created, ``JournalUnopenable`` if the
        file in it cannot be opened, set up and read as a journal (``JournalTooNew``: a
        newer release's file, left untouched)."""
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / FILE_NAME
        self._next_sequence = None
        self._readers = set()
        self._db = connect(self.path, durable=durable)
        try:
            check_version(self._db, self.path)  # before any pragma or table touches it
            configure(self._db, durable=durable)
            migrate(self._db, self.path)
            self.last_sequence()  # the first read, before anyone relies on the file
        except JournalUnopenable:
            self._db.close()
            raise
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


def iter_jsonl(path: Path) -> Iterator[dict[str, object]]:
    """Read a JSONL export back (tests, analytics inputs)."""
    with path.open() as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)
