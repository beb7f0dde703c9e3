"""The dispatcher against real HTTP receivers and a real SQLite journal, in-process."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from standardwebhooks import Webhook
from structlog.testing import capture_logs

from sidecar.components import build_components
from sidecar.delivery import Dispatcher, RetryPolicy, parse_offsets, retry_after_seconds, sign
from sidecar.handoff import BarrierOutcome
from sidecar.journal import Journal
from sidecar.metrics import Metrics
from sidecar.model import (
    DeliveryOutcome,
    Event,
    EventDraft,
    EventType,
    PartitionOffset,
    Subscription,
    TopicPartition,
)
from sidecar.settings import Settings
from sidecar.subscriptions import InvalidSubscription, new_secret
from sidecar.testkit.events import draft
from sidecar.webhook_http import WebhookClient
from tests.support.outcomes import Outcomes
from tests.support.receiver import running
from tests.support.sidecars import free_port

FAST = RetryPolicy(initial=0.01, maximum=0.05, max_attempts=0, max_age=60)


def revoked(partitions: tuple[int, ...] = (0, 1)) -> EventDraft:
    return draft(EventType.REVOKED, (PartitionOffset("t", p, None) for p in partitions))


def assigned() -> EventDraft:
    return draft(
        partitions=(PartitionOffset("t", 0, 5),),
        assignment=(TopicPartition("t", 0),),
        generation_id=2,
    )


class Rig:
    """A journal, a dispatcher and a registry wired by the daemon's own builder."""

    def __init__(self, data_dir: Path, policy: RetryPolicy = FAST) -> None:
        self.parts = build_components(
            Settings(
                bootstrap_servers="127.0.0.1:9", group_id="g", topics=("t",), data_dir=data_dir
            ),
            retry=policy,  # retries within a test's patience, bounds settings would refuse
        )
        self.journal = self.parts.journal
        self.metrics = self.parts.metrics
        self.dispatcher = self.parts.dispatcher
        self.registry = self.parts.registry
        self.parts.start()

    def append(self, draft: EventDraft) -> Any:
        event = self.journal.append(draft)
        self.dispatcher.announced(event)  # as the handoff does once its barrier is open
        return event

    async def close(self) -> None:
        await self.parts.close()


def run(
    test: Callable[[Rig], Coroutine[Any, Any, None]], data_dir: Path, policy: RetryPolicy = FAST
) -> None:
    async def main() -> None:
        rig = Rig(data_dir, policy)
        try:
            await test(rig)
        finally:
            await rig.close()

    asyncio.run(main())


async def until(check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_signature_is_standard_webhooks() -> None:
    secret = new_secret()
    body = b'{"hello":"world"}'
    stamp = int(time.time())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(secret, "msg_1", stamp, body),
    }
    assert Webhook(secret).verify(body, headers) == {"hello": "world"}
    with pytest.raises(Exception, match=r"(?i)signature"):
        Webhook(new_secret()).verify(body, headers)


def test_in_order_through_failures_and_retry_after(tmp_path: Path) -> None:
    secret = new_secret()
    failures = {"left": 2}

    def flaky(event: dict[str, Any]) -> tuple[int, Any, float]:
        if int(event["sequence"]) == 2 and failures["left"]:
            failures["left"] -= 1
            return 503, {"error": "busy"}, 0.0  # with Retry-After: 0
        return 204, None, 0.0

    async def scenario(rig: Rig) -> None:
        with running(secret, flaky) as receiver:
            sub = rig.registry.create(
                url=receiver.url,
                events=[e.value for e in EventType],
                mode="async",
                secret=secret,
                timeout_ms=2000,
            )
            for _ in range(3):
                rig.append(assigned())
            await until(lambda: len(rig.journal.deliveries(sub.id, 10)) == 5)
            assert [r.sequence for r in receiver.events()] == [1, 2, 3]
            log = rig.journal.deliveries(sub.id, 10)
            assert [d.outcome for d in reversed(log)] == [
                "delivered",
                "failed",
                "failed",
                "delivered",
                "delivered",
            ]
            assert log[2].status_code == 503

    run(scenario, tmp_path)


