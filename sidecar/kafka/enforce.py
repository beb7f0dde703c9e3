"""``POST /enforce-rebalance`` per group protocol: how the member makes librdkafka rejoin.

librdkafka has no KIP-568 call (librdkafka#3446): the member makes it rejoin through
``subscribe()``. What an enforce does, per protocol (measured, ``docs/kip848.md``):

* **classic, eager** (``range``, ``roundrobin``): ``unsubscribe()`` and ``subscribe()``
  again: it revokes everything (as Java's eager ``enforceRebalance()`` does), leaves (a
  LeaveGroup, even for a static member) and rejoins, as a new member id (a static member
  under its instance id); one rebalance for the group. It cannot keep its member id:
  librdkafka's JoinGroup metadata lists only the subscribed topics that exist, so a
  subscription change to a missing topic rejoins under the same member id with unchanged
  metadata, and the coordinator hands a follower its old assignment back, in the same
  generation, with no rebalance (measured, ``docs/kip848.md``; only the group leader's
  rejoin rebalances the group, and the member cannot tell whether it leads). With a new
  member id, the ``range`` assignor (members ordered by member id) may move partitions;
  static members are ordered by instance id and keep theirs.
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

from confluent_kafka import Consumer, KafkaException

from sidecar.settings import Settings

# KIP-848 bumps the group epoch when the pattern goes away again, not when it is added.
_KIP848_RESTORE_SECONDS = 0.5
# Enforce topic names and patterns match no topic; librdkafka reports them as unavailable.
ENFORCE_PATTERN = "__rebalance_sidecar_enforce_"


def rejoin(consumer: Consumer, settings: Settings, subscribe: Callable[..., None]) -> float:
    """Make librdkafka rejoin (see the module's docstring). Answers when (monotonic) the
    subscription must be restored with ``subscribe()``, or 0.

    A ``KafkaException`` from the first call means nothing changed: the caller is told Kafka
    refused the enforce.
    """
    if not settings.cooperative:
        consumer.unsubscribe()
        try:
            subscribe()
        except KafkaException:
            return time.monotonic()  # unsubscribed (the rejoin is under way): resubscribe
        return 0.0
    name = f"{ENFORCE_PATTERN}{uuid.uuid4().hex}"
    if settings.group_protocol == "consumer":
        subscribe(extra=(f"^{name}$",))
        return time.monotonic() + _KIP848_RESTORE_SECONDS
    subscribe(extra=(name,))
    return 0.0
