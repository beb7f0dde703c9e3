"""The values settings are made of: a webhook declared at deploy time, and the checks of
text and addresses the settings share (kept apart so ``sidecar.settings`` stays one
readable list of settings)."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

# The longest duration a millisecond setting may name: the time and thread APIs these
# reach refuse absurd values (a timestamp out of range at shutdown), and none is sane.
DAY_MS = 86_400_000
MIB = 1024 * 1024

# Kafka's own rule for a topic name (``Topic.validate``): the broker refuses any other.
TOPIC_NAME = re.compile(r"(?!\.{1,2}$)[A-Za-z0-9._-]{1,249}")

EVENT_TYPES = (
    "kafka.partitions.assigned",
    "kafka.partitions.revoked",
    "kafka.partitions.lost",
    "kafka.rebalance.requested",
)


class WebhookSpec(BaseModel):
    """A webhook declared at deploy time (``SIDECAR_WEBHOOKS``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    events: tuple[str, ...] = EVENT_TYPES[:3]
    mode: Literal["blocking", "async"] = "blocking"
    secret: SecretStr  # required: the application must know it to verify signatures
    timeout_ms: int = Field(
        default=10_000,
        ge=100,
        le=300_000,
        description="One deadline for the whole POST (connect, TLS, send, answer).",
    )
    id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")

    @property
    def subscription_id(self) -> str:
        """Its subscription's id: the given one, else one derived from the URL (stable
        across restarts)."""
        return self.id or "cfg_" + hashlib.sha256(self.url.encode()).hexdigest()[:16]


def is_text(value: object) -> bool:
    """Every string in ``value`` encodes to UTF-8 (no lone surrogates) and holds no NUL
    (C strings end there: librdkafka would take a group or topic name cut short, and a
    path with one cannot be opened)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return "\x00" not in value
    if isinstance(value, Mapping):
        return all(is_text(k) and is_text(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(is_text(v) for v in value)
    return True


def is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def librdkafka_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value