def test_410_disables_the_subscription(tmp_path: Path) -> None:
    secret = new_secret()

    async def scenario(rig: Rig) -> None:
        with running(secret, lambda e: (410, None, 0.0)) as receiver:
            sub = rig.registry.create(
                url=receiver.url, events=None, mode="async", secret=secret, timeout_ms=2000
            )
            rig.append(assigned())
            rig.append(assigned())
            await until(lambda: rig.journal.subscription(sub.id).disabled_reason is not None)  # type: ignore[union-attr]
            await asyncio.sleep(0.2)
            assert receiver.attempts == 1  # nothing more after the 410

    run(scenario, tmp_path)


def test_gives_up_after_max_attempts_and_moves_on(tmp_path: Path) -> None:
    secret = new_secret()

    def reject_first(event: dict[str, Any]) -> tuple[int, Any, float]:
        return (500, None, 0.0) if int(event["sequence"]) == 1 else (204, None, 0.0)

    async def scenario(rig: Rig) -> None:
        with running(secret, reject_first) as receiver:
            sub = rig.registry.create(
                url=receiver.url, events=None, mode="async", secret=secret, timeout_ms=2000
            )
            rig.append(assigned())
            rig.append(assigned())
            await until(lambda: rig.journal.subscription(sub.id).cursor == 2)  # type: ignore[union-attr]
            assert [r.sequence for r in receiver.events()] == [2]
            outcomes = [d.outcome for d in rig.journal.deliveries(sub.id, 10)]
            assert outcomes.count(DeliveryOutcome.FAILED) == 3
            assert "gave_up" in outcomes

    run(scenario, tmp_path, RetryPolicy(0.01, 0.02, max_attempts=3, max_age=60))


def test_redirects_are_not_followed(tmp_path: Path) -> None:
    secret = new_secret()

    async def scenario(rig: Rig) -> None:
        with (
            running(secret) as target,
            running(secret, lambda e: (307, target.url, 0.0)) as redirecting,
        ):
            sub = rig.registry.create(
                url=redirecting.url, events=None, mode="async", secret=secret, timeout_ms=2000
            )
            rig.append(assigned())
            await until(
                lambda: "gave_up" in {d.outcome for d in rig.journal.deliveries(sub.id, 10)}
            )
            assert target.attempts == 0
            assert {d.status_code for d in rig.journal.deliveries(sub.id, 10)} == {307}

    run(scenario, tmp_path, RetryPolicy(0.01, 0.02, max_attempts=2, max_age=60))


def test_barrier_waits_for_blocking_subscribers_and_hands_back_offsets(tmp_path: Path) -> None:
    secret = new_secret()

    def hand_back(event: dict[str, Any]) -> tuple[int, Any, float]:
        return 200, {"offsets": [{"topic": "t", "partition": 1, "offset": 9}]}, 0.1

    async def scenario(rig: Rig) -> None:
        with running(secret, hand_back) as app, running(secret) as other:
            rig.registry.create(
                url=app.url, events=None, mode="blocking", secret=secret, timeout_ms=2000
            )
            rig.registry.create(
                url=other.url, events=None, mode="async", secret=secret, timeout_ms=2000
            )
            outcomes = Outcomes()
            event = rig.append(revoked())
            rig.dispatcher.open_barrier(event, outcomes)
            await until(lambda: bool(outcomes))
            assert outcomes[0].offsets == (PartitionOffset("t", 1, 9),)
            assert len(outcomes[0].acknowledged) == 1  # only the blocking one gates
            assert not outcomes[0].timed_out

    run(scenario, tmp_path)


def _hand_back(event: dict[str, Any]) -> tuple[int, Any, float]:
    """A blocking subscriber that answers at once, handing back t[1] at offset 9."""
    return 200, {"offsets": [{"topic": "t", "partition": 1, "offset": 9}]}, 0.0


