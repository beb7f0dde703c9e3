"""Section 1: event latency, from the sidecar's callback to the subscriber's receipt.

The product itself: a real sidecar process (the image's command, from the test kit) is the
only member of a group on a real broker, with 1, 10 or 50 blocking webhooks declared, all
pointing at a receiver in another process that verifies each signature and stamps its
receipt with ``time.time()``. Each ``POST /enforce-rebalance`` makes the member revoke and
get its partitions back (eager): one ``revoked`` (through the barrier) and one
``assigned`` per rebalance. Latency = receipt - the event's ``time``, which the sidecar
stamps when the callback builds the event (same host, same clock). The harness learns that
a rebalance ended from the receiver (every subscriber has the new generation's
``assigned``), not by polling the sidecar's ``/assignment``: a request the sidecar serves
while an event is on its way would delay the event, a load the floor does not carry.

The floor, measured in the same run: a plain POST of the same bytes (signed beforehand,
sent with the couriers' own HTTP client, ``sidecar.webhook_http``: the transport, not a
slower library) to the same receiver, one per subscriber, concurrently for 10 and 50;
and the durable journal append alone (the product's ``Journal`` on the same disk, fsync
included), since every event is on disk before anyone is told. Both floors are taken the
way events come: one at a time after quiet. An event reaches a receiver (and a disk) that
has been idle since the previous rebalance, and a POST sent back to back with the
previous one finds warm caches and a receiver already awake: it costs about half as
much, so a back-to-back floor is not a floor of the same thing. Each baseline POST sits in
the middle of the quiet between two rebalances (a random 50-200 ms after the last
delivery, and as long again before the next enforce), so neither warms the receiver for
the other and drift on a busy machine hits both alike. The back-to-back figures (a burst
of POSTs, appends without a pause) are measured in the same run and reported beside
them, for whoever prefers that floor.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from dataclasses import dataclass

from bench.common import Context, SectionResult, Table, Target, compare, ms, percentile, ratio
from bench.receiver import ReceiverProcess, Record
from sidecar.delivery import sign
from sidecar.journal import Journal
from sidecar.model import EventType, PartitionOffset
from sidecar.subscriptions import new_secret
from sidecar.testkit.events import draft
from sidecar.testkit.kafka import create_topic, unique
from sidecar.testkit.sidecars import Sidecar, wait_until
from sidecar.webhook_http import WebhookClient

SUBSCRIBERS = (1, 10, 50)
CHUNK = 10  # rebalances (each after one baseline POST) between two collections
WARMUP = 2  # rebalances not counted
PARTITIONS = 4
APPENDS = 300  # durable journal appends timed for the floor
APPEND_GAP = 0.01  # seconds between them
IDLE_GAP = (0.05, 0.2)  # seconds of quiet before and after each baseline POST
BURST = 50  # back-to-back POSTs (and pause-less appends) reported beside the floor


@dataclass
class Measured:
    subscribers: int
    rebalances: int
    ours: list[float]
    base: list[float]
    missing: int
    burst: list[float]  # the same POST, back to back


def rebalances_for(subscribers: int, events: int) -> int:
    """Rebalances to time: two events each, fewer as each one fans out wider."""
    return max(3, events // {1: 10, 10: 20, 50: 40}.get(subscribers, subscribers))


def run(ctx: Context) -> SectionResult:
    result = SectionResult(
        key="latency",
        title="1. Event latency: callback to webhook receipt, on a real sidecar",
        method=(__doc__ or "").split("\n", 2)[2].strip(),
    )
    receiver = ReceiverProcess(new_secret())
    fsync = _journal_appends(ctx, APPEND_GAP)
    fsync_burst = _journal_appends(ctx, 0.0)
    measured: list[Measured] = []
    try:
        for n in SUBSCRIBERS:
            count = rebalances_for(n, ctx.sizes.latency_events)
            ctx.say(f"  {n} blocking subscriber(s), {count} enforced rebalances ...")
            m = _measure(ctx, receiver, n, count)
            measured.append(m)
            for q in (50, 95, 99):
                a, b = percentile(m.ours, q), percentile(m.base, q)
                ctx.say(compare(f"p{q} latency, {n} sub", ms(a), ms(b), ratio(a, b), ms(a - b)))
    finally:
        receiver.stop()
    fsync_p50, fsync_p99 = percentile(fsync, 50), percentile(fsync, 99)
    burst_p50, burst_p99 = percentile(fsync_burst, 50), percentile(fsync_burst, 99)
    ctx.say(
        f"  durable journal append: p50 {ms(fsync_p50)}, p99 {ms(fsync_p99)} (without pauses: "
        f"p50 {ms(burst_p50)}, p99 {ms(burst_p99)})"
    )
    table = Table(
        [
            "subscribers",
            "deliveries",
            "p50",
            "p95",
            "p99",
            "plain POST p50",
            "plain POST p99",
            "back to back p50 / p99",
            "floor p99 (POST + append)",
            "p99 ours - floor",
            "missing",
        ],
        caption="Latency of each delivery (event x subscriber) from a real sidecar process. "
        f"The durable journal append (fsync) measured alone: p50 {ms(fsync_p50)}, p99 "
        f"{ms(fsync_p99)} over {len(fsync)} appends {APPEND_GAP * 1000:.0f} ms apart "
        f"(without pauses: p50 {ms(burst_p50)}, p99 {ms(burst_p99)}); the floor of an event "
        "is that append plus a plain loopback POST sent after quiet. 'Back to back': the "
        f"same POST in a burst of {BURST}.",
    )
    for m in measured:
        p99, b99 = percentile(m.ours, 99), percentile(m.base, 99)
        floor = b99 + fsync_p99
        table.rows.append(
            [
                str(m.subscribers),
                str(len(m.ours)),
                ms(percentile(m.ours, 50)),
                ms(percentile(m.ours, 95)),
                ms(p99),
                ms(percentile(m.base, 50)),
                ms(b99),
                f"{ms(percentile(m.burst, 50))} / {ms(percentile(m.burst, 99))}",
                ms(floor),
                ms(p99 - floor),
                str(m.missing),
            ]
        )
        result.raw[str(m.subscribers)] = {
            "rebalances": m.rebalances,
            "deliveries": len(m.ours),
            **{f"p{q}": percentile(m.ours, q) for q in (50, 95, 99)},
            **{f"baseline_p{q}": percentile(m.base, q) for q in (50, 95, 99)},
            "fsync_p50": fsync_p50,
            "fsync_p99": fsync_p99,
            "fsync_no_pause_p50": burst_p50,
            "fsync_no_pause_p99": burst_p99,
            **{f"back_to_back_p{q}": percentile(m.burst, q) for q in (50, 99)},
            "missing": m.missing,
        }
    result.tables.append(table)
    one = measured[0]
    p99, b99 = percentile(one.ours, 99), percentile(one.base, 99)
    floor = b99 + fsync_p99
    result.targets.append(
        Target(
            "p99 event latency, 1 subscriber",
            "≤ plain POST p99 + fsync p99 + 1 ms",
            f"{ms(p99)} vs {ms(b99)} + {ms(fsync_p99)} ({_against(p99 - floor)} the floor)",
            p99 <= floor + 0.001,
        )
    )
    result.notes.append(
        f"Signatures verified by the receiver: {receiver.verified}, rejected: "
        f"{receiver.rejected}. Deliveries missing: {sum(m.missing for m in measured)}."
    )
    return result


def _against(difference: float) -> str:
    return f"{ms(abs(difference))} {'over' if difference >= 0 else 'under'}"


def _journal_appends(ctx: Context, gap: float) -> list[float]:
    """The product's durable append, alone: what every event costs before anyone is told."""
    journal = Journal(ctx.work_dir / f"latency-journal-{uuid.uuid4().hex[:8]}", durable=True)
    taken = tuple(PartitionOffset("orders", p, None) for p in range(PARTITIONS))
    durations = []
    try:
        for _ in range(APPENDS):
            revoked = draft(
                EventType.REVOKED,
                taken,
                group_id="bench-latency",
                member_id="rdkafka-bench",
                generation_id=7,
            )
            time.sleep(gap)  # one at a time, as events come (or 0: back to back)
            started = time.perf_counter()
            journal.append(revoked)
            durations.append(time.perf_counter() - started)
    finally:
        journal.close()
    return durations


