"""One consumer session of the group member, as an explicit state machine.

Each ``Consumer`` the member creates is a *session*, numbered from 1. Its state moves
only through ``next_state`` (the transition table below), which refuses an illegal move
(``IllegalTransition``): the member's poll loop, its close and its rebalance callbacks
all go through it, so no combination of flags can say two things at once.

What a rebalance callback may do depends on the state of the session it comes from
(``callback_handling``): a callback from a session the member gave up on (its
partitions were reported lost, or it is an older session than the current one) is
applied to librdkafka only (an assignment must still be assigned, or librdkafka's
rebalance stalls) and recorded in the log, never journaled nor published. That is the
KIP-848 zombie assignment of issue 41: Kafka answers again after a cut longer than the
session, librdkafka rejoins the old consumer by itself, and its ``on_assign`` used to be
published as ``assigned`` 20-40 ms before the member closed that consumer and reported
the same partitions ``lost``.

Pure: no Kafka, no clock, no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class SessionState(enum.Enum):
    ACTIVE = "active"  # subscribed and polled
    REJOINING = "rejoining"  # an eager enforce subscribed again: not stable since
    PRESUMED_LOST = "presumed_lost"  # Kafka silent past the session: partitions reported lost
    ABANDONED = "abandoned"  # Kafka answers again: this consumer is given up, to be recreated
    FAILED = "failed"  # librdkafka reported a fatal error: to be closed, then recreated
    CLOSING = "closing"  # close() runs: its revoke is reported
    CLOSING_LOST = "closing_lost"  # close() of a consumer whose partitions were reported lost
    CLOSED = "closed"


class SessionEvent(enum.Enum):
    ENFORCED_EAGER = "enforced_eager"  # subscribed again (an eager enforce, or its restore)
    STABLE = "stable"  # the membership is stable again
    SESSION_EXPIRED = "session_expired"  # no answer from Kafka past the session timeout
    KAFKA_BACK = "kafka_back"  # Kafka answers again after a presumed loss
    FATAL_ERROR = "fatal_error"  # librdkafka's fatal error
    CLOSE = "close"  # the member closes the consumer (stop, drain, recreate, fatal)
    CLOSED = "closed"  # close() returned


class Callback(enum.Enum):
    ASSIGN = "assign"
    REVOKE = "revoke"
    LOST = "lost"


class Handling(enum.Enum):
    REPORT = "report"  # journal, hold the barrier if any, publish
    APPLY_ONLY = "apply_only"  # give librdkafka its (incremental) assign; report nothing
    IGNORE = "ignore"  # the partitions were reported lost already: nothing to do


class IllegalTransition(RuntimeError):
    """A move the session's table does not allow: a bug in the member, never Kafka's."""


_S, _E = SessionState, SessionEvent

_TRANSITIONS: dict[tuple[SessionState, SessionEvent], SessionState] = {
    (_S.ACTIVE, _E.ENFORCED_EAGER): _S.REJOINING,
    (_S.ACTIVE, _E.STABLE): _S.ACTIVE,
    (_S.ACTIVE, _E.SESSION_EXPIRED): _S.PRESUMED_LOST,
    (_S.ACTIVE, _E.FATAL_ERROR): _S.FAILED,
    (_S.ACTIVE, _E.CLOSE): _S.CLOSING,
    (_S.REJOINING, _E.ENFORCED_EAGER): _S.REJOINING,
    (_S.REJOINING, _E.STABLE): _S.ACTIVE,
    (_S.REJOINING, _E.SESSION_EXPIRED): _S.PRESUMED_LOST,
    (_S.REJOINING, _E.FATAL_ERROR): _S.FAILED,
    (_S.REJOINING, _E.CLOSE): _S.CLOSING,
    # Presumed lost: the subscription is moot (the consumer is recreated once Kafka
    # answers), and a fatal error changes nothing reported (closed all the same).
    (_S.PRESUMED_LOST, _E.ENFORCED_EAGER): _S.PRESUMED_LOST,
    (_S.PRESUMED_LOST, _E.STABLE): _S.PRESUMED_LOST,
    (_S.PRESUMED_LOST, _E.KAFKA_BACK): _S.ABANDONED,
    (_S.PRESUMED_LOST, _E.FATAL_ERROR): _S.PRESUMED_LOST,
    (_S.PRESUMED_LOST, _E.CLOSE): _S.CLOSING_LOST,
    (_S.ABANDONED, _E.FATAL_ERROR): _S.ABANDONED,
    (_S.ABANDONED, _E.CLOSE): _S.CLOSING_LOST,
    (_S.FAILED, _E.FATAL_ERROR): _S.FAILED,
    (_S.FAILED, _E.CLOSE): _S.CLOSING,
    (_S.CLOSING, _E.FATAL_ERROR): _S.CLOSING,
    (_S.CLOSING, _E.CLOSED): _S.CLOSED,
    (_S.CLOSING_LOST, _E.FATAL_ERROR): _S.CLOSING_LOST,
    (_S.CLOSING_LOST, _E.CLOSED): _S.CLOSED,
}

# States whose partitions were reported lost without a callback: librdkafka's own revoke
# or lost for them must not report them again, nor an assignment it makes by itself.
_LOST_ALREADY = frozenset({_S.PRESUMED_LOST, _S.ABANDONED, _S.CLOSING_LOST})


def next_state(state: SessionState, event: SessionEvent) -> SessionState:
    """The state after ``event``; ``IllegalTransition`` for a move the table refuses."""
    try:
        return _TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event.value} is not allowed in state {state.value}") from None


def callback_handling(state: SessionState, callback: Callback, *, current: bool) -> Handling:
    """What a rebalance callback from a session in ``state`` may do; ``current`` is false
    for a callback from an older session than the member's current one."""
    if not current or state is _S.CLOSED or state in _LOST_ALREADY:
        return Handling.APPLY_ONLY if callback is Callback.ASSIGN else Handling.IGNORE
    return Handling.REPORT