@contextlib.contextmanager
def _abandoned_barrier(
    rig: Rig, other_delay: float
) -> Iterator[tuple[Subscription, Subscription, Event]]:
    """Two blocking subscribers, one handing offsets back at once, the other answering
    after ``other_delay`` s; a revoked event whose barrier's ``done`` refuses every
    outcome: the member thread stopped waiting (its loop was too busy to expire it)."""
    secret = new_secret()
    with (
        running(secret, _hand_back) as app,
        running(secret, lambda e: (204, None, other_delay)) as other,
    ):
        handing_back = rig.registry.create(
            url=app.url, events=None, mode="blocking", secret=secret, timeout_ms=2000
        )
        answering_later = rig.registry.create(
            url=other.url, events=None, mode="blocking", secret=secret, timeout_ms=9000
        )
        event = rig.append(revoked())
        rig.dispatcher.open_barrier(event, lambda outcome: False)
        yield handing_back, answering_later, event


def test_offsets_answered_in_time_are_rejected_when_the_member_stopped_waiting(
    tmp_path: Path,
) -> None:
    """Two blocking subscribers: one hands offsets back in time, the other never answers,
    and the loop is too busy to expire the barrier before the member thread stops waiting
    for it (``done`` refuses the outcome). The offsets the first one handed back went
    nowhere, recorded as delivered and nothing more. Now they are recorded as rejected."""

    async def scenario(rig: Rig) -> None:
        with _abandoned_barrier(rig, other_delay=5.0) as (answering, _, event):
            await until(lambda: len(rig.journal.deliveries(answering.id, 10)) == 1)
            expired = rig.dispatcher.barrier_expired(event)
            assert expired.offsets == (PartitionOffset("t", 1, 9),)
            log = {d.outcome: d for d in rig.journal.deliveries(answering.id, 10)}
            assert set(log) == {"delivered", "offsets_rejected"}, log
            assert "member stopped waiting" in (log[DeliveryOutcome.OFFSETS_REJECTED].error or "")

    run(scenario, tmp_path)


def test_offsets_answered_in_time_are_rejected_when_the_last_answer_finds_nobody_waiting(
    tmp_path: Path,
) -> None:
    """The same, but the barrier closes by its last answer, not by its expiry: that answer
    came after the member thread stopped waiting. Its own courier recorded the refusal;
    the other subscriber's handed-back offsets were still 'delivered' and nothing more."""

    async def scenario(rig: Rig) -> None:
        with _abandoned_barrier(rig, other_delay=0.5) as (early, last, _):
            await until(lambda: len(rig.journal.deliveries(last.id, 10)) == 1)
            log = {d.outcome: d for d in rig.journal.deliveries(early.id, 10)}
            assert set(log) == {"delivered", "offsets_rejected"}, log
            assert [d.outcome for d in rig.journal.deliveries(last.id, 10)] == ["delivered"]

    run(scenario, tmp_path)


def test_a_deleted_webhook_gets_no_rejection_record_from_its_barrier(tmp_path: Path) -> None:
    """A subscriber that handed offsets back and was deleted before its abandoned barrier
    expired: the rejection record brought its metric series back, for good."""

    async def scenario(rig: Rig) -> None:
        with _abandoned_barrier(rig, other_delay=5.0) as (gone, _, event):
            await until(lambda: len(rig.journal.deliveries(gone.id, 10)) == 1)
            assert rig.registry.delete(gone.id)
            await asyncio.sleep(0.1)  # its courier stopped, its series went
            rig.dispatcher.barrier_expired(event)
            assert rig.journal.deliveries(gone.id, 10) == []
            text = generate_latest(rig.metrics.registry).decode()
            assert f'webhook="{gone.id}"' not in text

    run(scenario, tmp_path)


