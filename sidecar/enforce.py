"""``POST /enforce-rebalance`` per group protocol: how the member makes librdkafka rejoin.

librdkafka has no KIP-568 call (librdkafka#3446): the member makes it rejoin through
``subscribe()``. What an enforce does, per protocol (measured, ``docs/kip848.md``):

* **classic, eager** (``range``, ``roundrobin``): subscribe again with an extra topic name
  that does not exist (a new one each time, replacing the last). librdkafka sees its
  subscription change: it revokes everything (the eager protocol, as Java's eager
  ``enforceRebalance()`` does), and rejoins **under the same member id**, without a
  LeaveGroup (``rd_kafka_cgrp_subscribe`` unsubscribes with "don't leave group" when a new
  subscription follows). Its JoinGroup carries new metadata, so the coordinator rebalances
  the whole group (a follower rejoining with unchanged metadata only gets its old
  assignment back). The member id is kept, so the ``range`` assignor, which orders members
  by member id, gives everyone the partitions it had (an unsubscribe() and subscribe()
  left and came back as a new member id, and could reshuffle every partition).
* **classic, cooperative-sticky**: the same subscription change; the sticky assignor moves
  nothing; one rebalance, no revocation. (A pattern that matches nothing only works once:
  librdkafka's metadata then never looks stale.)
* **KIP-848** (``group.protocol=consumer``): consumer-triggered rebalances do not exist;
  the broker's assignor decides alone. The member adds a pattern that matches nothing and
  removes it again a moment later: the broker bumps the group epoch and every member's
  epoch follows, with no callback and nothing moving (seen only through the generation;
  see ``_KIP848_RESTORE_SECONDS``). It answers "a new epoch", never "a new assignment".
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from sidecar.settings import Settings

# KIP-848 bumps the group epoch when the pattern goes away again, not when it is added.
_KIP848_RESTORE_SECONDS = 0.5
# Enforce topic names and patterns match no topic; librdkafka reports them as unavailable.
ENFORCE_PATTERN = "__rebalance_sidecar_enforce_"


def semantics(settings: Settings) -> str:
    """One line: what an enforce does under this member's protocol (logged at start)."""
    if settings.group_protocol == "consumer":
        return "KIP-848: a new member epoch for every member, no callback, nothing moves"
    if settings.cooperative:
        return "cooperative: one rebalance under the same member id, nothing revoked"
    return "eager: everything revoked, rejoined under the same member id (no LeaveGroup)"


def rejoin(consumer: object, settings: Settings, subscribe: Callable[..., None]) -> float:
    """Make librdkafka rejoin (see the module's docstring). Answers when (monotonic) the
    subscription must be restored with ``subscribe()``, or 0.

    A ``KafkaException`` from ``subscribe()`` means nothing changed (librdkafka refused the
    new subscription before acting on it): the caller is told Kafka refused the enforce.
    """
    name = f"{ENFORCE_PATTERN}{uuid.uuid4().hex}"
    if settings.group_protocol == "consumer":
        subscribe(extra=(f"^{name}$",))
        return time.monotonic() + _KIP848_RESTORE_SECONDS
    subscribe(extra=(name,))
    return 0.0
