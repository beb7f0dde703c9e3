"""The membership core: what the member knows about its place in the group, without Kafka.

``Membership`` is plain synchronous bookkeeping. ``GroupMember`` (the thread that owns the
``Consumer``) feeds it what librdkafka said — a callback's partitions, the identity read
from ``consumer_group_metadata()``, a statistics sample — and gets back event drafts to
journal and the state to publish. Nothing here calls the ``Consumer``, the journal, the
metrics or the clock (times are passed in), so every rule has a unit test that runs in
milliseconds.

The rules it keeps:

* the owned set: eager replaces it on every assignment, the cooperative protocols (and
  KIP-848) add and remove deltas; revoked and lost partitions leave it before the event
  is drafted, so the event's ``assignment`` is what remains;
* partitions being revoked may still be committed until the barrier is over (the member
  still owns them inside the callback; an application commits from its revoke handler);
  lost ones may not (they are already someone else's);
* a rebalance is counted once per generation, timed from its first sign (a revoke, a
  statistics sample that leaves ``steady``, or an enforce);
* the reason (KIP-800): why *this* member left (drain, stop, fatal error) wins over an
  enforce it asked for; an enforce reason lasts until its rebalance completes or the
  coalescing window passes; a leave reason lasts for one consumer session only;
* the identity on events: librdkafka has already forgotten the member id when it calls
  ``on_lost``, and KIP-848's ``close()`` revokes at epoch 0: events carry the last known
  member id and generation instead.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from sidecar.commands import NotInGroup, NotOwned, StaleGeneration
from sidecar.model import (
    EventDraft,
    EventType,
    MemberState,
    PartitionOffset,
    Protocol,
    TopicPartition,
)

# An enforce whose rebalance never completed stops coalescing new requests after this.
ENFORCE_COALESCE_SECONDS = 60.0
# KIP-848: beyond the revoke timeout, how long a member may hold a member epoch with no
# assignment callback before it counts as joined with nothing assigned. librdkafka calls
# none for an empty assignment, and a joining member whose partitions other members still
# release gets an empty one too, until they have (their revoke barriers, then a heartbeat:
# 5 s by default under KIP-848).
EMPTY_JOIN_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class GroupIdentity:
    """What never changes for the life of the process."""

    group_id: str
    group_instance_id: str | None
    protocol: Protocol  # eager or cooperative (KIP-848 is cooperative)
    kip848: bool = False

    @property
    def cooperative(self) -> bool:
        return self.protocol == "cooperative"


@dataclass(frozen=True)
class RebalanceCompleted:
    """A generation was counted; ``duration_s`` when its start was seen."""

    generation_id: int
    duration_s: float | None


class EnforceOutcome(enum.Enum):
    STARTED = "started"
    COALESCED = "coalesced"  # KIP-568: a rebalance is already under way; joined it


class Membership:
    def __init__(self, identity: GroupIdentity) -> None:
        self.identity = identity
        self.owned: dict[TopicPartition, None] = {}
        self.generation = -1
        self.member_id: str | None = None
        self.state = MemberState.STARTING
        # Revoked partitions still ours while their barrier is open (commits allowed).
        self.revoking: frozenset[TopicPartition] = frozenset()
        self._known_member_id: str | None = None
        self._known_generation = -1
        self._rebalance_started: float | None = None
        self._counted_generation: int | None = None
        self._enforce_reason: str | None = None
        self._enforced_at = 0.0
        self._before_enforce: tuple[str | None, float, float | None] = (None, 0.0, None)
        self._leave_reason: str | None = None
        self.assigned_at = 0.0  # monotonic time of the last assignment
        # The member id the owned partitions were granted to (classic protocol).
        self._owner_id: str | None = None
        self._rebalancing_seen_in_stats = False
        self._epoch_without_callback_since: float | None = None
        self._epoch_without_callback: int | None = None
        self._lost_at_generation: int | None = None

    # -- sessions ----------------------------------------------------------------------

    def session_started(self) -> None:
        """A new consumer: it joins afresh, for no reason left over from the last one."""
        self.state = MemberState.JOINING
        self._epoch_without_callback_since = self._epoch_without_callback = None
        self._leave_reason = None
        self.revoking = frozenset()
        self._owner_id = None

    def leaving(self, reason: str) -> None:
        """This member leaves (drain, stop, fatal error): every event until then says why."""
        self._leave_reason = reason

    def session_ended(self, *, fatal: bool) -> None:
        self.state = MemberState.LOST if fatal else MemberState.STOPPED

    def stopped(self) -> None:
        self.state = MemberState.STOPPED
        self.owned.clear()
        self.revoking = frozenset()

    @property
    def partitions(self) -> tuple[TopicPartition, ...]:
        return tuple(sorted(self.owned))

    # -- identity ----------------------------------------------------------------------

    def identify(self, member_id: str | None, generation: int) -> bool:
        """Record what ``consumer_group_metadata()`` says; ``True`` when it changed."""
        member_id = member_id or None
        if member_id is not None:
            self._known_member_id = member_id
        if generation > 0:
            self._known_generation = generation
        if member_id == self.member_id and generation == self.generation:
            return False
        self.member_id, self.generation = member_id, generation
        return True

    def joined_with_nothing(self, now: float, revoke_timeout_s: float) -> bool:
        """KIP-848: in the group (a member id and epoch) with nothing owned and no callback,
        for the revoke timeout plus ``EMPTY_JOIN_GRACE_SECONDS`` at the same epoch: joined,
        or rejoined after a loss, with nothing to own. librdkafka calls no ``on_assign``
        for an empty assignment (it is "the same" as the empty one it has), so such a
        member (more members than partitions) would stay ``joining`` (or ``lost``) for
        ever: never ready, its application never told. The caller reports an empty
        assignment. A member whose partitions come later than that (a peer slower to
        release them than its own revoke bound) is told twice: empty, then its
        partitions, as a classic cooperative member is."""
        rejoined = self.state is MemberState.LOST and self.generation != self._lost_at_generation
        if not (
            self.identity.kip848
            and (self.state is MemberState.JOINING or rejoined)
            and not self.owned
            and self.member_id is not None
            and self.generation >= 1
        ):
            self._epoch_without_callback_since = self._epoch_without_callback = None
            return False
        if self._epoch_without_callback != self.generation:
            self._epoch_without_callback = self.generation
            self._epoch_without_callback_since = now
        since = self._epoch_without_callback_since
        return since is not None and now - since >= revoke_timeout_s + EMPTY_JOIN_GRACE_SECONDS

    def epoch_moved(self, now: float) -> RebalanceCompleted | None:
        """KIP-848 bumps member epochs with no callback when nothing moves here: count it."""
        if (
            self.identity.kip848
            and self.state is MemberState.STABLE
            and self.generation > (self._counted_generation or -1)
        ):
            return self._complete(now)
        return None

    # -- callbacks ---------------------------------------------------------------------

    def assigned(
        self, offsets: tuple[PartitionOffset, ...], now: float
    ) -> tuple[EventDraft, RebalanceCompleted | None]:
        """``on_assign``: the new partitions with their committed offsets."""
        if not self.identity.cooperative:
            self.owned.clear()
        for po in offsets:
            self.owned[po.tp] = None
        if offsets or not self.owned:
            self._owner_id = self.member_id
        self.state = MemberState.STABLE
        self.assigned_at = now
        self._rebalancing_seen_in_stats = False
        reason = self.reason(now)
        # Counted before the snapshot shows it: readers see both at once.
        completed = self._complete(now)
        return self._draft(EventType.ASSIGNED, offsets, reason), completed

    def taken(
        self, partitions: Iterable[TopicPartition], kind: EventType, now: float
    ) -> EventDraft:
        """``on_revoke`` / ``on_lost``: the partitions leave the owned set now.

        A revocation under another member id than the one the partitions were granted to
        is a loss: that membership was replaced (a static member's rejoin that the broker
        took as a new member), and the group may have handed the partitions to someone else
        before this callback (docs/decisions/0103-revoke-under-a-replaced-member-is-a-loss.md).
        The draft's ``type`` says which it is."""
        if (
            kind is EventType.REVOKED
            and not self.identity.kip848
            and self._owner_id is not None
            and self.member_id is not None
            and self.member_id != self._owner_id
        ):
            kind = EventType.LOST
        if self._rebalance_started is None:
            self._rebalance_started = now
        taken = tuple(PartitionOffset(tp.topic, tp.partition, None) for tp in partitions)
        for po in taken:
            self.owned.pop(po.tp, None)
        if kind is EventType.LOST:
            self.state = MemberState.LOST
            self._lost_at_generation = self.generation
            self.revoking = frozenset()
        else:
            self.state = MemberState.REBALANCING
            self.revoking = frozenset(po.tp for po in taken)
        return self._draft(kind, taken, self.reason(now))

    def barrier_over(self) -> None:
        self.revoking = frozenset()

    def lost_with_consumer(self, reason: str) -> EventDraft:
        """The consumer died holding partitions (fatal error): they are lost."""
        taken = tuple(PartitionOffset(tp.topic, tp.partition, None) for tp in self.owned)
        self.owned.clear()
        self.revoking = frozenset()
        return self._draft(EventType.LOST, taken, reason)

    def sample(self, join_state: str | None, sampled_at: float, now: float) -> bool:
        """A statistics sample; ``True`` when it changed the state."""
        if sampled_at <= self.assigned_at:
            return False  # taken before our last assignment: says nothing about now
        if join_state not in (None, "steady", "init") and self.state is MemberState.STABLE:
            self.state = MemberState.REBALANCING
            self._rebalancing_seen_in_stats = True
            if self._rebalance_started is None:
                self._rebalance_started = now
            return True
        if (
            join_state == "steady"
            and self.state is MemberState.REBALANCING
            and self._rebalancing_seen_in_stats
        ):
            self.state = MemberState.STABLE  # a rebalance that moved nothing here
            self._rebalancing_seen_in_stats = False
            return True
        return False

    # -- requests from the application -------------------------------------------------

    def enforce(
        self, reason: str, now: float, *, in_barrier: bool = False
    ) -> tuple[EnforceOutcome, EventDraft | None]:
        """``POST /enforce-rebalance``: start one, or join the one under way (KIP-568).

        ``in_barrier``: asked while a revoke or lost barrier holds the member (its
        application's handler asked): the group is rebalancing already (a revoke, or a loss
        the member rejoins after), so it joins that one, as Java's ``enforceRebalance()``
        from ``onPartitionsRevoked``; starting one would wait for its own barrier. That
        holds even when librdkafka has reset the member id already (a session it lost
        before calling ``on_lost``): the member rejoins after the barrier."""
        if self.state is MemberState.STOPPED or (
            not in_barrier and (self.member_id is None or self.state is MemberState.STARTING)
        ):
            raise NotInGroup("not in a group yet (or stopping): nothing to rebalance")
        if (
            in_barrier
            or self._enforce_pending(now)
            or self.state in (MemberState.REBALANCING, MemberState.JOINING)
        ):
            return EnforceOutcome.COALESCED, None
        self._before_enforce = (self._enforce_reason, self._enforced_at, self._rebalance_started)
        self._enforce_reason = reason
        self._enforced_at = self._rebalance_started = now
        return EnforceOutcome.STARTED, self._draft(EventType.REBALANCE_REQUESTED, (), reason)

    def enforce_refused(self) -> None:
        """Kafka refused the rejoin ``enforce`` started: as if it had not been asked."""
        self._enforce_reason, self._enforced_at, self._rebalance_started = self._before_enforce

    def check_commit(
        self, offsets: Iterable[PartitionOffset], generation_id: int | None = None
    ) -> None:
        """Refuse a commit this member may not make (ownership, then generation)."""
        if self.state is MemberState.STOPPED:
            raise NotInGroup("not in the group")
        foreign = sorted({po.tp for po in offsets} - set(self.owned) - self.revoking)
        if foreign:
            raise NotOwned(foreign)
        if generation_id is not None and generation_id != self.generation:
            raise StaleGeneration(generation_id, self.generation)

    # -- helpers -----------------------------------------------------------------------

    def reason(self, now: float) -> str | None:
        """Why (KIP-800): this member leaving, else the enforce it asked for, else unknown."""
        if self._leave_reason is not None:
            return self._leave_reason
        return self._enforce_reason if self._enforce_pending(now) else None

    def _enforce_pending(self, now: float) -> bool:
        return (
            self._enforce_reason is not None and now - self._enforced_at < ENFORCE_COALESCE_SECONDS
        )

    def _complete(self, now: float) -> RebalanceCompleted | None:
        if self.generation == self._counted_generation:
            return None
        self._counted_generation = self.generation
        started, self._rebalance_started = self._rebalance_started, None
        self._enforce_reason = None
        return RebalanceCompleted(self.generation, None if started is None else now - started)

    def _draft(
        self, kind: EventType, partitions: tuple[PartitionOffset, ...], reason: str | None
    ) -> EventDraft:
        member_id, generation = self.member_id, self.generation
        if kind is not EventType.ASSIGNED:
            # librdkafka forgets the member id before on_lost and revokes at epoch 0 in
            # KIP-848's close(): the partitions were held under the last known identity.
            member_id = member_id or self._known_member_id
            if generation <= 0:
                generation = self._known_generation
        return EventDraft(
            type=kind,
            group_id=self.identity.group_id,
            member_id=member_id,
            group_instance_id=self.identity.group_instance_id,
            generation_id=generation,
            protocol=self.identity.protocol,
            partitions=partitions,
            assignment=self.partitions,
            reason=reason,
        )
