"""Subscriptions (webhooks) in the journal: their rows, cursors and delivery logs."""

from __future__ import annotations

import json

from sidecar.journal.connection import Connected
from sidecar.model import Delivery, DeliveryOutcome, EventType, Subscription

_SUBSCRIPTION_COLUMNS = (
    "id, url, events, mode, secret, timeout_ms, origin, created_at, cursor, disabled_reason"
)


class Subscriptions(Connected):
    """Subscriptions and their deliveries; one connection (``Connected``)."""

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
