"""One member's link to Kafka slowed or cut by a real TCP fault injector (Toxiproxy),
while the broker itself stays up: what the sidecar says about it, and how it recovers.

The sidecar under test bootstraps through the proxy (``ProxiedBroker.proxied``): every
connection it makes, the coordinator's included, goes through it. Other clients use the
broker directly.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.subscriptions import new_secret
from sidecar.testkit.kafka import committed
from tests.support.kafka import create_topic, unique
from tests.support.receiver import running, slow_revoke
from tests.support.sidecars import Sidecar, wait_until
from tests.support.toxiproxy import ProxiedBroker, proxied_broker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedBroker]:
    with proxied_broker(tmp_path_factory.mktemp("proxied")) as running:
        yield running


@pytest.fixture
def sidecars(broker: ProxiedBroker) -> Iterator[list[Sidecar]]:
    started: list[Sidecar] = []
    yield started
    broker.proxy.restore()
    with contextlib.suppress(httpx.HTTPStatusError):  # not every test slows it
        broker.proxy.heal()
    for sidecar in started:
        sidecar.stop()
        print(f"---- {sidecar.name} ----\n{sidecar.logs()[-4000:]}")


def commit_directly(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit into the (still empty) group as a client that never joins."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[KafkaTopicPartition(topic, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


def assigned_events(sidecar: Sidecar) -> list[dict[str, Any]]:
    return [e for e in sidecar.history() if e["type"] == "kafka.partitions.assigned"]


def test_committed_offsets_unreadable_in_time_are_unknown_not_none(
    broker: ProxiedBroker, sidecars: list[Sidecar], tmp_path: Path
) -> None:
    topic = create_topic(broker.direct, PARTITIONS)
    group = unique("group")
    commit_directly(broker.direct, group, topic, {0: 11, 1: 12})  # partition 2: nothing
    # Every answer from Kafka to this member comes 0.6 s late: twice the bound of the
    # committed read. (1 s made the join itself take up to 90 s on a loaded machine.)
    broker.proxy.slow(600)
    sidecar = Sidecar(
        broker.proxied,
        group,
        topic,
        tmp_path / "slow",
        extra_env={"SIDECAR_COMMITTED_TIMEOUT_MS": "300"},
    )
    sidecars.append(sidecar.start())
    wait_until(lambda: assigned_events(sidecar) != [], 150, "an assignment")
    partitions = assigned_events(sidecar)[0]["data"]["partitions"]
    assert len(partitions) == PARTITIONS
    for entry in partitions:
        assert entry["offset"] is None
        assert entry["offset_status"] == "unknown", entry  # not "none": that is a lie
    metrics = sidecar.client.get("/metrics").text
    assert f"rebalance_sidecar_committed_offsets_unknown_total {float(PARTITIONS)}" in metrics
    assert "committed offsets unknown after retries" in sidecar.logs()

    broker.proxy.heal()
    enforced = sidecar.client.post("/enforce-rebalance", params={"wait": 60})
    assert enforced.status_code == 200, enforced.text
    wait_until(lambda: len(assigned_events(sidecar)) >= 2, 60, "a second assignment")
    again = {p["partition"]: p for p in assigned_events(sidecar)[-1]["data"]["partitions"]}
    assert again[0]["offset"] == 11 and again[0]["offset_status"] == "committed"
    assert again[1]["offset"] == 12 and again[1]["offset_status"] == "committed"
    assert again[2]["offset"] is None and again[2]["offset_status"] == "none"


def test_connected_comes_back_after_a_short_cut_without_statistics(
    broker: ProxiedBroker, sidecars: list[Sidecar], tmp_path: Path
) -> None:
    """KIP-848 rides out a short outage with no rebalance, and without statistics no
    sample says the broker is back: ``connected`` must follow any broker answer."""
    topic = create_topic(broker.direct, PARTITIONS)
    sidecar = Sidecar(
        broker.proxied,
        unique("group"),
        topic,
        tmp_path / "quiet",
        protocol="consumer",
        strategy=None,
        extra_env={"SIDECAR_STATISTICS_INTERVAL_MS": "0"},
    )
    sidecars.append(sidecar.start())
    before = sidecar.wait_stable()
    wait_until(lambda: sidecar.assignment()["connected"], 30, "connected")
    broker.proxy.cut()
    wait_until(lambda: not sidecar.assignment()["connected"], 30, "disconnected")
    broker.proxy.restore()
    wait_until(lambda: sidecar.assignment()["connected"], 30, "connected again")
    after = sidecar.assignment()
    assert after["state"] == "stable"
    assert after["partitions"] == before["partitions"]
    assert after["error"] is None


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_member_cut_off_past_its_session_reports_lost_and_rejoins(
    protocol: str, broker: ProxiedBroker, sidecars: list[Sidecar], tmp_path: Path
) -> None:
    """The member's link is cut while a peer stays connected: the group moves on without
    it (the broker fences it after the session timeout). The member must say so — under
    KIP-848 librdkafka never calls on_lost — and rejoin once the link is back."""
    topic = create_topic(broker.direct, PARTITIONS)
    group = unique("group")
    options: dict[str, Any] = (
        {"protocol": "classic", "strategy": "cooperative-sticky"}
        if protocol == "classic"
        else {
            "protocol": "consumer",
            "strategy": None,
            # The broker's group.consumer.session.timeout.ms (server.properties).
            "extra_env": {"SIDECAR_GROUP_SESSION_TIMEOUT_MS": "10000"},
        }
    )
    cut_off = Sidecar(broker.proxied, group, topic, tmp_path / "cut", name="cut", **options)
    sidecars.append(cut_off.start())
    cut_off.wait_stable()
    peer = Sidecar(broker.direct, group, topic, tmp_path / "peer", name="peer", **options)
    sidecars.append(peer.start())

    def both_own_some() -> bool:
        mine, theirs = cut_off.partitions(), peer.partitions()
        return bool(mine) and bool(theirs) and len(mine | theirs) == PARTITIONS

    wait_until(both_own_some, 60, "both members own partitions")
    held = cut_off.partitions()
    member_id = cut_off.assignment()["member_id"]
    broker.proxy.cut()
    wait_until(lambda: cut_off.assignment()["state"] == "lost", 60, "the cut member lost")
    view = cut_off.assignment()
    assert view["partitions"] == [] and view["error"]
    lost = [e for e in cut_off.history() if e["type"] == "kafka.partitions.lost"]
    assert lost and {(p["topic"], p["partition"]) for p in lost[-1]["data"]["partitions"]} == held
    assert lost[-1]["data"]["member_id"] == member_id  # the last known one, not null
    wait_until(lambda: len(peer.partitions()) == PARTITIONS, 60, "the peer took over")

    restored_at = cut_off.assignment()["sequence"]
    broker.proxy.restore()
    # One snapshot says it all (state, partitions and member id read together): the cut
    # member is back, stable, with partitions, as a new consumer. Read in two requests,
    # a zombie assignment (issue 41.1) could pass between them.
    rejoined: dict[str, Any] = {}

    def back_as_a_new_member() -> bool:
        view = cut_off.assignment()
        rejoined.update(view)
        return (
            view["state"] == "stable"
            and bool(view["partitions"])
            and view["member_id"] not in (None, member_id)
        )

    wait_until(back_as_a_new_member, 90, "the cut member rejoined")
    mine = {(p["topic"], p["partition"]) for p in rejoined["partitions"]}
    wait_until(lambda: len(mine | peer.partitions()) == PARTITIONS, 60, "both own some")
    assert mine.isdisjoint(peer.partitions())
    # After the link is restored the member is assigned once and stays: no "lost" after
    # its first "assigned" (the old consumer's own rejoin used to be published as
    # "assigned", then closed and reported "lost" 20-40 ms later).
    since = [e["type"] for e in cut_off.history(restored_at)]
    first = since.index("kafka.partitions.assigned")
    assert "kafka.partitions.lost" not in since[first:], since


def test_a_lone_member_cut_off_past_its_session_is_assigned_once_when_kafka_answers(
    broker: ProxiedBroker, sidecars: list[Sidecar], tmp_path: Path
) -> None:
    """Issue 41.1, KIP-848: the member alone in its group is cut off past the session, so
    its partitions have no owner when the link comes back. librdkafka rejoins the old
    consumer by itself and the broker hands them back at its first heartbeat, before the
    member's statistics (every 5 s) or its metadata probe (every 5 s) say Kafka answers.
    That assignment was journaled and published as ``assigned``, then the member closed
    the consumer it had decided to recreate and reported the same partitions ``lost``,
    then ``assigned`` again under a new member id. Now the consumer given up on is never
    reported: after the link is restored, one ``assigned`` and no ``lost``."""
    topic = create_topic(broker.direct, PARTITIONS)
    sidecar = Sidecar(
        broker.proxied,
        unique("group"),
        topic,
        tmp_path / "lone",
        protocol="consumer",
        strategy=None,
        extra_env={"SIDECAR_GROUP_SESSION_TIMEOUT_MS": "10000"},
    )
    sidecars.append(sidecar.start())
    sidecar.wait_stable()
    member_id = sidecar.assignment()["member_id"]
    broker.proxy.cut()
    wait_until(lambda: sidecar.assignment()["state"] == "lost", 60, "the member lost")
    restored_at = sidecar.assignment()["sequence"]
    broker.proxy.restore()
    rejoined: dict[str, Any] = {}

    def back_as_a_new_member() -> bool:
        view = sidecar.assignment()  # one snapshot: state, partitions and member id
        rejoined.update(view)
        return view["state"] == "stable" and view["member_id"] not in (None, member_id)

    wait_until(back_as_a_new_member, 90, "the member back under a new member id")
    assert len(rejoined["partitions"]) == PARTITIONS
    since = [e["type"] for e in sidecar.history(restored_at)]
    # Assigned (in one step or more) and nothing else: no "lost" of a zombie assignment.
    assert since and set(since) == {"kafka.partitions.assigned"}, since


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_commit_the_coordinator_does_not_answer_is_bounded(
    protocol: str, broker: ProxiedBroker, sidecars: list[Sidecar], tmp_path: Path
) -> None:
    """librdkafka's synchronous commit has no timeout of its own (a minute and more for a
    coordinator that does not answer), and the member thread sat in it. Between polls a
    commit is now sent asynchronously: the caller is told within the bound that the
    outcome is unknown, the member goes on (the next command is taken at once, not
    after the first commit), and commits work again once Kafka answers."""
    topic = create_topic(broker.direct, PARTITIONS)
    options: dict[str, Any] = (
        {"protocol": "classic"}
        if protocol == "classic"
        else {"protocol": "consumer", "strategy": None}
    )
    sidecar = Sidecar(
        broker.proxied,
        unique("group"),
        topic,
        tmp_path / "commit",
        extra_env={"SIDECAR_COMMIT_TIMEOUT_MS": "1000"},
        **options,
    )
    sidecars.append(sidecar.start())
    sidecar.wait_stable()
    offsets = {"offsets": [{"topic": topic, "partition": 0, "offset": 5}]}
    assert sidecar.client.post("/commit", json=offsets).status_code == 200

    broker.proxy.slow(40_000)  # Kafka's answers now come 40 s late: none within the bound
    answer = sidecar.client.post("/commit", json=offsets, timeout=60)
    # Before the bound: the member thread sat in commit() until the API gave up on it
    # after 30 s (504, "still running"), and every rebalance waited behind it.
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"]
    assert "no answer from Kafka within 1 s" in answer.json()["error"]
    metrics = sidecar.client.get("/metrics").text
    assert 'rebalance_sidecar_commits_total{outcome="unknown",source="api"} 1.0' in metrics
    # The member thread is free: the next commit is taken and bounded too (it used to
    # wait behind the first: "did not take the command", or a 504 after 30 s). It is of
    # the same partition, so it is not sent beside the first, still unanswered: a retry
    # of that one could land after it and move the committed offset backwards.
    again = sidecar.client.post("/commit", json=offsets, timeout=60)
    assert again.status_code == 503, again.text
    assert "not committed: an earlier commit" in again.json()["error"]
    assert sidecar.assignment()["state"] == "stable"

    broker.proxy.heal()
    wait_until(
        lambda: sidecar.client.post("/commit", json=offsets).status_code == 200,
        90,
        "a commit once Kafka answers again",
    )


def test_a_commit_in_flight_when_a_revoke_barrier_opens_is_answered_at_once(
    broker: ProxiedBroker, sidecars: list[Sidecar], tmp_path: Path
) -> None:
    """A commit sent between polls is answered from ``poll()``, and none runs inside a
    rebalance callback. A revoke barrier that opened while it was in flight left its
    caller waiting for the whole barrier (an application that waits for its commit
    before it acknowledges the revoke would hold the group until the revoke timeout).
    Now the caller is told at once that the outcome is unknown, and the application's
    newer commit from its revoke handler is not refused behind it and is what stays
    committed. (The slowed link delays Kafka's answers, not the requests: the first
    reached the broker before the second was sent, so this does not test their order on
    the connection.)"""
    topic = create_topic(broker.direct, PARTITIONS)
    group = unique("group")
    secret = new_secret()
    with running(secret, slow_revoke(8.0)) as app:  # the app takes 8 s over a revoke
        sidecar = Sidecar(
            broker.proxied,
            group,
            topic,
            tmp_path / "barrier",
            revoke_timeout_ms=20_000,
            extra_env={"SIDECAR_COMMIT_TIMEOUT_MS": "20000"},
            webhooks=[{"url": app.url, "secret": secret, "mode": "blocking"}],
        )
        sidecars.append(sidecar.start())
        sidecar.wait_stable()
        first = {"offsets": [{"topic": topic, "partition": 0, "offset": 5}]}
        broker.proxy.slow(3_000)  # Kafka's answers now come 3 s late
        answers: dict[str, httpx.Response] = {}

        def commit() -> None:
            answers["first"] = sidecar.client.post("/commit", json=first, timeout=60)

        committing = threading.Thread(target=commit)
        committing.start()
        # Set-up, not a measure: the commit is taken (within a poll, 20 ms) before the
        # enforce; were it not, it would run inside the barrier and the checks below fail.
        time.sleep(1.0)
        assert sidecar.client.post("/enforce-rebalance").status_code == 202
        committing.join(30)
        answer = answers["first"]
        assert answer.status_code == 503, answer.text
        assert "no answer from Kafka before a rebalance began" in answer.json()["error"]
        assert answer.headers["retry-after"]

        revoked = "kafka.partitions.revoked"
        wait_until(lambda: any(e["type"] == revoked for e in sidecar.history()), 30, revoked)
        # The application's last commit before the handover: synchronous, after the first
        # on the same connection, so it lands after it (3 s later, over the slowed link).
        newer = {"offsets": [{"topic": topic, "partition": 0, "offset": 6}]}
        inside = sidecar.client.post("/commit", json=newer, timeout=60)
        assert inside.status_code == 200, inside.text
        assert committed(broker.direct, group, topic, PARTITIONS).get(0) == 6

        broker.proxy.heal()
        sidecar.wait_stable()
        assert committed(broker.direct, group, topic, PARTITIONS).get(0) == 6  # not 5
        metrics = sidecar.client.get("/metrics").text
        assert 'rebalance_sidecar_commits_total{outcome="unknown",source="api"} 1.0' in metrics
        assert 'rebalance_sidecar_commits_total{outcome="committed",source="api"} 1.0' in metrics
        sidecar.stop()  # while its app answers: after, its last revoke waits out 20 s


def test_liveness_holds_while_a_revoke_commit_waits_for_kafka(
    broker: ProxiedBroker, sidecars: list[Sidecar], tmp_path: Path
) -> None:
    """Offsets handed back on ``revoked`` were committed synchronously inside the
    callback, bounded only by librdkafka's own timeouts. With Kafka's answers late, the
    poll loop stayed silent past the liveness budget (30 s plus the revoke timeout's
    allowance) and ``/livez`` failed: Kubernetes would restart the sidecar for a Kafka
    outage, which liveness must never do. That wait then counted as alive; now the
    commit is bounded (``SIDECAR_COMMIT_TIMEOUT_MS``, issue 41.2): the callback ends
    within the bound, the loop is never silent past its budget, and the subscriber's
    delivery log says the commit's outcome is unknown."""
    topic = create_topic(broker.direct, PARTITIONS)
    group = unique("group")
    secret = new_secret()
    handed_back = {"offsets": [{"topic": topic, "partition": 0, "offset": 7}]}

    def respond(event: dict[str, Any]) -> tuple[int, Any, float]:
        revoked = event["type"].endswith("revoked")
        return (200, handed_back, 0.0) if revoked else (204, None, 0.0)

    with running(secret, respond) as app:
        sidecar = Sidecar(
            broker.proxied,
            group,
            topic,
            tmp_path / "live",
            revoke_timeout_ms=1_000,  # liveness budget: 30 s + 1.5 s
            webhooks=[{"url": app.url, "secret": secret, "mode": "blocking"}],
        )
        sidecars.append(sidecar.start())
        sidecar.wait_stable()
        assert sidecar.client.get("/livez").status_code == 200
        broker.proxy.slow(45_000)  # Kafka's answers now come 45 s late
        assert sidecar.client.post("/enforce-rebalance").status_code == 202
        revoked = "kafka.partitions.revoked"
        wait_until(lambda: any(e["type"] == revoked for e in sidecar.history()), 30, revoked)
        failures: list[str] = []
        reasons: set[str] = set()
        deadline = time.monotonic() + 40  # past the 31.5 s budget, before the answer
        while time.monotonic() < deadline:
            probe = sidecar.client.get("/livez")
            if probe.status_code != 200:
                failures.append(probe.text)
            reasons.add(probe.json()["reason"].split(" (")[0])
            time.sleep(1.0)
        assert failures == []
        # The commit's wait ended within its bound: the loop never went silent past its
        # budget (it used to sit in the commit for the whole 45 s).
        assert reasons == {"poll loop alive"}, reasons
        webhook = sidecar.client.get("/webhooks").json()[0]["id"]
        log = sidecar.client.get(f"/webhooks/{webhook}/deliveries").json()
        assert "commit_unknown" in {d["outcome"] for d in log}, log
        broker.proxy.heal()
        sidecar.wait_stable(timeout=120)
        assert sidecar.client.get("/livez").status_code == 200
