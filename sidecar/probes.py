"""The lifecycle of one sidecar process and the three Kubernetes probes derived from it.

What each probe means, and why (docs/probes.md says the same for operators):

* **liveness** (``/livez``, alias ``/healthz``): the process answers, and the member thread
  is alive (or waiting between two consumers after a fatal error) with a poll loop that
  ticked recently, or that waits in a commit inside a rebalance callback for as long as
  librdkafka's own timeouts allow. A Kafka outage never fails it: restarting the
  container cannot bring the broker back, it only makes the group rebalance once more.
  After a drain the member is out of the group on purpose and liveness holds, unless
  ``drained_restart_after_ms`` passes after the drain ended without a stop signal: then
  nothing is going to
  stop this process (in Kubernetes the app container's ``preStop`` drains the sidecar also
  when only the app container restarts), and a restart is the way back into the group.
* **startup** (``/startupz``): the journal is open and the API serves. Never depends on
  Kafka being up, so a broker that is down at deploy time does not get the pod killed in a
  loop; but fails while Kafka refuses the credentials (``sidecar.credentials``).
* **readiness** (``/readyz``): started, and joined the group once since start (or
  ``ready_without_group``); from then on it stays ready through rebalances and broker
  outages, because with native sidecars the pod's Ready condition includes it: a
  group-wide rebalance must not take every pod of the Service out at once. It fails only
  while stopping or after a drain. The group's state stays visible in ``/assignment`` and
  the metrics.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sidecar.credentials import REFUSALS
from sidecar.model import Assignment, MemberState
from sidecar.settings import Settings

# How long the poll loop may stay silent before liveness fails, beyond the revoke barrier
# (a callback legitimately holds the member thread that long): librdkafka's own blocking
# calls (close, committed offsets) stay well inside it.
_POLL_SILENCE_SECONDS = 30.0


class Lifecycle(enum.Enum):
    """Where the process is; moves forward only (``DRAINED`` may be skipped).

    ``DRAINING`` is not a step of its own: it is how a running sidecar shows while a drain
    call runs (``Sidecar.lifecycle``), so a drain withdrawn before it ran moves nothing back.
    """

    CREATED = "created"  # built, nothing opened yet
    STARTING = "starting"  # opening the journal and the listeners
    RUNNING = "running"  # serving; the member is joining or in the group
    DRAINING = "draining"  # running, a drain call under way: not ready
    DRAINED = "drained"  # left the group on request; still serving, outside the group
    STOPPING = "stopping"  # signal received: leaving, then closing
    STOPPED = "stopped"

    @property
    def stopping(self) -> bool:
        return self in (Lifecycle.STOPPING, Lifecycle.STOPPED)


@dataclass(frozen=True, slots=True)
class Probe:
    ok: bool
    reason: str

    @property
    def status(self) -> int:
        return 200 if self.ok else 503


class MemberPulse(Protocol):
    """What liveness reads from the member thread (``GroupMember``)."""

    @property
    def alive(self) -> bool: ...

    @property
    def kafka_wait_until(self) -> float | None: ...

    last_tick: float


class Probes:
    """The probes of one sidecar; cheap (no I/O), so every scrape may call them."""

    def __init__(
        self,
        settings: Settings,
        lifecycle: Callable[[], Lifecycle],
        snapshot: Callable[[], Assignment],
        member: Callable[[], MemberPulse | None],
        drained_at: Callable[[], float | None] = lambda: None,
    ) -> None:
        self._settings = settings
        self._lifecycle = lifecycle
        self._snapshot = snapshot
        self._member = member
        self._drained_at = drained_at  # monotonic, when the drain began
        self._joined_once = False

    @property
    def joined_once(self) -> bool:
        return self._joined_once

    def note(self, snapshot: Assignment) -> None:
        """Remember that the member joined (called for snapshots the loop sees)."""
        if snapshot.state is MemberState.STABLE:
            self._joined_once = True

    def liveness(self) -> Probe:
        phase = self._lifecycle()
        if phase.stopping:
            return Probe(True, f"{phase.value}: no restart wanted")
        if phase is Lifecycle.DRAINED and (stranded := self._drained_too_long()):
            return stranded
        member = self._member()
        if member is None:
            return Probe(True, phase.value)
        if member.alive:
            budget = _POLL_SILENCE_SECONDS + 1.5 * self._settings.revoke_timeout_ms / 1000
            now = time.monotonic()
            silent = now - member.last_tick
            if silent <= budget:
                return Probe(True, "poll loop alive")
            # A commit inside a rebalance callback waits for Kafka as long as librdkafka's
            # own timeouts allow, and nothing can cut it short there: a Kafka outage, not
            # a stuck sidecar. Past librdkafka's bound it is stuck.
            until = member.kafka_wait_until
            if until is not None and now <= until:
                return Probe(True, f"waiting for Kafka to answer a commit ({silent:.0f} s)")
            return Probe(False, f"poll loop silent for {silent:.0f} s (limit {budget:.0f} s)")
        if phase in (Lifecycle.DRAINING, Lifecycle.DRAINED):  # the thread ends as it leaves
            return Probe(True, "left the group on request")
        return Probe(False, "group member thread died")

    def _drained_too_long(self) -> Probe | None:
        """A failing probe once ``drained_restart_after_ms`` passed since the latest drain
        ended without a stop signal."""
        limit = self._settings.drained_restart_after_ms / 1000
        since = self._drained_at()
        if not limit or since is None:
            return None
        drained = time.monotonic() - since
        if drained <= limit:
            return None
        return Probe(
            False,
            f"drained {drained:.0f} s ago and never stopped (limit {limit:.0f} s): "
            "restart to rejoin the group",
        )

    def startup(self) -> Probe:
        phase = self._lifecycle()
        if phase in (Lifecycle.CREATED, Lifecycle.STARTING):
            return Probe(False, phase.value)
        if (refused := REFUSALS.reason) is not None:
            return Probe(False, refused)
        return Probe(True, f"journal open, API serving ({phase.value})")

    def readiness(self) -> Probe:
        phase = self._lifecycle()
        if phase is not Lifecycle.RUNNING:
            return Probe(False, "stopping" if phase.stopping else phase.value)
        snapshot = self._snapshot()
        self.note(snapshot)
        where = f"member {snapshot.state.value}, generation {snapshot.generation_id}"
        if not snapshot.connected:
            where += f", Kafka unreachable ({snapshot.error or 'no broker up'})"
        if self._joined_once:
            return Probe(True, f"ready; {where}")
        if self._settings.ready_without_group:
            return Probe(True, f"ready without a group (ready_without_group); {where}")
        return Probe(False, f"not joined the group yet; {where}")