@dataclass
class Session:
    """One consumer's session: its number and state. Member thread only."""

    number: int
    state: SessionState = SessionState.ACTIVE
    # Given up after a presumed loss: closed to be recreated at once (no fatal pause).
    abandoned: bool = False
    # Subscribed again by an eager enforce (or its restore) and not stable since, in any
    # state: librdkafka may still apply that subscribe, and must not while it closes.
    resubscribed: bool = False
    ignored: list[tuple[Callback, int]] = field(default_factory=list)

    def move(self, event: SessionEvent) -> SessionState:
        self.state = next_state(self.state, event)
        if self.state is SessionState.ABANDONED:
            self.abandoned = True
        if event is SessionEvent.ENFORCED_EAGER:
            self.resubscribed = True
        elif event is SessionEvent.STABLE:
            self.resubscribed = False
        return self.state

    def handling(self, callback: Callback, from_session: int) -> Handling:
        """How to treat ``callback`` from session ``from_session``; one not reported is
        remembered (``ignored``) for the log."""
        handling = callback_handling(self.state, callback, current=from_session == self.number)
        if handling is not Handling.REPORT:
            self.ignored.append((callback, from_session))
        return handling

    @property
    def polling(self) -> bool:
        """The poll loop goes on (nothing decided that this consumer must close)."""
        return self.state in (_S.ACTIVE, _S.REJOINING, _S.PRESUMED_LOST)

    @property
    def closing(self) -> bool:
        return self.state in (_S.CLOSING, _S.CLOSING_LOST, _S.CLOSED)

    @property
    def reported_lost(self) -> bool:
        return self.state in _LOST_ALREADY

    @property
    def rejoining(self) -> bool:
        return self.state is _S.REJOINING

    def end_reason(self, *, fatal: bool) -> str:
        """Why the consumer closes (the reason on the events its close reports)."""
        if fatal or self.state is _S.FAILED:
            return "fatal error"
        return "rejoining after a lost session" if self.abandoned else "stopping"