def _measure(ctx: Context, receiver: ReceiverProcess, n: int, rebalances: int) -> Measured:
    topic = create_topic(ctx.bootstrap, PARTITIONS, unique("latency"))
    name = f"latency-{n}-{uuid.uuid4().hex[:6]}"
    urls = [receiver.url(f"{n}-{i}") for i in range(n)]
    webhooks = [
        {"url": url, "secret": receiver.secret, "mode": "blocking", "timeout_ms": 10_000}
        for url in urls
    ]
    sidecar = Sidecar(
        ctx.bootstrap,
        unique("bench-latency"),
        topic,
        ctx.work_dir / name,
        strategy="range",
        webhooks=webhooks,
        extra_env={"SIDECAR_LOG_LEVEL": "warning"},
        name=name,
        python=ctx.sidecar_python,
    ).start()
    ours: list[Record] = []
    sent: dict[str, float] = {}  # baseline message id -> just before its POST
    baseline: list[Record] = []
    plain = _PlainPoster(urls, receiver.secret)
    try:
        sidecar.wait_stable()
        for _ in range(WARMUP):
            _enforce(sidecar, receiver, n)
        plain.post(_BODY, WARMUP)  # its connections open before anything is timed
        receiver.take()  # drop what the warm-up delivered
        left = rebalances
        while left > 0:
            count = min(CHUNK, left)
            for _ in range(count):
                time.sleep(random.uniform(*IDLE_GAP))  # the last deliveries are done
                sent.update(plain.post(_BODY, 1))
                time.sleep(random.uniform(*IDLE_GAP))  # quiet again before the events
                _enforce(sidecar, receiver, n)
            _sort(receiver.take(), sent, ours, baseline)
            left -= count
        # Wait for the last async deliveries, then collect them.
        wait_until(lambda: _drained(sidecar), 30, "deliveries done")
        _sort(receiver.take(), sent, ours, baseline)
        time.sleep(IDLE_GAP[1])
        burst_sent = plain.post(_BODY, BURST)
        time.sleep(0.5)
        burst = [r.at - burst_sent[r.id] for r in receiver.take() if r.id in burst_sent]
    finally:
        plain.close()
        sidecar.stop()
    latencies = [r.at - r.event_time for r in ours]
    base = [r.at - sent[r.id] for r in baseline]
    expected = rebalances * 2 * n + len(sent) * n
    missing = max(0, expected - len(latencies) - len(base))
    return Measured(n, rebalances, latencies, base, missing, burst)


