"""The seeded fault schedule: the same seed always gives the same plan.

The planner simulates what its own steps do (which members are down, whether the
broker is busy, which subscribers are down or slow), so every fault it plans is
possible when it fires, and every fault that takes something away is followed by a
step that gives it back. Only the timing of the real system varies between runs.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field


class Kind(enum.StrEnum):
    KILL = "kill -9"
    TERM = "SIGTERM"
    START = "restart"
    BROKER_PAUSE = "broker pause"
    BROKER_RESUME = "broker resume"
    BROKER_RESTART = "broker restart"
    SUBSCRIBER_DOWN = "subscriber down"
    SUBSCRIBER_UP = "subscriber up"
    SUBSCRIBER_SLOW = "subscriber slow"
    SUBSCRIBER_NORMAL = "subscriber normal"
    ENFORCE = "enforce-rebalance"
    LINK_CUT = "link cut"
    LINK_SLOW = "link slow"
    SLOW_ASSIGNMENT = "slow assignment"
    LINK_HEAL = "link healed"

    @property
    def fault(self) -> bool:
        return self in FAULTS


FAULTS = (
    Kind.KILL,
    Kind.TERM,
    Kind.BROKER_PAUSE,
    Kind.BROKER_RESTART,
    Kind.SUBSCRIBER_DOWN,
    Kind.SUBSCRIBER_SLOW,
    Kind.ENFORCE,
    Kind.LINK_CUT,
    Kind.LINK_SLOW,
)
LINK_KINDS = (Kind.LINK_CUT, Kind.LINK_SLOW, Kind.LINK_HEAL)
WEIGHTS = {
    Kind.KILL: 3.0,
    Kind.TERM: 3.0,
    Kind.BROKER_PAUSE: 1.5,
    Kind.BROKER_RESTART: 0.5,
    Kind.SUBSCRIBER_DOWN: 2.0,
    Kind.SUBSCRIBER_SLOW: 2.0,
    Kind.ENFORCE: 3.0,
    Kind.LINK_CUT: 2.0,
    Kind.LINK_SLOW: 1.5,
}
SUBSCRIBERS = ("app", "audit")  # per member: the blocking application, an async observer
BROKER = "broker"
# Rough time a broker restart takes on a busy machine; no broker fault is planned inside.
BROKER_RESTART_SECONDS = 30.0


@dataclass(frozen=True, order=True)
class Step:
    at: float  # seconds after the chaos phase began
    kind: Kind = field(compare=False)
    target: str = field(compare=False)  # "m0", "m0/app", "broker"
    value: float = field(default=0.0, compare=False)  # pause s, subscriber delay s, latency ms

    def describe(self) -> str:
        unit = "ms" if self.kind is Kind.LINK_SLOW else "s"
        detail = f" ({self.value:.1f} {unit})" if self.value else ""
        return f"t+{self.at:6.1f}s {self.kind.value:<18} {self.target}{detail}"


@dataclass
class _World:
    members: int
    member_back: dict[int, float] = field(default_factory=dict)  # down until
    broker_busy_until: float = 0.0
    subscriber_back: dict[str, float] = field(default_factory=dict)  # down or slow until
    link_back: dict[int, float] = field(default_factory=dict)  # cut or slow until

    def up(self, t: float) -> list[int]:
        return [m for m in range(self.members) if self.member_back.get(m, 0.0) <= t]

    def free_links(self, t: float) -> list[int]:
        """Members that are up and whose link to Kafka is whole."""
        return [m for m in self.up(t) if self.link_back.get(m, 0.0) <= t]

    def free_subscribers(self, t: float) -> list[str]:
        return [
            f"m{m}/{s}"
            for m in range(self.members)
            for s in SUBSCRIBERS
            if self.subscriber_back.get(f"m{m}/{s}", 0.0) <= t
        ]


def plan(
    seed: int, members: int, faults: int, seconds: float, *, stops_in_pauses: bool = False
) -> list[Step]:
    """``faults`` faults spread over ``seconds``, each undone by a later step.

    The first faults are a shuffled round of every kind, so even a short run exercises
    all of them; the rest are drawn by weight. ``stops_in_pauses``: half the broker pauses
    also stop a member (SIGTERM) while the broker is paused, and start it again after the
    pause (a pod restarted while the coordinator is silent: its leave never arrives, and
    a KIP-848 static member's instance id stays held until its session expires). Off,
    the plan of a seed is the one it always was.
    """
    if members < 2:
        raise ValueError("the chaos run needs at least two members")
    rng = random.Random(seed)
    world = _World(members)
    steps: list[Step] = []
    first_round = list(FAULTS)
    rng.shuffle(first_round)
    gap = seconds / max(faults, 1)
    for index in range(faults):
        t = round(index * gap + rng.uniform(0.0, gap * 0.6), 2)
        kind = _choose(rng, world, t, first_round)
        steps.extend(_fault(rng, world, t, kind))
        if stops_in_pauses and kind is Kind.BROKER_PAUSE:
            steps.extend(_stop_in_pause(rng, world, steps[-2], steps[-1]))
    return sorted(steps)


def _stop_in_pause(rng: random.Random, world: _World, pause: Step, resume: Step) -> list[Step]:
    """Maybe stop a member while the broker is paused, and start it after the pause."""
    stop = round(pause.at + 0.3 * (resume.at - pause.at), 2)
    if len(world.up(stop)) < 2 or rng.random() < 0.5:
        return []
    member = rng.choice(world.up(stop))
    back = round(resume.at + rng.uniform(0.5, 3.0), 2)
    world.member_back[member] = back + 3.0
    return [Step(stop, Kind.TERM, f"m{member}"), Step(back, Kind.START, f"m{member}")]


def _feasible(world: _World, t: float, kind: Kind) -> bool:
    if kind in (Kind.KILL, Kind.TERM):
        return len(world.up(t)) >= 2  # keep somebody in the group
    if kind in (Kind.BROKER_PAUSE, Kind.BROKER_RESTART):
        return world.broker_busy_until <= t
    if kind in (Kind.SUBSCRIBER_DOWN, Kind.SUBSCRIBER_SLOW):
        return bool(world.free_subscribers(t))
    if kind is Kind.ENFORCE:
        return bool(world.up(t))
    if kind in (Kind.LINK_CUT, Kind.LINK_SLOW):
        return bool(world.free_links(t))
    return False


def _choose(rng: random.Random, world: _World, t: float, first_round: list[Kind]) -> Kind:
    """The first feasible kind not yet used in the first round; then by weight."""
    for kind in first_round:
        if _feasible(world, t, kind):
            first_round.remove(kind)
            return kind
    options = [k for k in FAULTS if _feasible(world, t, k)]
    return rng.choices(options, weights=[WEIGHTS[k] for k in options])[0]


def _fault(rng: random.Random, world: _World, t: float, kind: Kind) -> list[Step]:
    if kind in (Kind.KILL, Kind.TERM):
        member = rng.choice(world.up(t))
        # Short outages let a static member come back inside its session timeout.
        down_for = rng.choice((rng.uniform(0.5, 4.0), rng.uniform(4.0, 15.0)))
        back = round(t + down_for, 2)
        world.member_back[member] = back + 3.0  # a start takes a moment
        return [Step(t, kind, f"m{member}"), Step(back, Kind.START, f"m{member}")]
    if kind is Kind.BROKER_PAUSE:
        pause = round(rng.uniform(1.0, 10.0), 2)
        world.broker_busy_until = t + pause + 5.0
        return [
            Step(t, kind, BROKER, pause),
            Step(round(t + pause, 2), Kind.BROKER_RESUME, BROKER),
        ]
    if kind is Kind.BROKER_RESTART:
        world.broker_busy_until = t + BROKER_RESTART_SECONDS + 10.0
        return [Step(t, kind, BROKER)]
    if kind is Kind.SUBSCRIBER_DOWN:
        target = rng.choice(world.free_subscribers(t))
        back = round(t + rng.uniform(1.0, 15.0), 2)
        world.subscriber_back[target] = back + 0.5
        return [Step(t, kind, target), Step(back, Kind.SUBSCRIBER_UP, target)]
    if kind is Kind.SUBSCRIBER_SLOW:
        target = rng.choice(world.free_subscribers(t))
        delay = round(rng.uniform(0.2, 4.5), 2)
        back = round(t + rng.uniform(3.0, 15.0), 2)
        world.subscriber_back[target] = back + 0.5
        return [Step(t, kind, target, delay), Step(back, Kind.SUBSCRIBER_NORMAL, target)]
    if kind is Kind.LINK_CUT:
        # Cut off from the coordinator (the broker stays up for everybody else): shorter
        # than the 6 s session timeout, the member rides it out; longer, it is fenced.
        member = rng.choice(world.free_links(t))
        back = round(t + rng.choice((rng.uniform(1.0, 5.0), rng.uniform(5.0, 20.0))), 2)
        world.link_back[member] = back + 1.0
        return [Step(t, kind, f"m{member}"), Step(back, Kind.LINK_HEAL, f"m{member}")]
    if kind is Kind.LINK_SLOW:
        # A slow coordinator during an assignment: every answer from Kafka to this member
        # comes late, and a rebalance is asked for while it does.
        member = rng.choice(world.free_links(t))
        latency_ms = round(rng.uniform(300.0, 3000.0))
        back = round(t + rng.uniform(4.0, 15.0), 2)
        world.link_back[member] = back + 1.0
        return [
            Step(t, kind, f"m{member}", latency_ms),
            Step(round(t + 1.0, 2), Kind.SLOW_ASSIGNMENT, f"m{member}"),
            Step(back, Kind.LINK_HEAL, f"m{member}"),
        ]
    member = rng.choice(world.up(t))
    return [Step(t, Kind.ENFORCE, f"m{member}")]
