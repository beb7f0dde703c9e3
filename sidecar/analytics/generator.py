"""Synthetic fleets of consumer groups, as the CloudEvents their sidecars would emit.

Deterministic by seed. The groups (see :mod:`.simulation`) run side by side and their
events are merged in time order, then a little disorder is added the way
at-least-once delivery adds it: redelivered duplicates and arrival out of order within
a small window. Also :func:`cloud_event`, to hand-build events for tests.

    python -m sidecar.analytics.generator --events 1000000 --out fleet.jsonl
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from .simulation import EPOCH_US, FleetSpec, GroupLife, format_time

__all__ = [
    "EPOCH_US",
    "FleetSpec",
    "cloud_event",
    "format_time",
    "generate",
    "main",
    "write_events",
    "write_fleet",
    "write_fleet_file",
]


def cloud_event(
    *,
    type: str,
    group_id: str,
    member_id: str,
    time: datetime | str,
    sequence: int,
    generation_id: int = -1,
    protocol: str = "eager",
    group_instance_id: str | None = None,
    partitions: Iterable[tuple[str, int]] = (),
    assignment: Iterable[tuple[str, int]] | None = None,
    reason: str | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    """One CloudEvent as the sidecar emits it (handy for hand-built test data)."""
    when = time if isinstance(time, str) else time.astimezone(UTC).isoformat()
    identity = group_instance_id or member_id
    return {
        "specversion": "1.0",
        "id": event_id or f"{identity}-{sequence}",
        "source": f"kafka://{group_id}/{identity}",
        "type": type,
        "time": when,
        "sequence": str(sequence),
        "datacontenttype": "application/json",
        "data": {
            "group_id": group_id,
            "member_id": member_id,
            "group_instance_id": group_instance_id,
            "generation_id": generation_id,
            "protocol": protocol,
            "partitions": [{"topic": t, "partition": p} for t, p in partitions],
            "assignment": [{"topic": t, "partition": p} for t, p in (assignment or ())],
            "reason": reason,
        },
    }


def write_events(path: Path, events: Iterable[dict[str, Any]]) -> Path:
    """Write events as JSONL (one compact JSON object per line)."""
    with path.open("w", encoding="utf-8") as out:
        for event in events:
            out.write(json.dumps(event, separators=(",", ":")))
            out.write("\n")
    return path


def _disorder(lines: Iterator[str], spec: FleetSpec) -> Iterator[str]:
    """Redeliver some lines and shuffle arrival inside a small window."""
    rng = random.Random(f"{spec.seed}:delivery")
    window: list[str] = []
    for line in lines:
        window.append(line)
        if rng.random() < spec.duplicate_rate:
            window.append(line)
        while len(window) > spec.reorder_window:
            yield window.pop(rng.randrange(len(window)))
    rng.shuffle(window)
    yield from window


def generate(spec: FleetSpec) -> Iterator[str]:
    """``spec.events`` JSON lines (no newline), time-ordered up to the disorder."""
    merged = heapq.merge(
        *(GroupLife(i, spec).run() for i in range(spec.groups)), key=lambda item: item[0]
    )
    lines = (line for _, line in merged)
    delivered = _disorder(lines, spec) if spec.reorder_window > 0 else lines
    yield from itertools.islice(delivered, spec.events)


def write_fleet(out: IO[str], spec: FleetSpec) -> int:
    """Write the fleet as JSONL to ``out``; returns the number of lines written."""
    count = 0
    batch: list[str] = []
    for line in generate(spec):
        batch.append(line)
        if len(batch) >= 4096:
            out.write("\n".join(batch))
            out.write("\n")
            count += len(batch)
            batch = []
    if batch:
        out.write("\n".join(batch))
        out.write("\n")
        count += len(batch)
    return count


def write_fleet_file(path: Path, spec: FleetSpec) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", buffering=1 << 20) as out:
        return write_fleet(out, spec)


def main(argv: list[str] | None = None) -> int:
    defaults = FleetSpec()
    parser = argparse.ArgumentParser(
        prog="python -m sidecar.analytics.generator",
        description="Write a synthetic fleet of rebalance CloudEvents as JSONL.",
    )
    parser.add_argument(
        "--events",
        type=int,
        default=defaults.events,
        help="number of lines to write (default %(default)s)",
    )
    parser.add_argument(
        "--groups",
        type=int,
        default=defaults.groups,
        help="consumer groups running side by side (default %(default)s)",
    )
    parser.add_argument(
        "--max-members",
        type=int,
        default=defaults.max_members,
        help="largest initial group size (default %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help="same seed, same output (default %(default)s)",
    )
    parser.add_argument(
        "--cooperative-share",
        type=float,
        default=defaults.cooperative_share,
        help="fraction of cooperative groups (default %(default)s)",
    )
    parser.add_argument(
        "--static-share",
        type=float,
        default=defaults.static_share,
        help="fraction of groups with static membership (default %(default)s)",
    )
    parser.add_argument(
        "--mean-incident-gap",
        type=float,
        default=defaults.mean_incident_gap_s,
        help="mean seconds between incidents of a group (default %(default)s)",
    )
    parser.add_argument(
        "--duplicate-rate",
        type=float,
        default=defaults.duplicate_rate,
        help="fraction of redelivered lines (default %(default)s)",
    )
    parser.add_argument(
        "--reorder-window",
        type=int,
        default=defaults.reorder_window,
        help="arrival shuffled within this many lines; 0 = none (default %(default)s)",
    )
    parser.add_argument("--out", default="-", help="output file, '-' for stdout (default)")
    args = parser.parse_args(argv)
    if args.events < 0 or args.groups < 1 or args.max_members < 2:
        parser.error("need --events >= 0, --groups >= 1, --max-members >= 2")
    spec = FleetSpec(
        groups=args.groups,
        max_members=args.max_members,
        seed=args.seed,
        events=args.events,
        cooperative_share=args.cooperative_share,
        static_share=args.static_share,
        mean_incident_gap_s=args.mean_incident_gap,
        duplicate_rate=args.duplicate_rate,
        reorder_window=args.reorder_window,
    )
    started = time.monotonic()
    if args.out == "-":
        written = write_fleet(sys.stdout, spec)
    else:
        written = write_fleet_file(Path(args.out), spec)
    elapsed = time.monotonic() - started
    print(f"wrote {written} events in {elapsed:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
