"""The poll waker's checks (sidecar.kafka.wakeup): whatever is not the handle it expects is
refused, with the member left to plain polling, never a crash."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pytest
from confluent_kafka import Consumer

from sidecar.kafka import wakeup


@pytest.fixture
def consumer() -> Iterator[Consumer]:
    """A real consumer (no broker needed to create one), with an error callback: the
    field after the client handle in confluent-kafka's object then points at it."""
    made = Consumer(
        {
            "bootstrap.servers": "127.0.0.1:9",  # nothing listens: nothing is asked of it
            "group.id": "g",
            "error_cb": lambda error: None,
            "log_level": 0,  # no connection-refused lines on the test's stderr
        }
    )
    yield made
    made.close()


def test_the_consumer_of_this_library_is_woken(consumer: Consumer) -> None:
    waker = wakeup.poll_waker(consumer)
    assert isinstance(waker, wakeup.QueueYield)
    waker.wake()
    waker.close()
    assert waker.closed


def test_what_is_not_a_consumer_of_this_library_is_not_woken() -> None:
    assert wakeup.poll_waker(object()) is None


def test_a_pointer_that_is_not_the_client_handle_is_refused(
    consumer: Consumer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The layout read differs (here: the next field, a Python object's address, in
    writable memory): librdkafka's type and opaque read through it do not confirm it, so
    no queue is taken from it and the member polls plainly."""
    monkeypatch.setattr(wakeup, "_RK_OFFSET", wakeup._RK_OFFSET + 8)
    assert wakeup.poll_waker(consumer) is None


def test_a_pointer_outside_writable_memory_is_never_handed_to_librdkafka() -> None:
    assert not wakeup._writable(16, wakeup._HANDLE_BYTES)
    assert not wakeup._writable(2**63, wakeup._HANDLE_BYTES)


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(
            ("metadata", metadata.PackageNotFoundError("confluent-kafka")), id="no-package-record"
        ),
        pytest.param(("librdkafka", "librdkafka is mapped from 2 paths"), id="no-library"),
        pytest.param(("release", "3.0.0"), id="another-major-release"),
    ],
)
def test_a_library_unlike_the_one_checked_turns_wake_ups_off(
    consumer: Consumer, monkeypatch: pytest.MonkeyPatch, broken: tuple[str, Any]
) -> None:
    what, value = broken

    def version(name: str) -> str:
        if isinstance(value, Exception):
            raise value
        return str(value)

    if what in ("metadata", "release"):
        monkeypatch.setattr(metadata, "version", version)
    else:
        monkeypatch.setattr(wakeup, "_librdkafka", lambda: value)
    assert wakeup.poll_waker(consumer) is None
