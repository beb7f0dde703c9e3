"""The membership core's rules, without Kafka: callbacks in, event drafts and state out."""

from __future__ import annotations

import pytest

from sidecar.commands import NotInGroup, NotOwned, StaleGeneration
from sidecar.membership import (
    EMPTY_JOIN_GRACE_SECONDS,
    ENFORCE_COALESCE_SECONDS,
    EnforceOutcome,
    GroupIdentity,
    Membership,
)
from sidecar.model import EventType, MemberState, PartitionOffset, TopicPartition


def member(protocol: str = "eager", kip848: bool = False) -> Membership:
    core = Membership(
        GroupIdentity(
            group_id="g",
            group_instance_id=None,
            protocol="cooperative" if protocol != "eager" else "eager",
            kip848=kip848,
        )
    )
    core.session_started()
    return core


def po(partition: int, offset: int | None = None) -> PartitionOffset:
    return PartitionOffset("t", partition, offset)


def tp(partition: int) -> TopicPartition:
    return TopicPartition("t", partition)


def test_eager_assignment_replaces_the_owned_set() -> None:
    core = member("eager")
    core.identify("m1", 1)
    core.assigned((po(0), po(1)), now=1.0)
    core.identify("m1", 2)
    draft, _ = core.assigned((po(2, 7),), now=2.0)
    assert core.partitions == (tp(2),)
    assert draft.assignment == (tp(2),)
    assert draft.partitions == (po(2, 7),)
    assert draft.generation_id == 2
    assert core.state is MemberState.STABLE


def test_cooperative_assignments_and_revocations_are_deltas() -> None:
    core = member("cooperative")
    core.identify("m1", 1)
    core.assigned((po(0), po(1)), now=1.0)
    core.assigned((po(2),), now=2.0)
    assert core.partitions == (tp(0), tp(1), tp(2))
    draft = core.taken([tp(1)], EventType.REVOKED, now=3.0)
    assert draft.partitions == (po(1),)
    assert draft.assignment == (tp(0), tp(2))
    assert core.state is MemberState.REBALANCING


def test_a_revoked_partition_can_be_committed_until_its_barrier_is_over() -> None:
    core = member("cooperative")
    core.identify("m1", 1)
    core.assigned((po(0), po(1)), now=1.0)
    core.taken([tp(1)], EventType.REVOKED, now=2.0)
    core.check_commit([po(1, 5)])  # the app commits from its revoke handler
    core.barrier_over()
    with pytest.raises(NotOwned):
        core.check_commit([po(1, 5)])
    core.check_commit([po(0, 5)])


def test_a_lost_partition_cannot_be_committed_even_during_its_barrier() -> None:
    core = member("eager")
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    core.taken([tp(0)], EventType.LOST, now=2.0)
    assert core.state is MemberState.LOST
    with pytest.raises(NotOwned):
        core.check_commit([po(0, 5)])


def test_a_commit_naming_another_generation_is_stale() -> None:
    core = member("eager")
    core.identify("m1", 3)
    core.assigned((po(0),), now=1.0)
    core.check_commit([po(0, 1)], generation_id=3)
    with pytest.raises(StaleGeneration) as raised:
        core.check_commit([po(0, 1)], generation_id=2)
    assert (raised.value.requested, raised.value.current) == (2, 3)


def test_a_stopped_member_commits_nothing() -> None:
    core = member()
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    core.stopped()
    with pytest.raises(NotInGroup):
        core.check_commit([po(0, 1)])


def test_a_rebalance_is_counted_once_per_generation_and_timed_from_its_first_sign() -> None:
    core = member("eager")
    core.identify("m1", 1)
    _, first = core.assigned((po(0),), now=1.0)
    assert first is not None and first.duration_s is None  # no start seen: joined
    core.taken([tp(0)], EventType.REVOKED, now=10.0)
    core.identify("m1", 2)
    _, second = core.assigned((po(0),), now=12.5)
    assert second is not None
    assert (second.generation_id, second.duration_s) == (2, 2.5)
    _, again = core.assigned((), now=13.0)  # same generation: not another rebalance
    assert again is None


def test_statistics_mark_a_rebalance_that_moves_nothing_here() -> None:
    core = member("cooperative")
    core.identify("m1", 1)
    core.assigned((po(0),), now=5.0)
    assert not core.sample("wait-join", sampled_at=4.0, now=6.0)  # older than the assignment
    assert core.sample("wait-join", sampled_at=6.0, now=6.0)
    assert core.partitions == (tp(0),)
    states = [core.state]
    assert core.sample("steady", sampled_at=7.0, now=7.0)
    states.append(core.state)
    assert states == [MemberState.REBALANCING, MemberState.STABLE]


