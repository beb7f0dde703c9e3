"""Webhook delivery against a real broker and real receivers (issue 3's promises)."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest

from sidecar.journal import Journal
from sidecar.subscriptions import new_secret
from tests.support.apps import app_with_sidecar
from tests.support.kafka import committed
from tests.support.receiver import Received, Receiver, running, slow_revoke
from tests.support.sidecars import Sidecar, covers, free_port, wait_until

pytestmark = pytest.mark.kafka

ALL_TYPES = [
    "kafka.partitions.assigned",
    "kafka.partitions.revoked",
    "kafka.partitions.lost",
    "kafka.rebalance.requested",
]
FAST_RETRIES = {
    "SIDECAR_WEBHOOK_BACKOFF_INITIAL_MS": "50",
    "SIDECAR_WEBHOOK_BACKOFF_MAX_MS": "500",
}


def distinct(received: list[Received]) -> int:
    return len({r.event["id"] for r in received})


def first_receipts(receiver: Receiver) -> list[Received]:
    """Each event once, at its first receipt (delivery is at-least-once)."""
    seen: set[str] = set()
    firsts = []
    for received in receiver.events():
        if received.event["id"] not in seen:
            seen.add(received.event["id"])
            firsts.append(received)
    return firsts


def test_every_delivery_verifies_and_a_wrong_secret_is_rejected(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    topic = topic_factory(4)
    secret = new_secret()
    with running(secret) as good, running(new_secret()) as other:
        sidecar = sidecar_factory(
            group_id,
            topic,
            extra_env=FAST_RETRIES | {"SIDECAR_WEBHOOK_MAX_ATTEMPTS": "3"},
            webhooks=[
                {"url": good.url, "secret": secret, "mode": "async"},
                # The sidecar signs with `secret`; this receiver verifies with another key.
                {"url": other.url, "secret": secret, "mode": "async", "id": "tampered"},
            ],
        )
        sidecar.wait_stable()
        assert good.wait_for(lambda r: len(r) >= 1, 30)
        wait_until(lambda: other.attempts >= 3, 30, "three attempts at the tampered receiver")

        delivered = good.events()[0]
        assert good.rejected == []
        assert delivered.headers["webhook-id"] == delivered.event["id"]
        assert delivered.headers["content-type"] == "application/cloudevents+json"
        assert delivered.event["specversion"] == "1.0"
        assert delivered.event["source"].startswith(f"kafka://{group_id}/")
        assert other.received == []
        assert other.rejected and all(
            "Verification" in r or "signature" in r.lower() for r in other.rejected
        )
        log = sidecar.client.get("/webhooks/tampered/deliveries").json()
        assert {d["outcome"] for d in log} >= {"failed", "gave_up"}


def _stop_before_their_subscribers(sidecars: list[Sidecar], receivers: list[Receiver]) -> None:
    """Stop the sidecars while their subscribers still answer, as an application's sidecar
    stops: after them, each one's last revoke waited out its whole revoke timeout on a
    subscriber that was gone (10-25 s of the test's teardown)."""
    for sidecar in sidecars:
        sidecar.stop()
    for receiver in receivers:
        receiver.stop()


def test_ordered_without_gaps_and_the_eager_barrier_holds_group_wide(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    topic = topic_factory(12)
    secrets = [new_secret() for _ in range(3)]
    receivers = [Receiver(s, slow_revoke(0.2)).start() for s in secrets]
    sidecars: list[Sidecar] = []
    try:
        sidecars.extend(
            sidecar_factory(
                group_id,
                topic,
                extra_env=FAST_RETRIES,
                webhooks=[{"url": r.url, "secret": s, "mode": "blocking", "events": ALL_TYPES}],
            )
            for r, s in zip(receivers, secrets, strict=True)
        )
        wait_until(lambda: covers(sidecars, topic, 12), 60, "all partitions covered")
        rebalances = 20
        for i in range(rebalances):
            response = sidecars[i % 3].client.post(
                "/enforce-rebalance", params={"wait": 60}, json={"reason": f"test {i}"}
            )
            assert response.status_code == 200, response.text
            wait_until(lambda: covers(sidecars, topic, 12), 60, "all partitions covered")

        for sidecar, receiver in zip(sidecars, receivers, strict=True):
            journaled = [int(e["sequence"]) for e in sidecar.history()]
            expected = len(journaled)
            assert receiver.wait_for(lambda got, n=expected: distinct(got) >= n, 30)  # type: ignore[misc]
            delivered = [r.sequence for r in first_receipts(receiver)]
            assert delivered == journaled  # in order, no gaps, nothing extra
            assert receiver.rejected == []

        revoked = [
            r for rec in receivers for r in first_receipts(rec) if r.type.endswith("revoked")
        ]
        assigned = [
            r for rec in receivers for r in first_receipts(rec) if r.type.endswith("assigned")
        ]
        generations = {a.generation for a in assigned}
        assert len(generations) > rebalances  # every enforce produced a new generation
        for a in assigned:
            for r in revoked:
                if r.generation < a.generation:
                    assert r.answered_at <= a.received_at, (
                        f"assigned (generation {a.generation}) reached a member before a revoke "
                        f"of generation {r.generation} was acknowledged"
                    )
    finally:
        _stop_before_their_subscribers(sidecars, receivers)


def test_cooperative_barrier_no_partition_assigned_before_its_owner_acknowledged(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    topic = topic_factory(12)
    secrets = [new_secret() for _ in range(3)]
    receivers = [Receiver(s, slow_revoke(0.3)).start() for s in secrets]
    sidecars: list[Sidecar] = []
    try:
        for r, s in zip(receivers, secrets, strict=True):  # each join moves partitions
            sidecars.append(
                sidecar_factory(
                    group_id,
                    topic,
                    strategy="cooperative-sticky",
                    extra_env=FAST_RETRIES,
                    webhooks=[{"url": r.url, "secret": s, "mode": "blocking"}],
                )
            )
            wait_until(lambda: covers(sidecars, topic, 12), 60, "all partitions covered")
        assert sidecars[0].terminate() == 0  # its partitions move to the others
        wait_until(lambda: covers(sidecars[1:], topic, 12), 60, "all partitions covered")

        events = [(i, r) for i, rec in enumerate(receivers) for r in first_receipts(rec)]
        revokes = [(i, r) for i, r in events if r.type.endswith("revoked")]
        assigns = [(i, r) for i, r in events if r.type.endswith("assigned")]
        moved = 0
        for owner, revoke in revokes:
            for member, assign in assigns:
                shared = revoke.partitions & assign.partitions
                if member != owner and shared and assign.generation > revoke.generation:
                    moved += 1
                    assert revoke.answered_at <= assign.received_at, shared
        assert moved >= 2  # partitions really changed hands
    finally:
        _stop_before_their_subscribers(sidecars, receivers)


def test_offsets_handed_back_on_revoke_are_committed(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
) -> None:
    topic = topic_factory(4)

    def hand_back(event: dict[str, Any]) -> tuple[int, Any, float]:
        if not event["type"].endswith("revoked"):
            return 204, None, 0.0
        offsets = [
            {"topic": p["topic"], "partition": p["partition"], "offset": 1000 + p["partition"]}
            for p in event["data"]["partitions"]
        ]
        return 200, {"offsets": offsets}, 0.0

    with app_with_sidecar(sidecar_factory, group_id, topic, hand_back) as (_, sidecar):
        response = sidecar.client.post("/enforce-rebalance", params={"wait": 30})
        assert response.status_code == 200

        assert committed(kafka_bootstrap, group_id, topic, 4) == {p: 1000 + p for p in range(4)}
        log = sidecar.client.get(f"/webhooks/{sidecar_webhook_id(sidecar)}/deliveries").json()
        assert "offsets_committed" in {d["outcome"] for d in log}


def test_only_the_subscriber_that_handed_back_offsets_is_logged_as_committing_them(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
) -> None:
    """Two blocking subscribers: the application hands offsets back, an audit service just
    acknowledges. The audit's delivery log must not say it committed offsets."""
    topic = topic_factory(2)

    def hand_back(event: dict[str, Any]) -> tuple[int, Any, float]:
        if not event["type"].endswith("revoked"):
            return 204, None, 0.0
        offsets = [
            {"topic": p["topic"], "partition": p["partition"], "offset": 70}
            for p in event["data"]["partitions"]
        ]
        return 200, {"offsets": offsets}, 0.0

    app_secret, audit_secret = new_secret(), new_secret()
    with running(app_secret, hand_back) as app, running(audit_secret) as audit:
        sidecar = sidecar_factory(
            group_id,
            topic,
            webhooks=[
                {"url": app.url, "secret": app_secret, "mode": "blocking", "id": "app"},
                {"url": audit.url, "secret": audit_secret, "mode": "blocking", "id": "audit"},
            ],
        )
        sidecar.wait_stable()
        assert sidecar.client.post("/enforce-rebalance", params={"wait": 30}).status_code == 200
        assert committed(kafka_bootstrap, group_id, topic, 2) == {0: 70, 1: 70}

        def outcomes(webhook: str) -> set[str]:
            log = sidecar.client.get(f"/webhooks/{webhook}/deliveries").json()
            return {d["outcome"] for d in log}

        wait_until(lambda: "delivered" in outcomes("audit"), 30, "the audit's deliveries")
        assert "offsets_committed" in outcomes("app")
        assert "offsets_committed" not in outcomes("audit")
        sidecar.stop()  # while its subscribers answer (see _stop_before_their_subscribers)


def test_foreign_offsets_in_a_revoke_answer_are_rejected_not_committed(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
) -> None:
    topic = topic_factory(2)

    def foreign(event: dict[str, Any]) -> tuple[int, Any, float]:
        if not event["type"].endswith("revoked"):
            return 204, None, 0.0
        return 200, {"offsets": [{"topic": topic, "partition": 7, "offset": 5}]}, 0.0

    with app_with_sidecar(sidecar_factory, group_id, topic, foreign) as (_, sidecar):
        assert sidecar.client.post("/enforce-rebalance", params={"wait": 30}).status_code == 200
        log = sidecar.client.get(f"/webhooks/{sidecar_webhook_id(sidecar)}/deliveries").json()
        rejected = [d for d in log if d["outcome"] == "offsets_rejected"]
        assert rejected and "not being revoked" in rejected[0]["error"]
        assert committed(kafka_bootstrap, group_id, topic, 2) == {}


def test_a_blocking_subscriber_that_is_down_delays_the_rebalance_only_by_the_timeout(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    topic = topic_factory(4)
    secret = new_secret()
    port = free_port()  # nothing listens here yet
    down = sidecar_factory(
        group_id,
        topic,
        revoke_timeout_ms=2000,
        extra_env=FAST_RETRIES,
        webhooks=[
            {
                "url": f"http://127.0.0.1:{port}/hook",
                "secret": secret,
                "mode": "blocking",
                "id": "app",
            }
        ],
    )
    peer = sidecar_factory(group_id, topic)
    wait_until(lambda: covers([down, peer], topic, 4), 60, "all partitions covered")

    for _ in range(2):  # each rebalance waits out the barrier, then completes
        response = peer.client.post("/enforce-rebalance", params={"wait": 40})
        assert response.status_code == 200, response.text
    log = down.client.get("/webhooks/app/deliveries", params={"limit": 1000}).json()
    assert "barrier_timeout" in {d["outcome"] for d in log}

    with running(secret, port=port) as app:  # the application comes back
        journaled = [
            int(e["sequence"]) for e in down.history() if e["type"] != "kafka.rebalance.requested"
        ]
        assert app.wait_for(lambda r: len({x.event["id"] for x in r}) >= len(journaled), 30)
        assert [r.sequence for r in first_receipts(app)] == journaled


def test_undelivered_events_survive_kill_9_with_their_ids(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    topic = topic_factory(4)
    secret = new_secret()
    port = free_port()
    hook = {
        "url": f"http://127.0.0.1:{port}/hook",
        "secret": secret,
        "mode": "async",
        "events": ALL_TYPES,
    }
    first = sidecar_factory(
        group_id, topic, webhooks=[hook], extra_env=FAST_RETRIES, name="crashing"
    )
    first.wait_stable()
    assert first.client.post("/enforce-rebalance", params={"wait": 30}).status_code == 200
    first.kill()

    journal = Journal(first.data_dir, durable=False)
    try:
        before = [(e.sequence, e.id) for e in journal.events_after(0, 1000)]
    finally:
        journal.close()
    assert len(before) >= 3  # assigned, requested, revoked, assigned

    with running(secret, port=port) as app:
        again = sidecar_factory(
            group_id,
            topic,
            webhooks=[hook],
            extra_env=FAST_RETRIES,
            data_dir=first.data_dir,
            name="restarted",
        )
        again.wait_stable()
        assert app.wait_for(lambda r: {x.event["id"] for x in r} >= {i for _, i in before}, 30)
        delivered = [(r.sequence, r.event["id"]) for r in first_receipts(app)]
        assert delivered[: len(before)] == before  # original ids, original order
        later = [s for s, _ in delivered[len(before) :]]
        assert all(s > before[-1][0] for s in later)  # the sequence kept increasing


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"url": "not-a-url"}, 422, "scheme"),
        ({"url": "http://127.0.0.1/with space"}, 422, "spaces or control characters"),
        ({"url": "ftp://127.0.0.1/x"}, 422, "scheme must be http or https"),
        ({"url": "http://user:pw@127.0.0.1/x"}, 422, "credentials"),
        ({"url": "http://127.0.0.1/x", "events": ["kafka.nope"]}, 422, "unknown event type"),
        ({"url": "http://127.0.0.1/x", "mode": "sometimes"}, 422, "mode"),
        ({"url": "http://127.0.0.1/x", "secret": "plain"}, 422, "whsec_"),
        ({"url": "http://127.0.0.1/x", "colour": "blue"}, 422, "colour"),
        ({"url": "http://evil.example/x"}, 422, "not in SIDECAR_WEBHOOK_ALLOWED_HOSTS"),
        ({"url": "http://127.0.0.1/" + "x" * 70_000}, 413, "larger than"),
    ],
)
def test_malformed_registrations_get_4xx_naming_the_problem(
    body: dict[str, Any],
    status: int,
    message: str,
    registration_sidecar: Sidecar,
) -> None:
    response = registration_sidecar.client.post(
        "/webhooks", json=body, headers=registration_sidecar.headers()
    )
    assert response.status_code == status, response.text
    assert message in response.json()["error"]
    listed = registration_sidecar.client.get("/webhooks").json()
    assert listed == []  # nothing half-registered


def test_registration_lifecycle_and_the_secret_is_shown_once(registration_sidecar: Sidecar) -> None:
    client, headers = registration_sidecar.client, registration_sidecar.headers()
    assert client.post("/webhooks", json={"url": "http://127.0.0.1:1/x"}).status_code == 401
    created = client.post(
        "/webhooks", headers=headers, json={"url": "http://127.0.0.1:1/x", "mode": "async"}
    )
    assert created.status_code == 201
    body = created.json()
    assert body["secret"].startswith("whsec_")
    listing = client.get("/webhooks").text + client.get(f"/webhooks/{body['id']}").text
    assert body["secret"] not in listing and "whsec_" not in listing
    assert client.delete(f"/webhooks/{body['id']}").status_code == 401
    assert client.delete(f"/webhooks/{body['id']}", headers=headers).status_code == 204
    assert client.get(f"/webhooks/{body['id']}").status_code == 404
    assert client.delete(f"/webhooks/{body['id']}", headers=headers).status_code == 404


@pytest.fixture(scope="module")
def registration_sidecar(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.support.kafka import create_topic, unique

    topic = create_topic(kafka_bootstrap, 1)
    sidecar = Sidecar(
        kafka_bootstrap,
        unique("group"),
        topic,
        tmp_path_factory.mktemp("registration"),
        token="t0ken",
        name="registration",
        extra_env={"SIDECAR_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1,localhost"},
    ).start()
    yield sidecar
    sidecar.stop()


def sidecar_webhook_id(sidecar: Sidecar) -> str:
    listed = sidecar.client.get("/webhooks").json()
    assert len(listed) == 1, json.dumps(listed)
    return str(listed[0]["id"])


def test_sequences_strictly_increase_per_receiver(registration_sidecar: Sidecar) -> None:
    """The history endpoint itself: ordered, and `after`/`limit` page through it."""
    events = registration_sidecar.history()
    sequences = [int(e["sequence"]) for e in events]
    assert all(a < b for a, b in pairwise(sequences))
    if len(sequences) > 1:
        page = registration_sidecar.client.get(
            "/events",
            params={"after": sequences[0], "limit": 1},
            headers={"Accept": "application/json"},
        ).json()
        assert [int(e["sequence"]) for e in page] == sequences[1:2]


def test_sidecar_webhooks_is_the_source_of_truth_for_declared_webhooks(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    """Issue 11.4: a declaration dropped or moved goes away after a restart; the API's stay."""
    topic = topic_factory(1)
    secret = new_secret()
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: attempts fail, harmlessly
    dropped = {"url": f"{nowhere}/dropped", "secret": secret, "mode": "async"}
    by_url = {"url": f"{nowhere}/old", "secret": secret, "mode": "async"}
    by_id = {"url": f"{nowhere}/old", "secret": secret, "mode": "async", "id": "app"}
    first = sidecar_factory(group_id, topic, webhooks=[dropped, by_url, by_id], name="first")
    registered = first.client.post("/webhooks", json={"url": f"{nowhere}/api", "mode": "async"})
    assert registered.status_code == 201, registered.text
    assert len(first.client.get("/webhooks").json()) == 4
    assert first.terminate() == 0

    moved = [by_url | {"url": f"{nowhere}/new"}, by_id | {"url": f"{nowhere}/new"}]
    again = sidecar_factory(group_id, topic, webhooks=moved, data_dir=first.data_dir, name="again")
    listed = {w["id"]: w for w in again.client.get("/webhooks").json()}
    declared = {i: w for i, w in listed.items() if w["origin"] == "settings"}
    assert sorted(w["url"] for w in declared.values()) == [f"{nowhere}/new"] * 2
    assert declared["app"]["url"] == f"{nowhere}/new"  # same id, updated in place
    assert registered.json()["id"] in listed  # registered through the API: untouched
    assert len(listed) == 3


def test_a_declared_webhook_disabled_by_410_is_enabled_again_when_its_url_is_fixed(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    """Issue 11.4: `410 Gone` holds for that declaration only, not for its next version."""
    topic = topic_factory(1)
    secret = new_secret()
    with running(secret, lambda e: (410, None, 0.0)) as gone, running(secret) as fixed:
        hook = {"url": gone.url, "secret": secret, "mode": "async", "id": "app"}
        first = sidecar_factory(group_id, topic, webhooks=[hook], name="first")
        wait_until(
            lambda: bool(first.client.get("/webhooks/app").json()["disabled"]), 30, "disabled"
        )
        assert first.terminate() == 0

        unchanged = sidecar_factory(
            group_id, topic, webhooks=[hook], data_dir=first.data_dir, name="unchanged"
        )
        assert unchanged.client.get("/webhooks/app").json()["disabled"]  # still gone
        assert unchanged.terminate() == 0

        repaired = sidecar_factory(
            group_id,
            topic,
            webhooks=[hook | {"url": fixed.url}],
            data_dir=first.data_dir,
            name="repaired",
        )
        webhook = repaired.client.get("/webhooks/app").json()
        assert not webhook["disabled"] and webhook["disabled_reason"] is None
        repaired.wait_stable()
        assert fixed.wait_for(lambda r: len(r) >= 1, 30)
        assert gone.attempts == 1  # one 410 was enough


def test_offsets_handed_back_after_the_barrier_expired_are_rejected_and_logged(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
) -> None:
    """Issue 11.5a: the rebalance went on without the answer; its offsets are not committed,
    and the delivery log says why instead of a bare `delivered`."""
    topic = topic_factory(2)

    def late(event: dict[str, Any]) -> tuple[int, Any, float]:
        if not event["type"].endswith("revoked"):
            return 204, None, 0.0
        offsets = [
            {"topic": p["topic"], "partition": p["partition"], "offset": 50}
            for p in event["data"]["partitions"]
        ]
        return 200, {"offsets": offsets}, 2.0  # past the 1 s revoke timeout

    with app_with_sidecar(sidecar_factory, group_id, topic, late, revoke_timeout_ms=1000) as (
        app,
        sidecar,
    ):
        assert sidecar.client.post("/enforce-rebalance", params={"wait": 30}).status_code == 200
        assert app.wait_for(lambda r: any(x.type.endswith("revoked") for x in r), 30)
        webhook = sidecar_webhook_id(sidecar)

        def outcomes() -> dict[str, dict[str, Any]]:
            log = sidecar.client.get(f"/webhooks/{webhook}/deliveries").json()
            return {d["outcome"]: d for d in log}

        wait_until(lambda: "offsets_rejected" in outcomes(), 30, "offsets_rejected logged")
        logged = outcomes()
        assert "barrier expired" in logged["offsets_rejected"]["error"]
        assert {"barrier_timeout", "delivered"} <= set(logged)
        assert "offsets_committed" not in logged
        assert committed(kafka_bootstrap, group_id, topic, 2) == {}
