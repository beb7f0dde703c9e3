"""Retention: dropping the events every reader is past, by count and age (``prune``) and
by size (``size_cuts``), and the bytes the database uses."""

from __future__ import annotations

import time
from collections.abc import Iterator

from sidecar.journal.events import Events

# Retention by size cuts to this share of the budget, not just under it: the events of
# the next minute then fit without another cut at every prune.
SIZE_TARGET = 0.8
# At most this many bytes' worth of events per transaction of a size prune: a cut of
# hundreds of MiB at once (the first prune under a new budget) wrote a WAL of a tenth of
# it and held the write lock the member thread's appends wait for; in slices each commit
# lets a checkpoint run and an append through.
_SIZE_SLICE_BYTES = 16 * 1024 * 1024


class Retention(Events):
    """What may go, and its removal; one connection (``Connected``)."""

    # Readers other than the subscriptions whose cursor (a ``meta`` mark) pruning keeps
    # the events after: the fleet producer's, while a fleet topic is configured.
    _readers: set[str]

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

    def used_bytes_if_readable(self) -> int | None:
        """:meth:`used_bytes`, or None while the journal's storage fails."""
        return self._if_readable(self.used_bytes)

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