def test_kip848_epoch_bump_without_callback_is_counted_once() -> None:
    core = member("cooperative", kip848=True)
    core.identify("m1", 2)
    core.assigned((po(0),), now=1.0)
    assert core.identify("m1", 3)
    moved = core.epoch_moved(now=2.0)
    assert moved is not None and moved.generation_id == 3
    assert core.epoch_moved(now=2.1) is None
    classic = member("cooperative")
    classic.identify("m1", 2)
    classic.assigned((po(0),), now=1.0)
    classic.identify("m1", 3)
    assert classic.epoch_moved(now=2.0) is None


def test_enforce_starts_once_then_coalesces_until_the_rebalance_completes() -> None:
    core = member("eager")
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    outcome, draft = core.enforce("deploy", now=2.0)
    assert outcome is EnforceOutcome.STARTED
    assert draft is not None and draft.type is EventType.REBALANCE_REQUESTED
    assert draft.reason == "deploy"
    assert core.enforce("again", now=2.1) == (EnforceOutcome.COALESCED, None)
    revoked = core.taken([tp(0)], EventType.REVOKED, now=2.2)
    assert revoked.reason == "deploy"
    core.identify("m1", 2)
    assigned, completed = core.assigned((po(0),), now=3.0)
    assert assigned.reason == "deploy"
    assert completed is not None and completed.duration_s == pytest.approx(1.0)
    # Completed: the next enforce starts a new rebalance, and later events lose the reason.
    assert core.enforce("next", now=4.0)[0] is EnforceOutcome.STARTED


def test_enforce_refused_before_joining_and_coalesced_while_rebalancing() -> None:
    core = member()
    with pytest.raises(NotInGroup):
        core.enforce("x", now=1.0)
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    core.taken([tp(0)], EventType.REVOKED, now=2.0)
    assert core.enforce("x", now=2.0)[0] is EnforceOutcome.COALESCED


def test_an_enforce_inside_a_barrier_joins_the_rebalance_and_starts_none() -> None:
    """Asked from the application's revoke or lost handler, while the barrier holds the
    member: the group rebalances already (a revoke; a loss the member rejoins after), so
    the enforce joins it, with no ``requested`` event; the core decides that, as for
    an enforce between polls, and refuses it the same way once the member stopped."""
    core = member("eager")
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    core.taken([tp(0)], EventType.LOST, now=2.0)
    assert core.state is MemberState.LOST
    assert core.enforce("from on_lost", now=2.1, in_barrier=True) == (
        EnforceOutcome.COALESCED,
        None,
    )
    assert core.reason(2.2) is None  # nothing was started: no event carries this reason
    # librdkafka resets the member id on UNKNOWN_MEMBER_ID before it calls on_lost: the
    # listener reads no member id any more. Still the rebalance under way, not a 409.
    core.identify(None, -1)
    assert core.enforce("after the reset", now=2.3, in_barrier=True)[0] is EnforceOutcome.COALESCED
    core.stopped()
    with pytest.raises(NotInGroup):
        core.enforce("x", now=3.0, in_barrier=True)


def test_an_enforce_that_never_completed_stops_coalescing_and_giving_its_reason() -> None:
    core = member("cooperative")
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    core.enforce("old", now=2.0)
    later = 2.0 + ENFORCE_COALESCE_SECONDS
    assert core.reason(later) is None
    assert core.enforce("new", now=later)[0] is EnforceOutcome.STARTED


def test_an_enforce_kafka_refused_is_not_joined_by_the_next_one() -> None:
    core = member("eager")
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    core.enforce("first", now=2.0)
    core.enforce_refused()
    assert core.reason(2.1) is None
    outcome, draft = core.enforce("retry", now=2.1)
    assert outcome is EnforceOutcome.STARTED and draft is not None and draft.reason == "retry"


def test_an_enforce_kafka_refused_leaves_the_rebalance_it_found_as_it_was() -> None:
    core = member("eager")
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    core.taken([tp(0)], EventType.LOST, now=2.0)  # a rebalance under way since 2.0
    assert core.enforce("x", now=3.0)[0] is EnforceOutcome.STARTED
    core.enforce_refused()
    core.identify("m1", 2)
    _, completed = core.assigned((po(0),), now=4.0)
    assert completed is not None and completed.duration_s == pytest.approx(2.0)


def test_leaving_overrides_a_stale_enforce_reason() -> None:
    core = member("cooperative")
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    core.enforce("old enforce", now=2.0)
    core.leaving("drain requested")
    draft = core.taken([tp(0)], EventType.REVOKED, now=3.0)
    assert draft.reason == "drain requested"


def test_a_fatal_error_reason_does_not_outlive_its_consumer() -> None:
    core = member("eager")
    core.identify("m1", 1)
    core.assigned((po(0),), now=1.0)
    core.leaving("fatal error")
    assert core.lost_with_consumer("fatal error").reason == "fatal error"
    core.session_ended(fatal=True)
    core.session_started()  # the new consumer
    core.identify("m2", 1)
    draft, _ = core.assigned((po(0),), now=10.0)
    assert draft.reason is None
    assert core.taken([tp(0)], EventType.REVOKED, now=11.0).reason is None