def test_barrier_timeout_is_recorded_and_delivery_goes_on(tmp_path: Path) -> None:
    secret = new_secret()

    async def scenario(rig: Rig) -> None:
        with running(secret, lambda e: (204, None, 0.5)) as slow:
            sub = rig.registry.create(
                url=slow.url, events=None, mode="blocking", secret=secret, timeout_ms=2000
            )
            outcomes = Outcomes()
            event = rig.append(revoked())
            rig.dispatcher.open_barrier(event, outcomes)
            expired = rig.dispatcher.barrier_expired(event)
            assert expired.timed_out and expired.waiting == (sub.id,)
            await until(lambda: len(rig.journal.deliveries(sub.id, 10)) == 2)
            outcomes_logged = [d.outcome for d in rig.journal.deliveries(sub.id, 10)]
            assert outcomes_logged == ["delivered", "barrier_timeout"]
            assert len(slow.events()) == 1
            assert outcomes == [expired]  # the expiry's, once: the late answer adds none

    run(scenario, tmp_path)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"offsets": {}}', "must be a list"),
        (b'{"offsets": [{"topic": "t", "partition": 0}]}', "offset must be an integer"),
        (b'{"offsets": [{"topic": "t", "partition": 0, "offset": -1}]}', ">= 0"),
        (b'{"offsets": [{"topic": "t", "partition": 0, "offset": true}]}', "integer"),
        # True == 1: it named partition 1 (owned), and would have committed it.
        (b'{"offsets": [{"topic": "t", "partition": true, "offset": 5}]}', "partition >= 0"),
        # Past a signed 64-bit offset: TopicPartition raised OverflowError in the callback.
        (b'{"offsets": [{"topic": "t", "partition": 0, "offset": %d}]}' % 2**64, "at most"),
        # A float past 2**53 is not exact: 1e17 would commit a neighbouring offset.
        (b'{"offsets": [{"topic": "t", "partition": 0, "offset": 1e17}]}', "integer"),
        (b'{"offsets": [{"topic": "t", "partition": 1000001, "offset": 1}]}', "at most 1000000"),
        (b'{"offsets": [{"topic": "t", "partition": 5, "offset": 1}]}', "not being revoked"),
        (b'{"offsets": [{"topic": "t", "partition": 0, "offset": 1, "x": 1}]}', "must be"),
        (b'{"offsets": ["t"]}', "must be"),
    ],
)
def test_bad_offsets_are_rejected(body: bytes, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_offsets(body, {TopicPartition("t", 0), TopicPartition("t", 1)})


def test_plain_acknowledgements_hand_back_nothing() -> None:
    owned = {TopicPartition("t", 0)}
    assert parse_offsets(b"ok", owned) == ()
    assert parse_offsets(b'{"status": "done"}', owned) == ()
    assert parse_offsets(b'{"offsets": [{"topic": "t", "partition": 0, "offset": 3}]}', owned) == (
        PartitionOffset("t", 0, 3),
    )
    # Whole numbers as POST /commit takes them: 3.0 is 3 (JSON Schema's integer).
    whole = b'{"offsets": [{"topic": "t", "partition": 0.0, "offset": 3.0}]}'
    assert parse_offsets(whole, owned) == (PartitionOffset("t", 0, 3),)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://x/y", "scheme"),
        ("http://u:p@x/y", "credentials"),
        ("http:///nohost", "no host"),
        ("http://x/y#frag", "fragment"),
        ("http://x:99999/", "not a valid URL"),
        # A name the resolver's IDNA codec refuses: accepted, then its courier crashed
        # on every attempt ("restarting it"), forever, and nothing was logged as delivery.
        ("http://" + "a" * 64 + ".localhost/", "labels of 1 to 63 characters"),
        ("http://a..localhost/", "labels of 1 to 63 characters"),
        ("http://" + "a." * 127 + "b/", "253 in all"),
    ],
)
def test_registry_rejects_bad_urls(tmp_path: Path, url: str, problem: str) -> None:
    async def scenario(rig: Rig) -> None:
        with pytest.raises(InvalidSubscription, match=problem):
            rig.registry.create(url=url, events=None, mode="async", secret=None, timeout_ms=100)
        assert rig.registry.list() == []

    run(scenario, tmp_path)


def test_host_names_of_the_longest_legal_labels_are_accepted(tmp_path: Path) -> None:
    async def scenario(rig: Rig) -> None:
        for url in ("http://" + "a" * 63 + ".localhost/", "http://localhost./x"):
            rig.registry.create(url=url, events=None, mode="async", secret=None, timeout_ms=100)
        assert len(rig.registry.list()) == 2

    run(scenario, tmp_path)


