"""One consumer group's life, simulated: the events its sidecars would emit.

A group has a topic, a protocol (eager with a range assignor, or cooperative with a
sticky one), static or dynamic members, and incidents: rolling deploys (static
members mostly rejoin without a rebalance), crashes (no event from the dead process;
the group rebalances after the session timeout), lost members, enforced rebalances,
scale-outs and scale-ins. :meth:`GroupLife.run` yields ``(time_us, json_line)`` in
time order, forever; :mod:`.generator` merges many groups and cuts the stream.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

EPOCH_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z
_SECOND = 1_000_000

_TEAMS = ("orders", "payments", "search", "billing", "audit", "ledger", "fraud", "mail")
_SERVICES = ("ingest", "enrich", "index", "notify", "archive", "score", "sync", "export")
_PARTITION_CHOICES = (6, 12, 12, 24, 24, 32, 48)


@dataclass(frozen=True)
class FleetSpec:
    """What fleet to simulate. ``events`` bounds the output; groups run until then."""

    groups: int = 50
    max_members: int = 8
    seed: int = 0
    events: int = 100_000
    cooperative_share: float = 0.5
    static_share: float = 0.5
    mean_incident_gap_s: float = 2700.0
    duplicate_rate: float = 0.005
    reorder_window: int = 32
    start_us: int = EPOCH_US


_time_prefix_cache: dict[int, str] = {}


def format_time(us: int) -> str:
    """RFC 3339 UTC with microseconds, e.g. ``2024-01-01T00:00:00.000250Z``."""
    seconds, micros = divmod(us, _SECOND)
    prefix = _time_prefix_cache.get(seconds)
    if prefix is None:
        if len(_time_prefix_cache) > 4096:
            _time_prefix_cache.clear()
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _time_prefix_cache[seconds] = prefix
    return f"{prefix}.{micros:06d}Z"


@dataclass
class _Member:
    identity: str
    member_id: str
    static: bool
    owned: set[int] = field(default_factory=set)


class GroupLife:
    """One consumer group's life; :meth:`run` yields ``(time_us, json_line)`` in order."""

    def __init__(self, index: int, spec: FleetSpec) -> None:
        self.rng = random.Random(f"{spec.seed}:{index}")
        rng = self.rng
        self.spec = spec
        self.name = f"{rng.choice(_TEAMS)}-{rng.choice(_SERVICES)}-{index}"
        self.topic = f"{self.name}-events"
        self.partitions = rng.choice(_PARTITION_CHOICES)
        self.protocol = "cooperative" if rng.random() < spec.cooperative_share else "eager"
        self.static = rng.random() < spec.static_share
        self.generation = 0
        self.members: dict[str, _Member] = {}
        self.sequences: dict[str, int] = {}
        self.offsets = [rng.randrange(1000) for _ in range(self.partitions)]
        self.next_identity = 0
        self.buffer: list[tuple[int, str]] = []
        self.size = rng.randint(2, max(2, spec.max_members))

    # encoding

    def _uid(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def _emit(
        self, t: int, member: _Member, type: str, parts: Iterable[int], reason: str | None
    ) -> None:
        source = f"kafka://{self.name}/{member.identity}"
        sequence = self.sequences.get(source, 0) + 1
        self.sequences[source] = sequence
        topic = self.topic
        if type == "kafka.partitions.assigned":
            progress = (t - self.spec.start_us) // (_SECOND // 10)  # ~10 records/s
            listed = ",".join(
                f'{{"topic":"{topic}","partition":{p},"offset":{self.offsets[p] + progress}}}'
                for p in sorted(parts)
            )
        else:
            listed = ",".join(f'{{"topic":"{topic}","partition":{p}}}' for p in sorted(parts))
        owned = ",".join(f'{{"topic":"{topic}","partition":{p}}}' for p in sorted(member.owned))
        instance = f'"{member.identity}"' if member.static else "null"
        line = (
            f'{{"specversion":"1.0","id":"{self._uid()}","source":"{source}",'
            f'"type":"{type}","time":"{format_time(t)}","sequence":"{sequence}",'
            f'"datacontenttype":"application/json","data":{{"group_id":"{self.name}",'
            f'"member_id":"{member.member_id}","group_instance_id":{instance},'
            f'"generation_id":{self.generation},"protocol":"{self.protocol}",'
            f'"partitions":[{listed}],"assignment":[{owned}],'
            f'"reason":{json.dumps(reason)}}}}}'
        )
        self.buffer.append((t, line))

    def _flush(self) -> list[tuple[int, str]]:
        out = sorted(self.buffer, key=lambda item: item[0])
        self.buffer = []
        return out

    def _jitter(self, low_s: float, high_s: float) -> int:
        return int(self.rng.uniform(low_s, high_s) * _SECOND)

    # membership

    def _new_member(self, identity: str | None = None) -> _Member:
        member_id = f"rdkafka-{self._uid()[:12]}"
        if identity is None:
            if self.static:
                identity = f"{self.name}-{self.next_identity}"
                self.next_identity += 1
            else:
                identity = member_id
        return _Member(identity=identity, member_id=member_id, static=self.static)

    def _restart(self, member: _Member) -> _Member:
        # A static pod comes back under its name; a dynamic one is a new member.
        return self._new_member(member.identity if member.static else None)

    # assignors

    def _range(self, names: list[str]) -> dict[str, set[int]]:
        n = len(names)
        per, extra = divmod(self.partitions, n)
        result: dict[str, set[int]] = {}
        start = 0
        for i, name in enumerate(names):
            count = per + (1 if i < extra else 0)
            result[name] = set(range(start, start + count))
            start += count
        return result

    def _sticky(self, names: list[str]) -> dict[str, set[int]]:
        n = len(names)
        per, extra = divmod(self.partitions, n)
        by_load = sorted(names, key=lambda m: (-len(self.members[m].owned), m))
        quota = {name: per + (1 if i < extra else 0) for i, name in enumerate(by_load)}
        result: dict[str, set[int]] = {}
        taken: set[int] = set()
        for name in names:
            keep = sorted(self.members[name].owned)[: quota[name]]
            result[name] = set(keep)
            taken.update(keep)
        free = [p for p in range(self.partitions) if p not in taken]
        for name in names:
            while len(result[name]) < quota[name]:
                result[name].add(free.pop(0))
        return result

    # rebalances

    def _rebalance(self, t: int, reason: str) -> int:
        """Run a rebalance of the current members starting at ``t``; returns its end."""
        if not self.members:
            return t
        names = sorted(self.members)
        if self.protocol == "eager":
            return self._eager(t, names, reason)
        return self._cooperative(t, names, reason)

    def _eager(self, t: int, names: list[str], reason: str) -> int:
        joined = t
        for name in names:
            member = self.members[name]
            if member.owned:
                at = t + self._jitter(0.01, 3.0)
                released = set(member.owned)
                member.owned.clear()
                self._emit(at, member, "kafka.partitions.revoked", released, reason)
                joined = max(joined, at)
        self.generation += 1
        synced = joined + self._jitter(0.05, 0.5)
        target = self._range(names)
        end = synced
        for name in names:
            member = self.members[name]
            member.owned = target[name]
            at = synced + self._jitter(0.005, 0.2)
            self._emit(at, member, "kafka.partitions.assigned", target[name], reason)
            end = max(end, at)
        return end

    def _cooperative(self, t: int, names: list[str], reason: str) -> int:
        target = self._sticky(names)
        owned_now = set().union(*(self.members[n].owned for n in names))
        self.generation += 1
        synced = t + self._jitter(0.05, 3.0)
        end = synced
        revoking = False
        for name in names:
            member = self.members[name]
            give_up = member.owned - target[name]
            at = synced + self._jitter(0.005, 0.2)
            if give_up:
                revoking = True
                member.owned -= give_up
                self._emit(at, member, "kafka.partitions.revoked", give_up, reason)
                at += self._jitter(0.001, 0.05)
            gained = (target[name] - member.owned) - owned_now
            member.owned |= gained
            self._emit(at, member, "kafka.partitions.assigned", gained, reason)
            end = max(end, at)
        if not revoking:
            return end
        self.generation += 1
        synced = end + self._jitter(0.05, 0.5)
        for name in names:
            member = self.members[name]
            gained = target[name] - member.owned
            member.owned |= gained
            at = synced + self._jitter(0.005, 0.2)
            self._emit(at, member, "kafka.partitions.assigned", gained, reason)
            end = max(end, at)
        return end

    # incidents

    def _join(self, t: int, member: _Member, reason: str) -> int:
        self.members[member.identity] = member
        return self._rebalance(t, reason)

    def _leave(self, t: int, member: _Member, reason: str) -> int:
        released = set(member.owned)
        member.owned.clear()
        self._emit(t, member, "kafka.partitions.revoked", released, reason)
        del self.members[member.identity]
        return self._rebalance(t + self._jitter(0.01, 0.3), reason)

    def _deploy(self, t: int) -> int:
        for name in sorted(self.members):
            member = self.members[name]
            if member.static and self.rng.random() < 0.8:
                # Back within the session timeout: same generation, same partitions.
                released = set(member.owned)
                member.owned.clear()
                self._emit(t, member, "kafka.partitions.revoked", released, "deploy")
                fresh = self._restart(member)
                fresh.owned = released
                self.members[name] = fresh
                t += self._jitter(5, 20)
                self._emit(t, fresh, "kafka.partitions.assigned", released, "deploy")
            else:
                t = self._leave(t, member, "deploy")
                t = self._join(t + self._jitter(10, 30), self._restart(member), "deploy")
            t += self._jitter(20, 60)
        return t

    def _crash(self, t: int) -> int:
        victim = self.members.pop(self.rng.choice(sorted(self.members)))
        # The dead process says nothing; its partitions move after the session timeout.
        t = self._rebalance(t + self._jitter(10, 45), "session timeout")
        return self._join(t + self._jitter(30, 120), self._restart(victim), "member restarted")

    def _lost(self, t: int) -> int:
        victim = self.members.pop(self.rng.choice(sorted(self.members)))
        released = set(victim.owned)
        victim.owned.clear()
        self._emit(t, victim, "kafka.partitions.lost", released, "max poll interval exceeded")
        t = self._rebalance(t + self._jitter(0.1, 2), "member left: poll timeout")
        return self._join(t + self._jitter(5, 30), self._restart(victim), "member rejoined")

    def _enforce(self, t: int) -> int:
        member = self.members[self.rng.choice(sorted(self.members))]
        self._emit(t, member, "kafka.rebalance.requested", (), "operator request")
        return self._rebalance(t + self._jitter(0.05, 0.5), "enforced: operator request")

    def _scale(self, t: int) -> int:
        if len(self.members) > 2 and self.rng.random() < 0.5:
            victim = self.members[self.rng.choice(sorted(self.members))]
            return self._leave(t, victim, "scale in")
        if len(self.members) < self.partitions:
            return self._join(t, self._new_member(), "scale out")
        return t

    def run(self) -> Iterator[tuple[int, str]]:
        t = self.spec.start_us + self._jitter(0, 600)
        for _ in range(self.size):
            self.members_add(self._new_member())
        t = self._rebalance(t, "group formed")
        yield from self._flush()
        incidents = (self._deploy, self._crash, self._lost, self._enforce, self._scale)
        weights = (0.25, 0.2, 0.15, 0.15, 0.25)
        while True:
            t += int(self.rng.expovariate(1.0 / self.spec.mean_incident_gap_s) * _SECOND) + 1
            if not self.members:
                t = self._join(t, self._new_member(), "scale out")
            else:
                incident = self.rng.choices(incidents, weights)[0]
                t = incident(t)
            yield from self._flush()

    def members_add(self, member: _Member) -> None:
        self.members[member.identity] = member