def test_lost_carries_the_last_known_member_id_and_generation() -> None:
    core = member("eager")
    core.identify("rdkafka-1", 4)
    core.assigned((po(0),), now=1.0)
    core.identify(None, -1)  # librdkafka forgot both before on_lost
    draft = core.taken([tp(0)], EventType.LOST, now=2.0)
    assert (draft.member_id, draft.generation_id) == ("rdkafka-1", 4)
    assert draft.source == "kafka://g/rdkafka-1"


def test_kip848_close_revokes_at_the_last_known_epoch_not_zero() -> None:
    core = member("cooperative", kip848=True)
    core.identify("abc", 7)
    core.assigned((po(0),), now=1.0)
    core.leaving("stopping")
    core.identify("abc", 0)  # what consumer_group_metadata() says inside close()
    draft = core.taken([tp(0)], EventType.REVOKED, now=2.0)
    assert draft.generation_id == 7
    assert draft.reason == "stopping"


def test_an_assignment_reports_the_identity_as_read() -> None:
    core = member("eager")
    core.identify("m1", 1)
    draft, _ = core.assigned((po(0, 3),), now=1.0)
    assert (draft.member_id, draft.generation_id) == ("m1", 1)
    assert draft.type is EventType.ASSIGNED


def test_a_consumer_that_died_holding_partitions_loses_them_all() -> None:
    core = member("cooperative")
    core.identify("m1", 1)
    core.assigned((po(0), po(1)), now=1.0)
    draft = core.lost_with_consumer("fatal error")
    assert draft.type is EventType.LOST
    assert draft.partitions == (po(0), po(1))
    assert draft.assignment == ()
    assert core.partitions == ()


def test_a_revoke_under_a_replaced_membership_is_a_loss() -> None:
    """A static member's rejoin over a slow link was taken by the broker as a new member
    (new member id): the group gave the partitions away before librdkafka revoked them
    (chaos run, cooperative, seed 22). The application must hear `lost`, not `revoked`."""
    core = member("cooperative")
    core.identify("m0-old", 142)
    core.assigned((po(8), po(9)), now=1.0)
    core.identify("m0-new", 145)
    draft = core.taken([tp(8), tp(9)], EventType.REVOKED, now=2.0)
    assert draft.type is EventType.LOST
    assert core.state is MemberState.LOST and core.revoking == frozenset()


def test_a_revoke_under_the_granting_membership_stays_a_revoke() -> None:
    core = member("eager")
    core.identify("m0", 3)
    core.assigned((po(0),), now=1.0)
    core.identify("m0", 4)  # a new generation, the same membership
    assert core.taken([tp(0)], EventType.REVOKED, now=2.0).type is EventType.REVOKED
    core.assigned((po(0),), now=3.0)
    core.identify(None, -1)  # identity unreadable: no evidence of a replacement
    assert core.taken([tp(0)], EventType.REVOKED, now=4.0).type is EventType.REVOKED


def test_kip848_a_member_with_nothing_counts_as_joined_after_the_revoke_bound() -> None:
    """librdkafka calls no on_assign for an empty KIP-848 assignment. A joining member
    whose partitions peers still release also holds an empty one, for their barriers and a
    heartbeat: so the empty join is declared only after the revoke timeout plus a grace,
    at one epoch; and a member fenced (lost) that rejoins with nothing gets it too."""
    core = member("cooperative", kip848=True)
    wait = 30.0 + EMPTY_JOIN_GRACE_SECONDS
    assert not core.joined_with_nothing(0.0, 30.0)  # no member id yet
    core.identify("m1", 7)
    assert not core.joined_with_nothing(1.0, 30.0)  # the clock starts
    assert not core.joined_with_nothing(1.0 + wait - 0.1, 30.0)
    core.identify("m1", 8)  # a new epoch: start again
    assert not core.joined_with_nothing(1.0 + wait + 1, 30.0)
    assert core.joined_with_nothing(1.0 + 2 * wait + 1, 30.0)
    core.assigned((), now=100.0)
    assert not core.joined_with_nothing(200.0, 30.0)  # stable: nothing to report
    # Fenced: on_lost, then librdkafka rejoins with a new epoch and nothing assigned.
    core.identify("m1", 9)
    core.assigned((po(0),), now=201.0)
    core.identify(None, -1)  # reset before on_lost
    core.taken([tp(0)], EventType.LOST, now=202.0)
    assert not core.joined_with_nothing(203.0, 30.0)  # no epoch: not back yet
    core.identify("m2", 12)
    assert not core.joined_with_nothing(204.0, 30.0)
    assert core.joined_with_nothing(204.0 + wait, 30.0)
    classic = member("cooperative")
    classic.identify("m1", 3)
    assert not classic.joined_with_nothing(0.0, 0.0) and not classic.joined_with_nothing(99, 0)
