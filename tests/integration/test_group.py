"""The core promise against a real broker: join, track the assignment, serve it, leave."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from sidecar.journal import Journal
from sidecar.testkit.kafka import create_topic, unique
from tests.support.apps import app_with_sidecar
from tests.support.receiver import slow_revoke
from tests.support.sidecars import Sidecar, covers, wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 12

PROTOCOLS = [
    pytest.param({"protocol": "classic", "strategy": "range"}, id="eager-range"),
    pytest.param(
        {"protocol": "classic", "strategy": "cooperative-sticky"}, id="cooperative-sticky"
    ),
    pytest.param({"protocol": "consumer", "strategy": None}, id="kip848-consumer"),
]


def test_a_topic_pattern_may_count_with_a_comma(
    sidecar_factory: Callable[..., Sidecar], kafka_bootstrap: str, group_id: str
) -> None:
    """``SIDECAR_TOPICS`` is comma-separated, and a regex's counted repetition
    (``{1,3}``, which librdkafka's regex engine supports) was cut in two at its comma:
    the pattern could not be given at all. A comma inside braces now stays in it."""
    base = unique("pat")
    counted = create_topic(kafka_bootstrap, 2, f"{base}-7")
    create_topic(kafka_bootstrap, 2, f"{base}-1234")  # four digits: not matched
    plain = create_topic(kafka_bootstrap, 1)
    sidecar = sidecar_factory(group_id, f"^{base}-[0-9]{{1,3}}$,{plain}")
    expected = {(counted, 0), (counted, 1), (plain, 0)}
    wait_until(lambda: sidecar.partitions() == expected, 60, "the counted pattern's topic")
    assert sidecar.assignment()["state"] == "stable"


@pytest.mark.parametrize("options", PROTOCOLS)
def test_three_sidecars_share_every_partition_exactly_once(
    options: dict[str, str | None],
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    topic = topic_factory(PARTITIONS)
    sidecars = [sidecar_factory(group_id, topic, **options) for _ in range(3)]

    wait_until(lambda: covers(sidecars, topic, PARTITIONS), 60, "all partitions covered")

    states = [s.assignment() for s in sidecars]
    assert all(a["state"] == "stable" for a in states)
    owned = [s.partitions() for s in sidecars]
    assert set().union(*owned) == {(topic, p) for p in range(PARTITIONS)}
    assert sum(len(o) for o in owned) == PARTITIONS  # pairwise disjoint
    expected = "eager" if options["strategy"] == "range" else "cooperative"
    assert {a["protocol"] for a in states} == {expected}
    assert len({a["generation_id"] for a in states}) == 1
    assert all(a["member_id"] for a in states)
    for sidecar in sidecars:
        assert sidecar.client.get("/readyz").status_code == 200


def test_sigterm_records_revoked_before_exit_and_peers_take_over(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    topic = topic_factory(PARTITIONS)
    sidecars = [sidecar_factory(group_id, topic) for _ in range(3)]
    wait_until(lambda: covers(sidecars, topic, PARTITIONS), 60, "all partitions covered")
    leaving = sidecars[0]
    held = leaving.partitions()
    assert held

    assert leaving.terminate() == 0

    journal = Journal(leaving.data_dir, durable=False)
    try:
        events = [e.cloudevent for e in journal.events_after(0, 1000)]
    finally:
        journal.close()
    revoked = [e for e in events if e["type"] == "kafka.partitions.revoked"]
    assert revoked, "no revoked event journaled before exit"
    assert {(p["topic"], p["partition"]) for p in revoked[-1]["data"]["partitions"]} == held
    wait_until(lambda: covers(sidecars[1:], topic, PARTITIONS), 60, "survivors cover all")


def test_kill_9_peers_cover_all_after_session_timeout(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    topic = topic_factory(PARTITIONS)
    sidecars = [sidecar_factory(group_id, topic) for _ in range(3)]
    wait_until(lambda: covers(sidecars, topic, PARTITIONS), 60, "all partitions covered")
    before = sidecars[1].assignment()["generation_id"]

    sidecars[0].kill()

    wait_until(lambda: covers(sidecars[1:], topic, PARTITIONS), 60, "survivors cover all")
    assert sidecars[1].assignment()["generation_id"] > before


def test_static_member_restart_within_session_timeout_causes_no_rebalance(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    topic = topic_factory(PARTITIONS)
    sidecars = [
        sidecar_factory(group_id, topic, instance_id=f"worker-{i}", name=f"static-{i}")
        for i in range(3)
    ]
    wait_until(lambda: covers(sidecars, topic, PARTITIONS), 60, "all partitions covered")
    restarting = sidecars[0]
    generation = restarting.assignment()["generation_id"]
    owned = {s.name: s.partitions() for s in sidecars}

    assert restarting.terminate() == 0
    restarted = sidecar_factory(
        group_id,
        topic,
        instance_id="worker-0",
        name="static-0-again",
        data_dir=restarting.data_dir,
    )
    restarted.wait_stable(timeout=30)
    survivors = [restarted, *sidecars[1:]]

    wait_until(lambda: covers(survivors, topic, PARTITIONS), 30, "all partitions covered")
    assert {a["generation_id"] for a in (s.assignment() for s in survivors)} == {generation}
    assert restarted.partitions() == owned["static-0"]
    assert sidecars[1].partitions() == owned["static-1"]


def test_long_poll_answers_on_change_and_on_timeout(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    topic = topic_factory(4)
    first = sidecar_factory(group_id, topic)
    sequence = first.wait_stable()["sequence"]

    started = time.monotonic()
    unchanged = first.client.get("/assignment", params={"after": sequence, "wait": 1}).json()
    assert unchanged["sequence"] == sequence
    assert time.monotonic() - started >= 1.0  # it did wait for the whole bound

    import threading

    answers: list[dict[str, object]] = []
    poller = threading.Thread(
        target=lambda: answers.append(
            first.client.get("/assignment", params={"after": sequence, "wait": 120}).json()
        )
    )
    poller.start()
    sidecar_factory(group_id, topic)  # a second member joins: the first is rebalanced
    poller.join(timeout=120)
    assert answers, "long-poll did not return"
    assert int(str(answers[0]["sequence"])) > sequence


def test_a_second_signal_or_the_deadline_forces_the_exit(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    """Stopping waits for the barrier; an impatient operator or the deadline cut it short."""
    topic = topic_factory(2)
    with app_with_sidecar(sidecar_factory, group_id, topic, slow_revoke(30)) as (_, first):
        assert first.process is not None
        first.process.send_signal(signal.SIGTERM)
        wait_until(lambda: "signal received" in first.logs(), 10, "first signal seen")
        first.process.send_signal(signal.SIGTERM)
        assert first.process.wait(10) == 128 + signal.SIGTERM
        assert "second signal: exiting now" in first.logs()

    with app_with_sidecar(
        sidecar_factory,
        group_id,
        topic,
        slow_revoke(30),
        extra_env={"SIDECAR_SHUTDOWN_TIMEOUT_MS": "2000"},
        name="impatient",
    ) as (_, second):
        assert second.process is not None
        second.process.send_signal(signal.SIGTERM)
        assert second.process.wait(20) == 1
        assert "shutdown deadline passed" in second.logs()


@pytest.mark.parametrize(
    ("protocol", "strategy"), [("classic", "range"), ("consumer", None)], ids=["classic", "kip848"]
)
def test_a_member_with_nothing_to_own_is_in_the_group_and_says_so(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    protocol: str,
    strategy: str | None,
) -> None:
    """More members than partitions (an autoscaled fleet): under KIP-848 librdkafka calls
    no on_assign for an empty assignment, so the idle member stayed ``joining`` for ever:
    never ready (a rollout that keeps every pod ready hung on it), its application never
    told it is in the group. Both protocols now give it a ``stable`` state, an empty
    ``assigned`` event and readiness."""
    topic = topic_factory(1)
    first = sidecar_factory(group_id, topic, protocol=protocol, strategy=strategy)
    first.wait_stable()
    second = sidecar_factory(group_id, topic, protocol=protocol, strategy=strategy)
    members = [first, second]
    wait_until(  # member epochs differ under KIP-848: no common generation to compare
        lambda: (
            all(s.assignment()["state"] == "stable" for s in members)
            and sum(len(s.partitions()) for s in members) == 1
        ),
        60,
        "both members stable, the one partition owned",
    )
    (idle,) = [s for s in members if not s.partitions()]  # the range assignor may pick either
    assert idle.assignment()["member_id"]
    assigned = [e for e in idle.history() if e["type"] == "kafka.partitions.assigned"]
    assert assigned, idle.history()
    assert assigned[-1]["data"]["assignment"] == assigned[-1]["data"]["partitions"] == []
    assert idle.admin.get("/readyz").status_code == 200
