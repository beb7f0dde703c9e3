"""When the member creates a new consumer after a fatal error, and what it reports.

Most fatal errors are retried every ``FATAL_RETRY_SECONDS``: a new consumer rarely fares
better sooner. One is not: under KIP-848 a ``group.instance.id`` still held by a member
the broker believes alive fences the *new* member with the fatal
``UNRELEASED_INSTANCE_ID`` (the classic protocol fenced the old one). That is a pod
restarted faster than its old sidecar left, or one killed (``kill -9``, a node lost)
whose session the broker has not expired yet. The instance id is released when the old
member leaves (a graceful close sends the static leave, member epoch -2, and the broker
lets a new member take the instance id at once) or when its session expires. So the
member retries about every ``UNRELEASED_RETRY_SECONDS`` for as long as the old member can
still hold the instance id (the session timeout, plus a margin), which rejoins within a
second of its release; past that, the id is held by a member that is alive (two sidecars
configured with the same instance id): it says so in its status and retries at the
ordinary pace. Measured in ``docs/kip848.md``.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError

from sidecar.link import KafkaLink

FATAL_RETRY_SECONDS = 5.0
UNRELEASED_RETRY_SECONDS = 1.0
# Past the session timeout, the broker's own expiry check and our retry's own delay.
_MARGIN_SECONDS = 5.0


def unreleased_instance_id(error: KafkaError | None) -> bool:
    """Whether ``error`` is KIP-848's refusal of an instance id still held by another member."""
    if error is None:
        return False
    return (
        error.code() == KafkaError.UNRELEASED_INSTANCE_ID
        or "UNRELEASED_INSTANCE_ID" in error.str()
        or "instance ID is still used" in error.str()
    )


class FatalRetries:
    """The delay before the next consumer after a fatal error; one per member thread."""

    def __init__(self, session_s: float, instance_id: str | None) -> None:
        self._bound = session_s + _MARGIN_SECONDS
        self._instance_id = instance_id
        self._refused_since: float | None = None  # the first refusal of this streak
        self._refused_last = 0.0

    def after(self, error: KafkaError | None, now: float) -> tuple[float, str | None]:
        """How long to wait, and what to report (``None``: nothing beyond the error)."""
        if not unreleased_instance_id(error):
            self._refused_since = None
            return FATAL_RETRY_SECONDS, None
        if self._refused_since is None or now - self._refused_last > self._bound:
            self._refused_since = now  # a new streak: the last one ended in a join
        self._refused_last = now
        held = now - self._refused_since
        if held <= self._bound:
            return UNRELEASED_RETRY_SECONDS, None
        return FATAL_RETRY_SECONDS, (
            f"group.instance.id {self._instance_id!r} is still held by another member "
            f"{held:.0f} s after the first refusal, past the session timeout: is another "
            "sidecar configured with the same instance id? Retrying every "
            f"{FATAL_RETRY_SECONDS:.0f} s"
        )

    def next_consumer(self, link: KafkaLink, log: Any) -> float:
        """The consumer failed fatally (``link.fatal``): report it, answer the delay."""
        retry_s, held = self.after(link.fatal, time.monotonic())
        link.error = held or link.error
        log.error(
            "consumer failed fatally; creating a new one", error=link.error, retry_in_s=retry_s
        )
        return retry_s