def _sort(
    records: list[Record], sent: dict[str, float], ours: list[Record], baseline: list[Record]
) -> None:
    for record in records:
        if record.id in sent:
            baseline.append(record)
        elif record.type.endswith((".revoked", ".assigned")) and record.event_time > 0:
            ours.append(record)


def _enforce(sidecar: Sidecar, receiver: ReceiverProcess, subscribers: int) -> None:
    """One rebalance, waited for where it ends: at the receiver, once every subscriber got
    the new generation's ``assigned``. Not by polling the sidecar: a request it serves
    while an event is on its way delays that event, and the floor has no such load."""
    before = int(sidecar.assignment()["generation_id"])
    response = sidecar.client.post(
        "/enforce-rebalance", json={"reason": "bench"}, headers=sidecar.headers()
    )
    response.raise_for_status()
    receiver.wait_assigned(f"{subscribers}-", before, subscribers)


def _drained(sidecar: Sidecar) -> bool:
    metrics = sidecar.client.get("/metrics").text
    return "rebalance_sidecar_journal_pending_events 0.0" in metrics or (
        "journal_pending_events" not in metrics
    )


# The baseline's bytes: an event of the same shape and size as a real ``revoked``.
_BODY = json.dumps(
    {
        "specversion": "1.0",
        "id": "00000000-0000-0000-0000-000000000000",
        "type": "bench.baseline",
        "source": "kafka://bench/latency",
        "time": "2026-01-01T00:00:00.000000+00:00",
        "data": {"partitions": [{"topic": "t", "partition": p} for p in range(PARTITIONS)]},
    }
).encode()


class _PlainPoster:
    """The floor: plain POSTs, one connection per receiver URL kept open between chunks,
    sent with the HTTP client the product's couriers use (``sidecar.webhook_http``), so
    the floor is the transport and not a slower client library."""

    def __init__(self, urls: list[str], secret: str) -> None:
        self._urls = urls
        self._secret = secret
        self._runner = asyncio.Runner()
        self._clients = [WebhookClient() for _ in urls]

    def post(self, body: bytes, count: int) -> dict[str, float]:
        """POST ``body`` ``count`` times to every URL; message id -> time just before."""
        return self._runner.run(self._post(body, count))

    async def _post(self, body: bytes, count: int) -> dict[str, float]:
        sent = {}
        for _ in range(count):
            message_id = f"msg_{uuid.uuid4().hex}"
            timestamp = int(time.time())
            headers = {
                "content-type": "application/cloudevents+json",
                "webhook-id": message_id,
                "webhook-timestamp": str(timestamp),
                "webhook-signature": sign(self._secret, message_id, timestamp, body),
            }
            sent[message_id] = time.time()
            await asyncio.gather(
                *(
                    client.post(url, body, headers, timeout=30, cap=1024)
                    for client, url in zip(self._clients, self._urls, strict=True)
                )
            )
        return sent

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._runner.close()
