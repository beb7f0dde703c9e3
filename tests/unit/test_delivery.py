"""The dispatcher against real HTTP receivers and a real SQLite journal, in-process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook

from sidecar.components import build_components
from sidecar.delivery import RetryPolicy, parse_offsets, sign
from sidecar.handoff import BarrierOutcome
from sidecar.model import EventDraft, EventType, PartitionOffset, TopicPartition
from sidecar.settings import Settings
from sidecar.subscriptions import InvalidSubscription, new_secret
from tests.support.receiver import running

FAST = RetryPolicy(initial=0.01, maximum=0.05, max_attempts=0, max_age=60)


def revoked(partitions: tuple[int, ...] = (0, 1)) -> EventDraft:
    return EventDraft(
        type=EventType.REVOKED,
        group_id="g",
        member_id="m",
        group_instance_id=None,
        generation_id=1,
        protocol="eager",
        partitions=tuple(PartitionOffset("t", p, None) for p in partitions),
        assignment=(),
        reason=None,
    )


def assigned() -> EventDraft:
    return EventDraft(
        type=EventType.ASSIGNED,
        group_id="g",
        member_id="m",
        group_instance_id=None,
        generation_id=2,
        protocol="eager",
        partitions=(PartitionOffset("t", 0, 5),),
        assignment=(TopicPartition("t", 0),),
        reason=None,
    )


class Rig:
    """A journal, a dispatcher and a registry wired by the daemon's own builder."""

    def __init__(self, data_dir: Path) -> None:
        self.parts = build_components(
            Settings(
                bootstrap_servers="127.0.0.1:9",
                group_id="g",
                topics=("t",),
                data_dir=data_dir,
                # FAST: retries within a test's patience
                webhook_backoff_initial_ms=int(FAST.initial * 1000),
                webhook_backoff_max_ms=int(FAST.maximum * 1000),
                webhook_max_age_ms=int(FAST.max_age * 1000),
            )
        )
        self.journal = self.parts.journal
        self.metrics = self.parts.metrics
        self.dispatcher = self.parts.dispatcher
        self.registry = self.parts.registry
        self.parts.start()

    def append(self, draft: EventDraft) -> Any:
        event = self.journal.append(draft)
        self.dispatcher.wake()
        return event

    async def close(self) -> None:
        await self.parts.close()


def run(test: Callable[[Rig], Coroutine[Any, Any, None]], data_dir: Path) -> None:
    async def main() -> None:
        rig = Rig(data_dir)
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
        rig.dispatcher._policy = RetryPolicy(0.01, 0.02, max_attempts=3, max_age=60)
        with running(secret, reject_first) as receiver:
            sub = rig.registry.create(
                url=receiver.url, events=None, mode="async", secret=secret, timeout_ms=2000
            )
            rig.append(assigned())
            rig.append(assigned())
            await until(lambda: rig.journal.subscription(sub.id).cursor == 2)  # type: ignore[union-attr]
            assert [r.sequence for r in receiver.events()] == [2]
            outcomes = [d.outcome for d in rig.journal.deliveries(sub.id, 10)]
            assert outcomes.count("failed") == 3
            assert "gave_up" in outcomes

    run(scenario, tmp_path)


def test_redirects_are_not_followed(tmp_path: Path) -> None:
    secret = new_secret()

    async def scenario(rig: Rig) -> None:
        with (
            running(secret) as target,
            running(secret, lambda e: (307, target.url, 0.0)) as redirecting,
        ):
            rig.dispatcher._policy = RetryPolicy(0.01, 0.02, max_attempts=2, max_age=60)
            sub = rig.registry.create(
                url=redirecting.url, events=None, mode="async", secret=secret, timeout_ms=2000
            )
            rig.append(assigned())
            await until(
                lambda: "gave_up" in {d.outcome for d in rig.journal.deliveries(sub.id, 10)}
            )
            assert target.attempts == 0
            assert {d.status_code for d in rig.journal.deliveries(sub.id, 10)} == {307}

    run(scenario, tmp_path)


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
            outcomes: list[BarrierOutcome] = []
            event = rig.append(revoked())
            rig.dispatcher.open_barrier(event, outcomes.append)
            await until(lambda: bool(outcomes))
            assert outcomes[0].offsets == (PartitionOffset("t", 1, 9),)
            assert len(outcomes[0].acknowledged) == 1  # only the blocking one gates
            assert not outcomes[0].timed_out

    run(scenario, tmp_path)


def test_barrier_timeout_is_recorded_and_delivery_goes_on(tmp_path: Path) -> None:
    secret = new_secret()

    async def scenario(rig: Rig) -> None:
        with running(secret, lambda e: (204, None, 0.5)) as slow:
            sub = rig.registry.create(
                url=slow.url, events=None, mode="blocking", secret=secret, timeout_ms=2000
            )
            outcomes: list[BarrierOutcome] = []
            event = rig.append(revoked())
            rig.dispatcher.open_barrier(event, outcomes.append)
            expired = rig.dispatcher.barrier_expired(event)
            assert expired.timed_out and expired.waiting == (sub.id,)
            await until(lambda: len(rig.journal.deliveries(sub.id, 10)) == 2)
            outcomes_logged = [d.outcome for d in rig.journal.deliveries(sub.id, 10)]
            assert outcomes_logged == ["delivered", "barrier_timeout"]
            assert len(slow.events()) == 1
            assert outcomes == []  # the consumer thread stopped waiting already

    run(scenario, tmp_path)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"offsets": {}}', "must be a list"),
        (b'{"offsets": [{"topic": "t", "partition": 0}]}', "offset must be an integer"),
        (b'{"offsets": [{"topic": "t", "partition": 0, "offset": -1}]}', ">= 0"),
        (b'{"offsets": [{"topic": "t", "partition": 0, "offset": true}]}', "integer"),
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


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://x/y", "scheme"),
        ("http://u:p@x/y", "credentials"),
        ("http:///nohost", "no host"),
        ("http://x/y#frag", "fragment"),
        ("http://x:99999/", "not a valid URL"),
    ],
)
def test_registry_rejects_bad_urls(tmp_path: Path, url: str, problem: str) -> None:
    async def scenario(rig: Rig) -> None:
        with pytest.raises(InvalidSubscription, match=problem):
            rig.registry.create(url=url, events=None, mode="async", secret=None, timeout_ms=100)
        assert rig.registry.list() == []

    run(scenario, tmp_path)
