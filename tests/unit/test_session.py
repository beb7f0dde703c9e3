"""The consumer session's transition table, every state by every event and callback."""

from __future__ import annotations

import pytest

from sidecar.session import (
    Callback,
    Handling,
    IllegalTransition,
    Session,
    SessionEvent,
    SessionState,
    callback_handling,
    next_state,
)

S, E = SessionState, SessionEvent

# The whole table: (state, event) -> next state; every pair not here is refused.
ALLOWED: dict[tuple[SessionState, SessionEvent], SessionState] = {
    (S.ACTIVE, E.ENFORCED_EAGER): S.REJOINING,
    (S.ACTIVE, E.STABLE): S.ACTIVE,
    (S.ACTIVE, E.SESSION_EXPIRED): S.PRESUMED_LOST,
    (S.ACTIVE, E.FATAL_ERROR): S.FAILED,
    (S.ACTIVE, E.CLOSE): S.CLOSING,
    (S.REJOINING, E.ENFORCED_EAGER): S.REJOINING,
    (S.REJOINING, E.STABLE): S.ACTIVE,
    (S.REJOINING, E.SESSION_EXPIRED): S.PRESUMED_LOST,
    (S.REJOINING, E.FATAL_ERROR): S.FAILED,
    (S.REJOINING, E.CLOSE): S.CLOSING,
    (S.PRESUMED_LOST, E.ENFORCED_EAGER): S.PRESUMED_LOST,
    (S.PRESUMED_LOST, E.STABLE): S.PRESUMED_LOST,
    (S.PRESUMED_LOST, E.KAFKA_BACK): S.ABANDONED,
    (S.PRESUMED_LOST, E.FATAL_ERROR): S.PRESUMED_LOST,
    (S.PRESUMED_LOST, E.CLOSE): S.CLOSING_LOST,
    (S.ABANDONED, E.FATAL_ERROR): S.ABANDONED,
    (S.ABANDONED, E.CLOSE): S.CLOSING_LOST,
    (S.FAILED, E.FATAL_ERROR): S.FAILED,
    (S.FAILED, E.CLOSE): S.CLOSING,
    (S.CLOSING, E.FATAL_ERROR): S.CLOSING,
    (S.CLOSING, E.CLOSED): S.CLOSED,
    (S.CLOSING_LOST, E.FATAL_ERROR): S.CLOSING_LOST,
    (S.CLOSING_LOST, E.CLOSED): S.CLOSED,
}

EVERY_MOVE = [(state, event) for state in SessionState for event in SessionEvent]


@pytest.mark.parametrize(("state", "event"), EVERY_MOVE, ids=lambda v: v.value)
def test_every_state_by_every_event(state: SessionState, event: SessionEvent) -> None:
    if (state, event) in ALLOWED:
        assert next_state(state, event) is ALLOWED[(state, event)]
    else:
        with pytest.raises(IllegalTransition, match=f"{event.value} is not allowed"):
            next_state(state, event)


# What a callback from the member's current session may do, per state.
REPORTED = {S.ACTIVE, S.REJOINING, S.FAILED, S.CLOSING}
EVERY_CALLBACK = [(state, callback) for state in SessionState for callback in Callback]


@pytest.mark.parametrize(("state", "callback"), EVERY_CALLBACK, ids=lambda v: v.value)
def test_every_state_by_every_callback(state: SessionState, callback: Callback) -> None:
    handling = callback_handling(state, callback, current=True)
    if state in REPORTED:
        assert handling is Handling.REPORT
    elif callback is Callback.ASSIGN:
        # Reported lost already (or closed): librdkafka gets its assign, nobody an event.
        assert handling is Handling.APPLY_ONLY
    else:
        assert handling is Handling.IGNORE


@pytest.mark.parametrize(("state", "callback"), EVERY_CALLBACK, ids=lambda v: v.value)
def test_a_callback_from_a_consumer_given_up_on_is_never_reported(
    state: SessionState, callback: Callback
) -> None:
    expected = Handling.APPLY_ONLY if callback is Callback.ASSIGN else Handling.IGNORE
    assert callback_handling(state, callback, current=False) is expected


def test_the_zombie_assignment_after_a_cut_is_not_reported() -> None:
    """Issue 41.1: Kafka answers after a cut past the session; librdkafka rejoins the old
    consumer by itself and assigns. That assignment must not become ``assigned``."""
    session = Session(1)
    session.move(E.SESSION_EXPIRED)
    assert session.handling(Callback.ASSIGN, 1) is Handling.APPLY_ONLY
    session.move(E.KAFKA_BACK)
    assert not session.polling and session.abandoned
    assert session.handling(Callback.ASSIGN, 1) is Handling.APPLY_ONLY
    session.move(E.CLOSE)
    assert session.handling(Callback.REVOKE, 1) is Handling.IGNORE
    assert session.handling(Callback.LOST, 1) is Handling.IGNORE
    session.move(E.CLOSED)
    assert session.end_reason(fatal=False) == "rejoining after a lost session"
    assert [c for c, _ in session.ignored] == [
        Callback.ASSIGN,
        Callback.ASSIGN,
        Callback.REVOKE,
        Callback.LOST,
    ]


def test_a_callback_from_an_older_session_is_recorded_not_reported() -> None:
    current = Session(2)
    assert current.handling(Callback.ASSIGN, 1) is Handling.APPLY_ONLY
    assert current.handling(Callback.REVOKE, 2) is Handling.REPORT
    assert current.ignored == [(Callback.ASSIGN, 1)]


def test_an_eager_rejoin_becomes_active_again_once_stable() -> None:
    session = Session(1)
    session.move(E.ENFORCED_EAGER)
    assert session.rejoining and session.polling
    session.move(E.STABLE)
    assert session.state is S.ACTIVE and not session.rejoining


def test_an_eager_resubscribe_while_presumed_lost_is_remembered_for_the_close() -> None:
    """Its postponed subscribe must be replaced by an unsubscribe before close()."""
    session = Session(1)
    session.move(E.SESSION_EXPIRED)
    session.move(E.ENFORCED_EAGER)
    assert session.state is S.PRESUMED_LOST and session.resubscribed
    session.move(E.CLOSE)
    assert session.resubscribed


def test_end_reasons() -> None:
    assert Session(1).end_reason(fatal=False) == "stopping"
    assert Session(1).end_reason(fatal=True) == "fatal error"
    failed = Session(1)
    failed.move(E.FATAL_ERROR)
    assert failed.end_reason(fatal=False) == "fatal error"
    assert not failed.polling


def test_an_illegal_move_leaves_the_state_as_it_was() -> None:
    session = Session(1)
    with pytest.raises(IllegalTransition):
        session.move(E.CLOSED)
    assert session.state is S.ACTIVE
