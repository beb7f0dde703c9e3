"""sidecar.refusals: when a new consumer follows a fatal error (issue 41, item 3)."""

from __future__ import annotations

from confluent_kafka import KafkaError

from sidecar.refusals import (
    FATAL_RETRY_SECONDS,
    UNRELEASED_RETRY_SECONDS,
    FatalRetries,
    unreleased_instance_id,
)

HELD = KafkaError(KafkaError.UNRELEASED_INSTANCE_ID, fatal=True)
OTHER = KafkaError(KafkaError.FENCED_INSTANCE_ID, fatal=True)


def test_only_an_unreleased_instance_id_is_recognised() -> None:
    assert unreleased_instance_id(HELD)
    assert unreleased_instance_id(
        KafkaError(KafkaError._FATAL, "Fatal consumer error: UNRELEASED_INSTANCE_ID")
    )
    assert not unreleased_instance_id(OTHER)
    assert not unreleased_instance_id(None)


def test_other_fatal_errors_keep_the_ordinary_pace() -> None:
    retries = FatalRetries(10.0, "pod-0")
    assert retries.after(OTHER, 0.0) == (FATAL_RETRY_SECONDS, None)
    assert retries.after(None, 1.0) == (FATAL_RETRY_SECONDS, None)


def test_a_held_instance_id_is_retried_every_second_up_to_the_session_then_reported() -> None:
    retries = FatalRetries(10.0, "pod-0")
    now = 100.0
    delays = []
    while now < 100.0 + 15.0:  # the session, its margin: about every second
        delay, report = retries.after(HELD, now)
        assert report is None
        delays.append(delay)
        now += delay + 0.3  # the refusal takes a moment each time
    assert set(delays) == {UNRELEASED_RETRY_SECONDS}
    delay, report = retries.after(HELD, now)
    assert delay == FATAL_RETRY_SECONDS
    assert report is not None and "'pod-0'" in report and "same instance id" in report


def test_a_new_streak_after_a_join_or_another_error_starts_fast_again() -> None:
    retries = FatalRetries(10.0, "pod-0")
    for now in range(0, 40, 2):
        retries.after(HELD, float(now))
    assert retries.after(HELD, 40.0)[0] == FATAL_RETRY_SECONDS
    # Joined, then held again much later: a new streak.
    assert retries.after(HELD, 400.0) == (UNRELEASED_RETRY_SECONDS, None)
    for now in range(402, 440, 2):
        retries.after(HELD, float(now))
    retries.after(OTHER, 441.0)
    assert retries.after(HELD, 442.0) == (UNRELEASED_RETRY_SECONDS, None)
