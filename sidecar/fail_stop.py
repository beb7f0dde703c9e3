"""The one way the group member fails stop.

A journal that cannot append is a fail stop: the member could no longer tell its
application what it owns, and running on silently would let it act on partitions it
lost. It can start in a rebalance callback (the listener could not journal), or in a
command (an enforce that could not journal its event): the command's caller, and every
other command of its batch, is answered first (``MemberGone``), then the member stops.

Every such start goes through one ``FailStop``: it happens once, whoever asks first, and
runs the steps registered on it in order (the listener's: say why, own nothing, publish;
the member's: end the loop, close the handoff, tell waiting commits), then the process
stop itself (``os._exit`` in production, a recorder in tests). Member thread only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import structlog

from sidecar.errors import JOURNAL_FAILED_EXIT

# A fail stop leaves the loop this long to send the answers already given (a command's
# 409) before the process exits: best effort (the snapshot says "stopped" meanwhile).
_EXIT_GRACE_SECONDS = 0.2


def exit_process(reason: str) -> None:
    """The production stop: exit the process as if killed (``JOURNAL_FAILED_EXIT``)."""
    structlog.get_logger("sidecar.member").critical(
        "failing stop: exiting the process", reason=reason, code=JOURNAL_FAILED_EXIT
    )
    time.sleep(_EXIT_GRACE_SECONDS)
    os._exit(JOURNAL_FAILED_EXIT)


class FailStop:
    def __init__(self, stop: Callable[[str], None]) -> None:
        self._stop = stop
        self._steps: list[Callable[[str], None]] = []
        self._reason: str | None = None
        self._after_batch: str | None = None

    def on_stop(self, step: Callable[[str], None]) -> None:
        """Run ``step(reason)`` when the member fails stop (in registration order)."""
        self._steps.append(step)

    @property
    def reason(self) -> str | None:
        """Why the member stops (or will once the commands of a batch are answered)."""
        return self._reason or self._after_batch

    @property
    def stopped(self) -> bool:
        return self._reason is not None

    def now(self, reason: str) -> None:
        """Fail stop at once (a callback); a second call changes nothing."""
        if self._reason is not None:
            return
        self._reason = reason
        for step in self._steps:
            step(reason)
        self._stop(reason)

    def after_batch(self, reason: str) -> None:
        """A command called for it: the rest of its batch is answered first."""
        if self._after_batch is None:
            self._after_batch = reason

    def batch_done(self) -> None:
        if self._after_batch is not None:
            self.now(self._after_batch)