def test_offsets_answered_after_the_barrier_expired_are_rejected_not_lost(tmp_path: Path) -> None:
    """Issue 11.5a: a late 2xx with offsets is delivered, but its offsets go nowhere: say so."""
    secret = new_secret()

    def late_hand_back(event: dict[str, Any]) -> tuple[int, Any, float]:
        return 200, {"offsets": [{"topic": "t", "partition": 1, "offset": 9}]}, 0.3

    async def scenario(rig: Rig) -> None:
        with running(secret, late_hand_back) as app, capture_logs() as logs:
            sub = rig.registry.create(
                url=app.url, events=None, mode="blocking", secret=secret, timeout_ms=2000
            )
            event = rig.append(revoked())
            rig.dispatcher.open_barrier(event, lambda outcome: True)
            assert rig.dispatcher.barrier_expired(event).waiting == (sub.id,)
            await until(lambda: rig.journal.subscription(sub.id).cursor == event.sequence)  # type: ignore[union-attr]
            log = {d.outcome: d for d in rig.journal.deliveries(sub.id, 10)}
            assert set(log) == {"barrier_timeout", "delivered", "offsets_rejected"}
            assert log[DeliveryOutcome.OFFSETS_REJECTED].status_code == 200
            assert "barrier expired" in (log[DeliveryOutcome.OFFSETS_REJECTED].error or "")
            assert delivered_total(rig, sub.id, "offsets_rejected") == 1
            assert any(
                entry["event"] == "offsets in revoke acknowledgement rejected"
                and "barrier expired" in entry["error"]
                for entry in logs
            )

    run(scenario, tmp_path)


def delivered_total(rig: Rig, sub_id: str, outcome: str) -> float:
    value = rig.metrics.registry.get_sample_value(
        "rebalance_sidecar_webhook_deliveries_total", {"webhook": sub_id, "outcome": outcome}
    )
    return value or 0.0


@pytest.mark.parametrize("retry_after", ["²", "٣", "1.5", "-3", "soon", "Mon, 99 Foo 2026 GMT"])
def test_a_retry_after_that_does_not_parse_is_ignored(tmp_path: Path, retry_after: str) -> None:
    """Issue 11.8: an odd header is no reason to stop (before, '²' crashed the courier)."""
    secret = new_secret()
    busy = {"left": 1}

    def busy_once(event: dict[str, Any]) -> tuple[int, Any, float]:
        if busy["left"]:
            busy["left"] -= 1
            return 503, None, 0.0
        return 204, None, 0.0

    async def scenario(rig: Rig) -> None:
        with (
            running(secret, busy_once, retry_after=retry_after) as app,
            capture_logs() as logs,
        ):
            sub = rig.registry.create(
                url=app.url, events=None, mode="async", secret=secret, timeout_ms=2000
            )
            rig.append(assigned())
            await until(lambda: rig.journal.subscription(sub.id).cursor == 1)  # type: ignore[union-attr]
            log = list(reversed(rig.journal.deliveries(sub.id, 10)))
            assert [(d.outcome, d.status_code) for d in log] == [
                ("failed", 503),
                ("delivered", 204),
            ]
            assert not [entry for entry in logs if entry["log_level"] == "error"]

    run(scenario, tmp_path)


