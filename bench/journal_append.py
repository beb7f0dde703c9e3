"""Section 5: journal appends per second with the durability we ship.

``Journal(durable=True).append`` (SQLite WAL, ``synchronous=FULL``: the event is on disk
before the rebalance callback returns) appends a realistic ``assigned`` event (8
partitions with offsets) as fast as it can for the window, in the work directory (on
disk, not tmpfs). Baseline: the same bytes written to a plain file with ``fsync`` after
each event, the cheapest equally durable append. For reference, the same journal with
``synchronous=NORMAL`` (what the loop side uses; durable against a process crash, not a
power cut) and ``synchronous=OFF``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.common import Context, SectionResult, Table, compare, ms, percentile, ratio
from sidecar.journal import Journal
from sidecar.model import EventDraft, PartitionOffset, TopicPartition, encode
from sidecar.testkit.events import draft

PARTITIONS = tuple(PartitionOffset("orders", p, 1000 + p) for p in range(0, 24, 3))


def _draft() -> EventDraft:
    return draft(
        partitions=PARTITIONS,
        assignment=(TopicPartition(p.topic, p.partition) for p in PARTITIONS),
        group_id="bench-journal",
        member_id="rdkafka-00000000-bench",
        group_instance_id="bench-0",
        generation_id=7,
        reason="benchmark",
    )


def _timed(append: Callable[[], None], window: float) -> list[float]:
    for _ in range(5):  # warm-up
        append()
    took = []
    deadline = time.perf_counter() + window
    while True:
        started = time.perf_counter()
        append()
        done = time.perf_counter()
        took.append(done - started)
        if done >= deadline:
            return took


def _journal(directory: Path, durable: bool, pragma: str | None, window: float) -> list[float]:
    journal = Journal(directory, durable=durable)
    if pragma:
        journal._db.execute(pragma)  # reference variant only: not a setting we ship

    def append() -> None:
        journal.append(_draft())

    try:
        return _timed(append, window)
    finally:
        journal.close()


def _plain_file(directory: Path, window: float) -> list[float]:
    directory.mkdir(parents=True, exist_ok=True)
    line = encode(_draft().cloudevent(1)) + b"\n"
    fd = os.open(directory / "events.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:

        def append() -> None:
            os.write(fd, line)
            os.fsync(fd)

        return _timed(append, window)
    finally:
        os.close(fd)


def run(ctx: Context) -> SectionResult:
    result = SectionResult(
        key="journal",
        title="5. Journal: durable appends",
        method=(__doc__ or "").split("\n", 2)[2].strip(),
    )
    root = ctx.work_dir / f"journal-{uuid.uuid4().hex[:8]}"
    window = ctx.sizes.window / 2  # four variants
    variants = [
        ("Journal(durable=True) — shipped (FULL)", _journal(root / "full", True, None, window)),
        ("plain file write + fsync — baseline", _plain_file(root / "plain", window)),
        ("Journal(durable=False) (NORMAL)", _journal(root / "normal", False, None, window)),
        (
            "Journal, synchronous=OFF",
            _journal(root / "off", False, "PRAGMA synchronous=OFF", window),
        ),
    ]
    base_rate = len(variants[1][1]) / sum(variants[1][1])
    table = Table(["variant", "events/s", "ratio to baseline", "p50 per append", "p99"])
    for name, took in variants:
        rate = len(took) / sum(took)
        table.rows.append(
            [
                name,
                f"{rate:,.0f}",
                ratio(rate, base_rate),
                ms(percentile(took, 50)),
                ms(percentile(took, 99)),
            ]
        )
        result.raw[name] = {
            "events_per_second": rate,
            "count": len(took),
            "p50": percentile(took, 50),
            "p99": percentile(took, 99),
        }
    ours = variants[0][1]
    ours_rate = len(ours) / sum(ours)
    ctx.say(
        compare(
            "events/s, Journal(durable=True)",
            f"{ours_rate:,.0f}",
            f"{base_rate:,.0f}",
            ratio(ours_rate, base_rate),
        )
    )
    ctx.say(
        compare(
            "p99 per append",
            ms(percentile(ours, 99)),
            ms(percentile(variants[1][1], 99)),
            ratio(percentile(ours, 99), percentile(variants[1][1], 99)),
        )
    )
    for name, took in variants[2:]:
        ctx.say(f"  {name:<44} {len(took) / sum(took):>12,.0f} events/s")
    result.tables.append(table)
    result.notes.append(
        "No target: a rebalance appends one event per member and callback, so even the "
        "slowest variant is orders of magnitude above any real rebalance rate. The per-append "
        "time is part of every revoke callback (section 1)."
    )
    return result
