"""Section 1: event latency, from our callback's entry to the subscriber's receipt.

The product's path, in process: a "member" thread does what ``GroupMember._on_taken``
does (an ``EventDraft`` stamped at creation, the durable journal append, publish,
``Handoff.announce``, ``Handoff.await_barrier``); the loop runs the real ``Dispatcher``
with blocking subscriptions created through the real ``Registry``, wired by the daemon's
own loop side. The webhooks go to a receiver in another process that stamps each receipt
with ``time.time()``; latency = receipt - the event's ``time`` (same host, same clock).

Baseline: a plain ``httpx.AsyncClient`` POST of the same body (headers signed beforehand)
to the same receiver, one per subscriber, concurrently for 10 and 50. Baseline and ours
alternate in chunks so drift on a busy machine hits both alike.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry

from bench.common import Context, SectionResult, Table, Target, compare, ms, percentile, ratio
from bench.receiver import ReceiverProcess, Record
from sidecar.components import Fanout  # the daemon's own wiring, so we measure its path
from sidecar.delivery import Dispatcher, RetryPolicy, sign
from sidecar.feed import Feed
from sidecar.handoff import Handoff
from sidecar.journal import Journal
from sidecar.metrics import Metrics
from sidecar.model import (
    Assignment,
    EventDraft,
    EventType,
    MemberState,
    PartitionOffset,
    TopicPartition,
)
from sidecar.subscriptions import Registry, new_secret

SUBSCRIBERS = (1, 10, 50)
CHUNK = 50
WARMUP = 20  # events (and baseline POSTs) not counted, at most
GROUP = "bench-latency"
MEMBER = "rdkafka-00000000-bench"
TAKEN = tuple(PartitionOffset("orders", p, None) for p in range(0, 24, 3))  # 8 of 24


@dataclass(frozen=True)
class Stamp:
    id: str
    started: float  # the event's time (ours) or just before the POST (baseline)
    settled: float  # barrier released (ours) or every POST answered (baseline)
    ok: bool
    appended: float = 0.0  # ours: the durable journal append returned


@dataclass
class Measured:
    subscribers: int
    events: int
    ours: list[float]
    ours_after_append: list[float]  # receipt - append returned: the dispatch alone
    appends: list[float]
    ours_held: list[float]
    base: list[float]
    base_held: list[float]
    missing: int
    failed: int


def events_for(subscribers: int, events: int) -> int:
    return max(5, events // {1: 1, 10: 5, 50: 15}.get(subscribers, subscribers))


def run(ctx: Context) -> SectionResult:
    result = SectionResult(
        key="latency",
        title="1. Event latency: callback entry to webhook receipt",
        method=(__doc__ or "").split("\n", 2)[2].strip(),
    )
    receiver = ReceiverProcess(new_secret())
    measured: list[Measured] = []
    try:
        for n in SUBSCRIBERS:
            events = events_for(n, ctx.sizes.latency_events)
            ctx.say(f"  {n} blocking subscriber(s), {events} revoked events ...")
            m = asyncio.run(_measure(ctx, receiver, n, events))
            measured.append(m)
            for q in (50, 95, 99):
                a, b = percentile(m.ours, q), percentile(m.base, q)
                ctx.say(compare(f"p{q} latency, {n} sub", ms(a), ms(b), ratio(a, b), ms(a - b)))
            a, b = percentile(m.ours_after_append, 99), percentile(m.base, 99)
            ctx.say(compare(f"p99 append → receipt, {n} sub", ms(a), ms(b), ratio(a, b), ms(a - b)))
            a, b = percentile(m.ours_held, 99), percentile(m.base_held, 99)
            ctx.say(compare(f"p99 callback held, {n} sub", ms(a), ms(b), ratio(a, b)))
    finally:
        receiver.stop()
    table = Table(
        [
            "subscribers",
            "deliveries",
            "p50",
            "p95",
            "p99",
            "baseline p50",
            "baseline p95",
            "baseline p99",
            "p99 ours - baseline",
            "p99 ratio",
            "of which journal append p50 / p99",
            "append → receipt p50 / p99",
            "callback held p50 / p99",
            "baseline all answered p50 / p99",
        ],
        caption="Latency of each delivery (event x subscriber). 'Journal append': the "
        "durable SQLite append (fsync) inside the callback, per event; 'append → receipt': "
        "the rest of our path (handoff, dispatcher, signing, HTTP). 'Callback held': entry to "
        "the barrier's release, i.e. how long the revoke callback held the group.",
    )
    for m in measured:
        p99, b99 = percentile(m.ours, 99), percentile(m.base, 99)
        table.rows.append(
            [
                str(m.subscribers),
                str(len(m.ours)),
                ms(percentile(m.ours, 50)),
                ms(percentile(m.ours, 95)),
                ms(p99),
                ms(percentile(m.base, 50)),
                ms(percentile(m.base, 95)),
                ms(b99),
                ms(p99 - b99),
                ratio(p99, b99),
                f"{ms(percentile(m.appends, 50))} / {ms(percentile(m.appends, 99))}",
                f"{ms(percentile(m.ours_after_append, 50))} / "
                f"{ms(percentile(m.ours_after_append, 99))}",
                f"{ms(percentile(m.ours_held, 50))} / {ms(percentile(m.ours_held, 99))}",
                f"{ms(percentile(m.base_held, 50))} / {ms(percentile(m.base_held, 99))}",
            ]
        )
        result.raw[str(m.subscribers)] = {
            "events": m.events,
            "deliveries": len(m.ours),
            **{f"p{q}": percentile(m.ours, q) for q in (50, 95, 99)},
            **{f"baseline_p{q}": percentile(m.base, q) for q in (50, 95, 99)},
            "held_p99": percentile(m.ours_held, 99),
            "append_p50": percentile(m.appends, 50),
            "append_p99": percentile(m.appends, 99),
            "after_append_p50": percentile(m.ours_after_append, 50),
            "after_append_p99": percentile(m.ours_after_append, 99),
            "missing": m.missing,
            "failed": m.failed,
        }
    result.tables.append(table)
    one = measured[0]
    p99, b99 = percentile(one.ours, 99), percentile(one.base, 99)
    result.targets.append(
        Target(
            "p99 event latency, 1 subscriber",
            "≤ baseline + 2 ms",
            f"{ms(p99)} vs {ms(b99)} (+{ms(p99 - b99)})",
            p99 <= b99 + 0.002,
        )
    )
    result.notes.append(
        f"Signatures verified by the receiver: {receiver.verified}, rejected: "
        f"{receiver.rejected}. Deliveries missing: {sum(m.missing for m in measured)}; "
        f"barriers timed out or given up: {sum(m.failed for m in measured)}."
    )
    return result


class _Member:
    """What ``GroupMember._on_taken`` does, minus the Consumer. One thread only."""

    def __init__(self, data_dir: Path, handoff: Handoff) -> None:
        self._data_dir = data_dir
        self._handoff = handoff
        self._journal: Journal | None = None

    def emit(self, count: int) -> list[Stamp]:
        if self._journal is None:  # a Journal belongs to the thread that opened it
            self._journal = Journal(self._data_dir, durable=True)
        stamps = []
        for _ in range(count):
            draft = EventDraft(
                type=EventType.REVOKED,
                group_id=GROUP,
                member_id=MEMBER,
                group_instance_id=None,
                generation_id=7,
                protocol="eager",
                partitions=TAKEN,
                assignment=(),
                reason=None,
            )
            event = self._journal.append(draft)
            appended = time.time()
            self._handoff.publish(
                replace(
                    self._handoff.snapshot,
                    state=MemberState.REBALANCING,
                    partitions=(),
                    sequence=event.sequence,
                    updated_at=time.time(),
                )
            )
            self._handoff.announce(event)
            outcome = self._handoff.await_barrier(event, 10.0)
            settled = time.time()
            # A subscriber that acknowledged before the barrier opened is not waited for.
            ok = not outcome.timed_out and not outcome.gave_up and not outcome.waiting
            stamps.append(Stamp(event.id, draft.time, settled, ok, appended))
        return stamps

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()


async def _measure(ctx: Context, receiver: ReceiverProcess, n: int, events: int) -> Measured:
    loop = asyncio.get_running_loop()
    data_dir = ctx.work_dir / f"latency-{n}-{uuid.uuid4().hex[:8]}"
    journal = Journal(data_dir, durable=False)
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)  # as the daemon
    client = httpx.AsyncClient(follow_redirects=False, trust_env=False, limits=limits)
    dispatcher = Dispatcher(
        journal, client, Metrics(CollectorRegistry()), RetryPolicy(0.5, 30.0, 0, 3600.0)
    )
    handoff = Handoff(
        loop,
        Assignment(
            group_id=GROUP,
            member_id=MEMBER,
            group_instance_id=None,
            generation_id=7,
            protocol="eager",
            state=MemberState.STABLE,
            partitions=tuple(TopicPartition(p.topic, p.partition) for p in TAKEN),
            sequence=journal.last_sequence(),
        ),
    )
    handoff.attach(Fanout(dispatcher, Feed(), None))
    dispatcher.start()
    registry = Registry(journal, dispatcher, ())
    urls = [receiver.url(f"{n}-{i}") for i in range(n)]
    for url in urls:
        registry.create(
            url=url, events=None, mode="blocking", secret=receiver.secret, timeout_ms=10_000
        )
    member = _Member(data_dir, handoff)
    executor = ThreadPoolExecutor(1, thread_name_prefix="group-member")
    plain = httpx.AsyncClient(follow_redirects=False, trust_env=False, limits=limits)
    try:
        warmup = min(WARMUP, max(2, events // 10))
        warm = await loop.run_in_executor(executor, member.emit, warmup)
        body = journal.events_after(0, 1)[0].body  # the same bytes for the baseline
        await _baseline(plain, urls, body, receiver.secret, warmup)
        assert warm
        receiver.take()  # drop the warm-up
        ours: list[Stamp] = []
        base: list[Stamp] = []
        left = events
        while left > 0:
            count = min(CHUNK, left)
            base += await _baseline(plain, urls, body, receiver.secret, count)
            ours += await loop.run_in_executor(executor, member.emit, count)
            left -= count
        records = receiver.take()
    finally:
        await dispatcher.close()
        await loop.run_in_executor(executor, member.close)
        executor.shutdown()
        await client.aclose()
        await plain.aclose()
        journal.close()
    ours_latency, missing_ours = _latencies(ours, records, n)
    dispatch, _ = _latencies([replace(s, started=s.appended) for s in ours], records, n)
    base_latency, missing_base = _latencies(base, records, n)
    return Measured(
        subscribers=n,
        events=events,
        ours=ours_latency,
        ours_after_append=dispatch,
        appends=[s.appended - s.started for s in ours],
        ours_held=[s.settled - s.started for s in ours],
        base=base_latency,
        base_held=[s.settled - s.started for s in base],
        missing=missing_ours + missing_base,
        failed=sum(not s.ok for s in ours + base),
    )


async def _baseline(
    client: httpx.AsyncClient, urls: list[str], body: bytes, secret: str, count: int
) -> list[Stamp]:
    stamps = []
    for _ in range(count):
        message_id = f"msg_{uuid.uuid4().hex}"
        timestamp = int(time.time())
        headers = {
            "content-type": "application/cloudevents+json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(secret, message_id, timestamp, body),
        }
        started = time.time()
        if len(urls) == 1:
            answers = [await client.post(urls[0], content=body, headers=headers)]
        else:
            answers = await asyncio.gather(
                *(client.post(url, content=body, headers=headers) for url in urls)
            )
        settled = time.time()
        stamps.append(
            Stamp(message_id, started, settled, all(a.status_code == 204 for a in answers))
        )
    return stamps


def _latencies(stamps: list[Stamp], records: list[Record], n: int) -> tuple[list[float], int]:
    started = {s.id: s.started for s in stamps}
    found = [r.at - started[r.id] for r in records if r.id in started]
    return found, len(stamps) * n - len(found)