@pytest.mark.parametrize("retry_after", ["0", "Thu, 01 Jan 1970 00:00:00 GMT"])
def test_retry_after_now_or_past_still_backs_off(tmp_path: Path, retry_after: str) -> None:
    """Issue 11.8: `Retry-After: 0` or a past date waits at least the initial backoff."""
    secret = new_secret()
    policy = RetryPolicy(initial=0.2, maximum=0.5, max_attempts=4, max_age=60)

    async def scenario(rig: Rig) -> None:
        with running(secret, lambda e: (503, None, 0.0), retry_after=retry_after) as app:
            sub = rig.registry.create(
                url=app.url, events=None, mode="async", secret=secret, timeout_ms=2000
            )
            rig.append(assigned())
            await until(lambda: rig.journal.subscription(sub.id).cursor == 1)  # type: ignore[union-attr]
            failed = [
                d.at for d in reversed(rig.journal.deliveries(sub.id, 10)) if d.outcome == "failed"
            ]
            assert len(failed) == 4
            # A lower bound, not a speed: each retry waited for the floor first.
            assert all(b - a >= policy.initial for a, b in pairwise(failed))

    run(scenario, tmp_path, policy)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("0", 0.0),
        (" 120 ", 120.0),
        ("Thu, 01 Jan 1970 00:01:40 GMT", 100.0 - 1000.0),
        ("Thursday, 01-Jan-70 00:01:40 GMT", 100.0 - 1000.0),
        ("Thu Jan  1 00:01:40 1970", 100.0 - 1000.0),
        ("²", None),
        ("٣", None),
        ("+5", None),
        ("5 s", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_is_parsed_per_rfc_9110(value: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(value, now=1000.0) == seconds


def test_retry_after_is_floored_at_the_initial_delay_and_capped() -> None:
    policy = RetryPolicy(initial=0.5, maximum=30.0, max_attempts=0, max_age=60)
    assert policy.delay(1, retry_after=0.0) == 0.5
    assert policy.delay(1, retry_after=-900.0) == 0.5
    assert policy.delay(1, retry_after=7.0) == 7.0
    assert policy.delay(1, retry_after=float("inf")) == 30.0


def test_a_filtered_subscription_passes_over_what_it_did_not_subscribe_to(
    tmp_path: Path,
) -> None:
    """Issue 11.9: events of other types must not pin the cursor (pruning, pending count)."""
    secret = new_secret()

    async def scenario(rig: Rig) -> None:
        with running(secret) as app:
            sub = rig.registry.create(
                url=app.url,
                events=[EventType.ASSIGNED.value],
                mode="async",
                secret=secret,
                timeout_ms=2000,
            )
            rig.append(assigned())
            for _ in range(3):
                rig.append(revoked())
            await until(lambda: rig.journal.subscription(sub.id).cursor == 4)  # type: ignore[union-attr]
            assert [r.sequence for r in app.events()] == [1]
            assert rig.journal.pending_events() == 0
            assert rig.journal.prune(keep_events=0, max_age_seconds=3600) == 4
            assert rig.journal.events_after(0, 10) == []

    run(scenario, tmp_path)


def test_barriers_follow_registrations_deletions_and_410s(tmp_path: Path) -> None:
    """The dispatcher's in-memory subscriptions stay in step with the registry (17.1)."""
    secret = new_secret()

    async def scenario(rig: Rig) -> None:
        with running(secret, lambda e: (410, None, 0.0)) as gone:
            disabled = rig.registry.create(
                url=gone.url, events=None, mode="blocking", secret=secret, timeout_ms=2000
            )
            rig.append(assigned())
            await until(lambda: rig.journal.subscription(disabled.id).disabled_reason is not None)  # type: ignore[union-attr]
            outcomes = Outcomes()
            rig.dispatcher.open_barrier(rig.append(revoked()), outcomes)
            assert outcomes == [BarrierOutcome()]  # nobody left to wait for

        down = rig.registry.create(
            url=f"http://127.0.0.1:{free_port()}/hook",  # nothing listens: it never answers
            events=None,
            mode="blocking",
            secret=secret,
            timeout_ms=2000,
        )
        rig.dispatcher.open_barrier(rig.append(revoked()), outcomes)
        assert len(outcomes) == 1  # waiting for the new subscription
        assert rig.registry.delete(down.id)
        assert outcomes[1].gave_up == (down.id,)

    run(scenario, tmp_path)


def test_gives_up_by_the_events_age(tmp_path: Path) -> None:
    """The age is read lazily, at the first failure (17.1): it still ends the retries."""
    secret = new_secret()

    async def scenario(rig: Rig) -> None:
        with running(secret, lambda e: (500, None, 0.0)) as app:
            sub = rig.registry.create(
                url=app.url, events=None, mode="async", secret=secret, timeout_ms=2000
            )
            rig.append(assigned())
            await until(lambda: rig.journal.subscription(sub.id).cursor == 1)  # type: ignore[union-attr]
            outcomes = [d.outcome for d in rig.journal.deliveries(sub.id, 10)]
            assert outcomes == [DeliveryOutcome.GAVE_UP, DeliveryOutcome.FAILED]

    run(scenario, tmp_path, RetryPolicy(0.01, 0.02, max_attempts=0, max_age=0.0))


def test_a_courier_replaced_before_it_ever_ran_still_closes_its_http_client(
    tmp_path: Path,
) -> None:
    """At start-up a declared webhook can be added twice in one loop tick (settings, then
    the journal's copy): the first courier is cancelled before its task ever ran, so its
    ``finally`` never did, and its HTTP client (a connection pool) leaked."""

    async def main() -> None:
        journal = Journal(tmp_path, durable=False)
        clients: list[WebhookClient] = []

        def client() -> WebhookClient:
            clients.append(WebhookClient())
            return clients[-1]

        dispatcher = Dispatcher(journal, Metrics(CollectorRegistry()), FAST, client_factory=client)
        sub = Subscription(
            "app", "http://127.0.0.1:9/hook", (EventType.REVOKED,), "blocking",
            new_secret(), 1000, "settings", 0.0, 0,
        )  # fmt: skip
        try:
            dispatcher.add(sub)
            dispatcher.add(sub)  # the same tick: the first courier never ran
            await until(lambda: clients[0].is_closed, timeout=5)
            assert not clients[1].is_closed  # the courier in service keeps its own
        finally:
            await dispatcher.close()
            journal.close()
        assert all(c.is_closed for c in clients)

    asyncio.run(main())


def test_a_courier_woken_early_does_not_deliver_an_event_whose_barrier_is_not_open(
    tmp_path: Path,
) -> None:
    """The member journals a ``revoked``, then opens its barrier, then announces it. A
    courier woken meanwhile for another reason (here: its timer to pass over an earlier
    event it does not take) read the journal and delivered the event first; the
    application's handed-back offsets found no barrier (rejected), and the barrier then
    had nobody to wait for: nothing was committed."""
    offsets = {"offsets": [{"topic": "t", "partition": 0, "offset": 41}]}

    async def main() -> None:
        journal = Journal(tmp_path, durable=False)
        secret = new_secret()
        with running(secret, lambda event: (200, offsets, 0.0)) as app:
            sub = Subscription(
                "app", app.url, (EventType.REVOKED,), "blocking", secret, 2000, "settings",
                0.0, 0,
            )  # fmt: skip
            journal.save_subscription(sub)
            dispatcher = Dispatcher(
                journal, Metrics(CollectorRegistry()), FAST, pass_over_after=0.2
            )
            dispatcher.start()
            await asyncio.sleep(0.05)  # the courier has read the (empty) journal and waits
            dispatcher.announced(journal.append(assigned()))  # not wanted: a timer, no read
            event = journal.append(revoked((0,)))  # by the member thread; not announced yet
            # The timer fires: the courier reads both events and passes over the first.
            await until(lambda: journal.subscription("app").cursor == 1)  # type: ignore[union-attr]
            await asyncio.sleep(0.2)
            assert app.received == []  # held back until announced
            outcome = Outcomes()
            dispatcher.open_barrier(event, outcome)
            dispatcher.announced(event)
            await until(lambda: bool(outcome), timeout=10)
            await dispatcher.close()
        journal.close()
        assert outcome[0].offsets == (PartitionOffset("t", 0, 41),)
        assert outcome[0].acknowledged == ("app",) and not outcome[0].timed_out

    asyncio.run(main())


class _CountingJournal(Journal):
    """The real journal, counting what the couriers do with it."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, durable=False)
        self.reads = 0
        self.passes = 0

    def events_after(
        self, sequence: int, limit: int, types: tuple[EventType, ...] | None = None
    ) -> list[Event]:
        self.reads += 1
        return super().events_after(sequence, limit, types)

    def pass_over(self, sub_id: str, sequence: int) -> None:
        self.passes += 1
        super().pass_over(sub_id, sequence)


@pytest.mark.parametrize("later", [3600.0, 0.05])
def test_an_event_a_subscription_does_not_want_costs_its_courier_nothing_at_once(
    tmp_path: Path, later: float
) -> None:
    """An enforce's ``requested`` is followed at once by its ``revoked``. Each courier that
    does not take ``requested`` read the journal and wrote its cursor for it right then:
    per subscriber, loop work (and the GIL) while the member thread journaled the revoke.
    Now it passes over such events later, or with the next event it wants."""
    secret = new_secret()

    async def main() -> None:
        journal = _CountingJournal(tmp_path)
        with running(secret) as app:
            sub = Subscription(
                "app", app.url, (EventType.ASSIGNED,), "async", secret, 2000, "settings",
                0.0, 0,
            )  # fmt: skip
            journal.save_subscription(sub)
            dispatcher = Dispatcher(
                journal, Metrics(CollectorRegistry()), FAST, pass_over_after=later
            )
            dispatcher.start()
            await until(lambda: journal.reads == 1)  # the courier read the empty journal
            for _ in range(3):  # back to back: no timer can run between them
                dispatcher.announced(journal.append(revoked()))
            if later > 60:  # only an event it wants moves it now
                await asyncio.sleep(0.1)  # the loop ran; a woken courier would have read
                assert (journal.reads, journal.passes) == (1, 0)
                assert journal.subscription("app").cursor == 0  # type: ignore[union-attr]
                dispatcher.announced(journal.append(assigned()))
                await until(lambda: journal.subscription("app").cursor == 4)  # type: ignore[union-attr]
                assert [r.sequence for r in app.events()] == [4]
            else:  # nothing it wants comes: it passes over them on its own
                await until(lambda: journal.subscription("app").cursor == 3)  # type: ignore[union-attr]
                assert app.events() == [] and journal.passes == 1
            assert journal.pending_events() == 0
            reads = journal.reads
            # An event it wants came after an unwanted one: its read passed over both, and
            # the pass-over timer, when it fires, finds nothing left and wakes nobody.
            dispatcher.announced(journal.append(revoked()))
            dispatcher.announced(journal.append(assigned()))
            await until(lambda: len(app.events()) == 2 - (later < 60))
            await asyncio.sleep(min(later, 1.0) + 0.2)
            assert journal.reads == reads + 1
            await dispatcher.close()
        journal.close()

    asyncio.run(main())


def test_a_deleted_webhook_leaves_no_metric_series(tmp_path: Path) -> None:
    """An application that registers a webhook each time it starts (and deletes the old
    one) grew the sidecar's /metrics by a delivery counter and a 14-bucket histogram per
    registration, for the sidecar's lifetime: the series of deleted webhooks stayed."""
    secret = new_secret()

    def series(rig: Rig, webhook: str) -> list[str]:
        text = generate_latest(rig.metrics.registry).decode()
        return [line for line in text.splitlines() if f'webhook="{webhook}"' in line]

    async def scenario(rig: Rig) -> None:
        with running(secret) as receiver:
            kept, gone = (
                rig.registry.create(
                    url=receiver.url, events=None, mode="async", secret=secret, timeout_ms=2000
                )
                for _ in range(2)
            )
            rig.append(assigned())
            await until(
                lambda: all(len(rig.journal.deliveries(s.id, 10)) == 1 for s in (kept, gone))
            )
            assert series(rig, gone.id) and series(rig, kept.id)
            assert rig.registry.delete(gone.id)
            await until(lambda: not series(rig, gone.id))
            assert series(rig, kept.id), "the other webhook's series went too"
            rig.append(assigned())  # the kept one goes on counting
            await until(lambda: len(rig.journal.deliveries(kept.id, 10)) == 2)
            assert any("delivered" in line and " 2.0" in line for line in series(rig, kept.id))
            assert not series(rig, gone.id)

    run(scenario, tmp_path)


def test_forgetting_a_webhook_never_seen_by_a_series_is_no_error() -> None:
    """prometheus-client before 0.22 (the floor allows 0.20) raises KeyError when a child
    that was never observed is removed, and no webhook has a series for every outcome:
    each delete failed on the loop (a 410-disabled declared webhook stopped the start)."""
    from sidecar import metrics

    class Old:
        def remove(self, *labels: str) -> None:
            raise KeyError(labels)

    metrics._remove(Old(), "wh_1", "failed")  # type: ignore[arg-type]
    Metrics(CollectorRegistry()).forget_webhook("wh_never_delivered")
