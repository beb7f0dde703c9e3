"""Probe semantics, state by state (docs/probes.md): readiness ignores the group's weather."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import pytest

from sidecar.model import Assignment, MemberState
from sidecar.probes import Lifecycle, Probe, Probes
from sidecar.settings import Settings

SETTINGS = Settings(
    bootstrap_servers="127.0.0.1:9", group_id="g", topics=("t",), revoke_timeout_ms=10_000
)
STABLE = Assignment(
    group_id="g",
    member_id="m",
    group_instance_id=None,
    generation_id=3,
    protocol="eager",
    state=MemberState.STABLE,
    partitions=(),
    sequence=1,
    connected=True,
)


@dataclass
class Pulse:
    """The member thread's heartbeat as liveness reads it (a stuck thread on demand)."""

    alive: bool = True
    last_tick: float = 0.0
    kafka_wait_until: float | None = None


class World:
    def __init__(self) -> None:
        self.lifecycle = Lifecycle.RUNNING
        self.snapshot = replace(STABLE, state=MemberState.JOINING, generation_id=-1)
        self.pulse = Pulse(last_tick=time.monotonic())
        self.probes = Probes(
            SETTINGS, lambda: self.lifecycle, lambda: self.snapshot, lambda: self.pulse
        )


def test_readiness_waits_for_the_first_join_then_ignores_rebalances_and_outages() -> None:
    world = World()
    assert not world.probes.readiness().ok
    world.snapshot = STABLE
    assert world.probes.readiness().ok
    for weather in (
        replace(STABLE, state=MemberState.REBALANCING),
        replace(STABLE, state=MemberState.LOST, partitions=()),
        replace(STABLE, state=MemberState.JOINING, connected=False, error="all brokers down"),
    ):
        world.snapshot = weather
        ready = world.probes.readiness()
        assert ready.ok, weather
        assert weather.state.value in ready.reason
    world.lifecycle = Lifecycle.DRAINED
    assert world.probes.readiness().reason == "drained"
    world.lifecycle = Lifecycle.STOPPING
    assert (world.probes.readiness().ok, world.probes.readiness().reason) == (False, "stopping")


@pytest.mark.parametrize(
    ("lifecycle", "startup"),
    [
        (Lifecycle.CREATED, False),
        (Lifecycle.STARTING, False),
        (Lifecycle.RUNNING, True),
        (Lifecycle.DRAINED, True),
        (Lifecycle.STOPPING, True),
    ],
)
def test_startup_is_the_lifecycle_only(lifecycle: Lifecycle, startup: bool) -> None:
    world = World()
    world.lifecycle = lifecycle
    world.snapshot = replace(STABLE, connected=False)  # Kafka plays no part
    assert world.probes.startup().ok is startup


def test_liveness_fails_for_a_stuck_poll_loop_or_a_dead_thread_only() -> None:
    world = World()
    assert world.probes.liveness().ok
    # 30 s + 1.5 x the revoke timeout (10 s): a barrier may hold the thread 10 s.
    world.pulse.last_tick = time.monotonic() - 40
    assert world.probes.liveness().ok
    world.pulse.last_tick = time.monotonic() - 50
    stuck = world.probes.liveness()
    assert not stuck.ok and "silent" in stuck.reason
    world.pulse = Pulse(alive=False)
    assert world.probes.liveness().reason == "group member thread died"
    world.lifecycle = Lifecycle.DRAINED  # it left on request: no restart wanted
    assert world.probes.liveness().ok
    world.lifecycle = Lifecycle.STOPPING
    assert world.probes.liveness().ok


def test_liveness_holds_while_a_commit_waits_for_kafka_within_librdkafkas_bound() -> None:
    """A commit inside a rebalance callback (offsets handed back on ``revoked``) waits as
    long as librdkafka's own timeouts allow; the poll loop is silent meanwhile. That is a
    Kafka outage, and liveness never fails for one; past librdkafka's bound it does."""
    world = World()
    bound = SETTINGS.commit_wait_bound_seconds
    assert bound == 45 + 3 * 60  # librdkafka's defaults: session 45 s, socket 60 s
    world.pulse.last_tick = time.monotonic() - 100  # past the 45 s budget
    world.pulse.kafka_wait_until = time.monotonic() + 60
    waiting = world.probes.liveness()
    assert waiting.ok and "waiting for Kafka" in waiting.reason
    world.pulse.kafka_wait_until = time.monotonic() - 1  # librdkafka should have returned
    stuck = world.probes.liveness()
    assert not stuck.ok and "silent for 100 s" in stuck.reason
    world.pulse.kafka_wait_until = None
    assert not world.probes.liveness().ok
    tuned = SETTINGS.model_copy(
        update={"kafka": {"session.timeout.ms": "10000", "socket.timeout.ms": "5000"}}
    )
    assert tuned.commit_wait_bound_seconds == 10 + 3 * 5
    # Under KIP-848 librdkafka still waits by its own session.timeout.ms (45 s, not
    # settable there), not by the broker's session timeout the sidecar is told.
    kip848 = SETTINGS.model_copy(
        update={"group_protocol": "consumer", "group_session_timeout_ms": 10_000}
    )
    assert kip848.commit_wait_bound_seconds == 45 + 3 * 60


def test_ready_without_group_is_ready_from_the_start() -> None:
    world = World()
    world.probes = Probes(
        SETTINGS.model_copy(update={"ready_without_group": True}),
        lambda: world.lifecycle,
        lambda: world.snapshot,
        lambda: world.pulse,
    )
    assert world.probes.readiness().ok


def test_a_drain_left_unstopped_past_its_limit_fails_liveness() -> None:
    settings = SETTINGS.model_copy(
        update={"drain_timeout_ms": 5_000, "drained_restart_after_ms": 60_000}
    )
    world = World()
    drained_at: list[float | None] = [None]
    probes = Probes(
        settings,
        lambda: world.lifecycle,
        lambda: world.snapshot,
        lambda: world.pulse,
        lambda: drained_at[0],
    )
    world.lifecycle = Lifecycle.DRAINED
    world.pulse = Pulse(alive=False)  # the member left the group
    drained_at[0] = time.monotonic() - 59
    assert probes.liveness() == Probe(True, "left the group on request")
    drained_at[0] = time.monotonic() - 61
    failed = probes.liveness()
    assert not failed.ok and "restart to rejoin the group" in failed.reason
    world.lifecycle = Lifecycle.STOPPING  # the stop came after all: no restart
    assert probes.liveness().ok
    off = Probes(
        SETTINGS,
        lambda: Lifecycle.DRAINED,
        lambda: world.snapshot,
        lambda: world.pulse,
        lambda: time.monotonic() - 86_400,
    )
    assert off.liveness().ok  # 0, the default: drained for good
