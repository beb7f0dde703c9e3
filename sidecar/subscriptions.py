"""The webhook registry: validation, secrets, and persistence of subscriptions.

Subscriptions come from the API (``POST /webhooks``) or from settings
(``SIDECAR_WEBHOOKS``, the usual Kubernetes case). Both are stored in the journal so a
restart resumes delivery at each subscription's cursor. A settings-declared webhook keeps
a stable id (given, or derived from its URL) so its cursor survives restarts too.

``SIDECAR_WEBHOOKS`` is the source of truth for the declared ones: at start, a declared
webhook no longer declared is removed, a changed one is updated, and a changed one that a
``410 Gone`` had disabled is enabled again (its URL or secret was fixed). Webhooks
registered through the API are left alone.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
import uuid
from collections.abc import Iterable
from dataclasses import replace
from typing import Literal
from urllib.parse import urlsplit

import structlog

from sidecar.delivery import SECRET_PREFIX, Dispatcher
from sidecar.errors import InvalidSubscription as InvalidSubscription  # re-exported
from sidecar.errors import TooManyWebhooks
from sidecar.journal import Journal
from sidecar.model import EventType, Subscription
from sidecar.settings import WebhookSpec
from sidecar.webhook_http import parse_target

log = structlog.get_logger("sidecar.subscriptions")

DEFAULT_EVENTS = (EventType.ASSIGNED, EventType.REVOKED, EventType.LOST)


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def check_url(url: str, allowed_hosts: Iterable[str]) -> str:
    if len(url) > 2048:
        raise InvalidSubscription("url: longer than 2048 characters")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise InvalidSubscription("url: must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidSubscription(f"url: not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidSubscription(
            f"url: scheme must be http or https, not {parts.scheme or 'missing'!r}"
        )
    if not parts.hostname:
        raise InvalidSubscription("url: has no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidSubscription(
            "url: must not carry credentials; the signature authenticates the sidecar"
        )
    if parts.fragment:
        raise InvalidSubscription("url: must not have a #fragment")
    try:
        parse_target(url)  # what will send to it must accept it, too
    except ValueError as exc:
        raise InvalidSubscription(f"url: not a valid URL ({exc})") from None
    allowed = {h.lower() for h in allowed_hosts}
    if allowed and parts.hostname.lower() not in allowed:
        raise InvalidSubscription(
            f"url: host {parts.hostname!r} is not in SIDECAR_WEBHOOK_ALLOWED_HOSTS"
        )
    del port
    return url


def check_secret(secret: str) -> str:
    if not secret.startswith(SECRET_PREFIX):
        raise InvalidSubscription(f"secret: must start with {SECRET_PREFIX!r}")
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSubscription("secret: the part after whsec_ must be base64") from None
    if not 24 <= len(key) <= 64:
        raise InvalidSubscription("secret: the key must be 24 to 64 bytes (base64-decoded)")
    return secret


def check_events(events: Iterable[str]) -> tuple[EventType, ...]:
    result: list[EventType] = []
    for name in events:
        try:
            event_type = EventType(name)
        except ValueError:
            known = ", ".join(e.value for e in EventType)
            raise InvalidSubscription(
                f"events: unknown event type {name!r} (known: {known})"
            ) from None
        if event_type not in result:
            result.append(event_type)
    if not result:
        raise InvalidSubscription("events: name at least one event type")
    return tuple(result)


class Registry:
    """Creates, lists and removes subscriptions, keeping the dispatcher in step. Loop-side."""

    def __init__(
        self,
        journal: Journal,
        dispatcher: Dispatcher,
        allowed_hosts: tuple[str, ...],
        *,
        max_count: int | None = None,
    ) -> None:
        self._journal = journal
        self._dispatcher = dispatcher
        self._allowed_hosts = allowed_hosts
        self._max_count = max_count

    def create(
        self,
        *,
        url: str,
        events: Iterable[str] | None,
        mode: Literal["blocking", "async"],
        secret: str | None,
        timeout_ms: int,
        origin: Literal["api", "settings"] = "api",
        sub_id: str | None = None,
    ) -> Subscription:
        existing = self._journal.subscription(sub_id) if sub_id else None
        sub = Subscription(
            id=sub_id or "wh_" + uuid.uuid4().hex[:16],
            url=check_url(url, self._allowed_hosts),
            events=check_events(events) if events is not None else DEFAULT_EVENTS,
            mode=mode,
            secret=check_secret(secret)
            if secret
            else (existing.secret if existing else new_secret()),
            timeout_ms=timeout_ms,
            origin=origin,
            created_at=existing.created_at if existing else time.time(),
            # A new subscription starts with the next event; a known one keeps its place.
            cursor=existing.cursor if existing else self._journal.last_sequence(),
            disabled_reason=None,
        )
        if existing is None and origin == "api":
            self._check_room()
        if existing is not None and existing.disabled_reason is not None:
            if _same_target(existing, sub):
                # Disabled (410 Gone) and declared again unchanged: still gone.
                sub = replace(sub, disabled_reason=existing.disabled_reason)
            else:
                log.info("webhook enabled again: its declaration changed", webhook=sub.id)
        self._journal.save_subscription(sub)
        if sub.disabled_reason is None:
            self._dispatcher.add(sub)
        else:
            self._dispatcher.remove(sub.id)
        return sub

    def _check_room(self) -> None:
        """``SIDECAR_WEBHOOK_MAX_COUNT``, counting the webhooks that deliver: one disabled
        by a ``410`` holds no courier, connection or retention."""
        if self._max_count is None:
            return
        count = sum(1 for sub in self._journal.subscriptions() if sub.disabled_reason is None)
        if count >= self._max_count:
            raise TooManyWebhooks(
                f"there are {count} webhooks already, the most SIDECAR_WEBHOOK_MAX_COUNT "
                "allows: delete one (DELETE /webhooks/{id}) before registering another"
            )

    def declare(self, specs: Iterable[WebhookSpec]) -> list[Subscription]:
        """Make the declared subscriptions what settings say (ids stable across restarts)."""
        wanted = {spec.subscription_id: spec for spec in specs}
        for sub in self._journal.subscriptions():
            if sub.origin == "settings" and sub.id not in wanted:
                self.delete(sub.id)
                log.info("declared webhook removed: no longer in SIDECAR_WEBHOOKS", webhook=sub.id)
        return [
            self.create(
                url=spec.url,
                events=spec.events,
                mode=spec.mode,
                secret=spec.secret.get_secret_value(),
                timeout_ms=spec.timeout_ms,
                origin="settings",
                sub_id=sub_id,
            )
            for sub_id, spec in wanted.items()
        ]

    def list(self) -> list[Subscription]:
        return self._journal.subscriptions()

    def get(self, sub_id: str) -> Subscription | None:
        return self._journal.subscription(sub_id)

    def delete(self, sub_id: str) -> bool:
        deleted = self._journal.delete_subscription(sub_id)
        self._dispatcher.remove(sub_id)
        return deleted


def _same_target(a: Subscription, b: Subscription) -> bool:
    """Whether ``b`` would be sent where and how ``a`` was (so a ``410`` still applies)."""
    return (a.url, a.events, a.mode, a.secret, a.timeout_ms) == (
        b.url,
        b.events,
        b.mode,
        b.secret,
        b.timeout_ms,
    )
