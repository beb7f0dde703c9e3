"""The journal's schema version (``PRAGMA user_version``) and its migrations: a journal
written by release 0.1.0 (tests/fixtures/journal-v0.sqlite3, made with that code) opens
and migrates with nothing lost; a newer release's journal is refused and left untouched;
a migration that fails leaves the file as it was."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sidecar.journal import (
    FILE_NAME,
    SCHEMA_VERSION,
    Journal,
    JournalTooNew,
    JournalUnopenable,
    schema,
)
from sidecar.testkit.events import draft

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "journal-v0.sqlite3"


def raw(path: Path, query: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(query).fetchall()
    finally:
        db.close()


def contents(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "events": raw(path, "SELECT * FROM events ORDER BY sequence"),
        "meta": raw(path, "SELECT * FROM meta ORDER BY key"),
        "subscriptions": raw(path, "SELECT * FROM subscriptions ORDER BY id"),
        "deliveries": raw(path, "SELECT * FROM deliveries ORDER BY rowid"),
    }


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_fixture_is_a_journal_of_the_unversioned_schema() -> None:
    assert raw(FIXTURE, "PRAGMA user_version") == [(0,)]
    assert [row[0] for row in raw(FIXTURE, "SELECT sequence FROM events ORDER BY sequence")] == [
        5,
        6,
        7,
        8,
    ]


def test_a_journal_of_release_0_1_0_opens_and_migrates_with_nothing_lost(tmp_path: Path) -> None:
    shutil.copy(FIXTURE, tmp_path / FILE_NAME)
    before = contents(tmp_path / FILE_NAME)

    journal = Journal(tmp_path, durable=True)
    try:
        assert raw(tmp_path / FILE_NAME, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
        assert journal.last_sequence() == 8
        assert [e.sequence for e in journal.events_after(0, 100)] == [5, 6, 7, 8]
        subs = {s.id: s for s in journal.subscriptions()}
        assert {k: (s.cursor, s.disabled_reason, s.origin) for k, s in subs.items()} == {
            "cfg_0123456789abcdef": (5, None, "settings"),
            "wh_api": (6, None, "api"),
            "wh_gone": (0, "410 Gone", "api"),
        }
        assert journal.mark("fleet_cursor") == 4
        assert [d.outcome.value for d in journal.deliveries("wh_api", 10)] == [
            "delivered",
            "delivered",
        ]
        appended = journal.append(draft())
        assert appended.sequence == 9  # the sequence goes on: never reused
    finally:
        journal.close()
    after = contents(tmp_path / FILE_NAME)
    assert after["events"][:4] == before["events"]
    assert after["subscriptions"] == before["subscriptions"]
    assert after["deliveries"] == before["deliveries"]

    # Opened again: already current, nothing to migrate, the same journal.
    again = Journal(tmp_path, durable=False)
    try:
        assert again.last_sequence() == 9
    finally:
        again.close()


def test_a_new_journal_records_the_current_version(tmp_path: Path) -> None:
    Journal(tmp_path, durable=False).close()
    assert raw(tmp_path / FILE_NAME, "PRAGMA user_version") == [(SCHEMA_VERSION,)]


def test_a_newer_release_s_journal_is_refused_in_one_line_and_left_untouched(
    tmp_path: Path,
) -> None:
    Journal(tmp_path, durable=True).close()
    path = tmp_path / FILE_NAME
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.execute("PRAGMA journal_mode=DELETE")  # a mode this release would change to WAL
    db.execute("CREATE TABLE from_the_future (x)")
    db.close()
    before = digest(path)

    with pytest.raises(JournalTooNew) as refused:
        Journal(tmp_path, durable=True)
    message = str(refused.value)
    assert "\n" not in message
    assert f"its schema version is {SCHEMA_VERSION + 1}" in message
    assert f"reads versions up to {SCHEMA_VERSION}" in message
    assert isinstance(refused.value, JournalUnopenable)  # the start-up's one-line exit 2
    assert digest(path) == before
    assert raw(path, "PRAGMA journal_mode") == [("delete",)]


def test_a_migration_that_fails_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(FIXTURE, tmp_path / FILE_NAME)
    before = contents(tmp_path / FILE_NAME)

    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half_done (x)")
        raise sqlite3.OperationalError("disk I/O error (in the test)")

    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, broken))
    monkeypatch.setattr(schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(JournalUnopenable, match="disk I/O error"):
        Journal(tmp_path, durable=True)
    path = tmp_path / FILE_NAME
    assert raw(path, "PRAGMA user_version") == [(0,)]
    assert not raw(path, "SELECT name FROM sqlite_master WHERE name = 'half_done'")
    assert contents(path) == before
