"""KIP-848 static members whose instance id is still held (issue 41, item 3).

Under KIP-848 a ``group.instance.id`` held by a member the broker believes alive fences
the *new* member with the fatal ``UNRELEASED_INSTANCE_ID``. The sidecar retries about
every second while the old member may still release it (``sidecar.refusals``), so it is
in the group within a second of the release; past the session timeout it says in its
status that the instance id is held (two sidecars with one instance id).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer

from tests.support.sidecars import Sidecar, wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 3
# The shared broker's group.consumer.session.timeout.ms (deploy/local).
SESSION_MS = "10000"


@pytest.fixture
def holder(kafka_bootstrap: str) -> Iterator[Callable[[str, str, str], threading.Event]]:
    """A plain KIP-848 consumer that holds an instance id until its event is set."""
    stops: list[tuple[threading.Event, threading.Thread]] = []

    def hold(group: str, topic: str, instance_id: str) -> threading.Event:
        stop, joined = threading.Event(), threading.Event()

        def run() -> None:
            consumer = Consumer(
                {
                    "bootstrap.servers": kafka_bootstrap,
                    "group.id": group,
                    "group.protocol": "consumer",
                    "group.instance.id": instance_id,
                    "enable.auto.commit": False,
                }
            )
            consumer.subscribe([topic], on_assign=lambda c, ps: joined.set())
            try:
                while not stop.is_set():
                    consumer.poll(0.2)
            finally:
                consumer.close()  # the static leave (epoch -2): the instance id is released

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert joined.wait(60), "the holder never joined"
        stops.append((stop, thread))
        return stop

    yield hold
    for stop, thread in stops:
        stop.set()
        thread.join(30)


def _retries(sidecar: Sidecar) -> list[float]:
    """The delays the sidecar logged before each new consumer after a fatal error."""
    delays = []
    for line in sidecar.log_path.read_text(errors="replace").splitlines():
        if "consumer failed fatally" in line and "{" in line:
            record = json.loads(line[line.index("{") :])
            delays.append(float(record["retry_in_s"]))
    return delays


def test_a_held_instance_id_is_retried_every_second_reported_then_taken_once_released(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    holder: Callable[[str, str, str], threading.Event],
) -> None:
    topic = topic_factory(PARTITIONS)
    release = holder(group_id, topic, "pod-0")
    sidecar = sidecar_factory(
        group_id,
        topic,
        protocol="consumer",
        strategy=None,
        instance_id="pod-0",
        extra_env={"SIDECAR_GROUP_SESSION_TIMEOUT_MS": SESSION_MS},
    )

    def reported() -> bool:
        error = sidecar.assignment().get("error") or ""
        return "still held by another member" in error

    # A live holder keeps it past the session timeout: a misconfiguration, said so.
    wait_until(reported, 120, "the sidecar reported the instance id held")
    delays = _retries(sidecar)
    assert "UNRELEASED_INSTANCE_ID" in sidecar.logs() or "still used" in sidecar.logs()
    # While the old member may still release it: about every second (5 s before).
    assert delays[0] == 1.0, delays
    assert delays[-1] == 5.0, delays
    release.set()
    wait_until(
        lambda: sidecar.assignment()["state"] == "stable" and len(sidecar.partitions()) == 3,
        120,
        "the sidecar took the released instance id and every partition",
    )
    assert sidecar.assignment()["error"] is None
