"""Count the handover run from the members' record logs.

Each app incarnation writes, in the order it did things:

* ``P topic partition offset app time_us`` — a record processed (its effect in the tallies);
* ``F topic partition app time_us reason position`` — the tallies flushed to the store: the
  effects of every record below ``position`` are now durable;
* ``L topic partition app time_us`` — the tallies dropped unflushed (partitions lost).

A record's processing is **effective** when a later flush of the same incarnation and
partition covers it (no drop in between): that is when its effect reached the store. Then, per
produced record: 0 effective processings is a **gap** (its effect was lost or it was never
read), more than one is a **duplicate** (counted twice in the store).

Per ownership change of a partition (a record processed by another incarnation than the
previous one): the **split-state window** is the old owner's flush of that partition minus the
new owner's first record (<= 0: the old owner flushed first; no flush at all: its state was
lost), and the **pause** is the new owner's first record minus the previous record. Per churn
step, the pause is the longest processing gap of any partition during the step.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

Key = tuple[str, int]  # topic, partition
DROPPED = "dropped"  # an L line: the state was dropped unflushed


@dataclass
class Processing:
    offset: int
    app: str
    time: float  # seconds (unix)


@dataclass
class Flush:
    app: str
    time: float
    position: int
    reason: str


@dataclass
class Handover:
    partition: Key
    old: str
    new: str
    first_new: float
    last_old: float
    flush_old: float | None  # None: the old owner never flushed (its state was lost)

    @property
    def split_window(self) -> float | None:
        return None if self.flush_old is None else self.flush_old - self.first_new

    @property
    def pause(self) -> float:
        return self.first_new - self.last_old


@dataclass
class Counts:
    produced: int = 0
    effective: dict[Key, dict[int, int]] = field(default_factory=dict)
    gaps: int = 0
    duplicates: int = 0  # records processed effectively more than once
    extra: int = 0  # effective processings beyond the first, summed
    redone: int = 0  # processings whose effect was dropped (redone by someone)
    handovers: list[Handover] = field(default_factory=list)
    step_pauses: list[float] = field(default_factory=list)
    processed: dict[Key, list[Processing]] = field(default_factory=dict)

    @property
    def split_windows(self) -> list[float]:
        return [w for h in self.handovers if (w := h.split_window) is not None]

    @property
    def state_lost(self) -> int:
        return sum(1 for h in self.handovers if h.flush_old is None)


Logs = tuple[dict[Key, list[Processing]], dict[Key, list[Flush]], int, dict[Key, list[Processing]]]


def read_logs(directory: Path) -> Logs:
    """Processings, flushes, the count of dropped-unflushed processings, effective ones."""
    processed: dict[Key, list[Processing]] = defaultdict(list)
    flushes: dict[Key, list[Flush]] = defaultdict(list)
    effective: dict[Key, list[Processing]] = defaultdict(list)
    redone = 0
    for path in sorted(directory.glob("*.log")):
        pending: dict[Key, list[Processing]] = defaultdict(list)
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if parts[0] == "P" and len(parts) >= 6:
                key = (parts[1], int(parts[2]))
                p = Processing(int(parts[3]), parts[4], int(parts[5]) / 1e6)
                processed[key].append(p)
                pending[key].append(p)
            elif parts[0] == "F" and len(parts) >= 7:
                key = (parts[1], int(parts[2]))
                flush = Flush(parts[3], int(parts[4]) / 1e6, int(parts[6]), parts[5])
                flushes[key].append(flush)
                covered = [p for p in pending[key] if p.offset < flush.position]
                effective[key].extend(covered)
                pending[key] = [p for p in pending[key] if p.offset >= flush.position]
            elif parts[0] == "L" and len(parts) >= 5:
                key = (parts[1], int(parts[2]))
                flushes[key].append(Flush(parts[3], int(parts[4]) / 1e6, -1, DROPPED))
                redone += len(pending[key])
                pending[key] = []
        redone += sum(len(v) for v in pending.values())  # never flushed (killed)
    for key in processed:
        processed[key].sort(key=lambda p: p.time)
    return dict(processed), dict(flushes), redone, dict(effective)


def count(
    directory: Path,
    ranges: dict[Key, tuple[int, int]],
    steps: list[tuple[str, float, float]] | None = None,
) -> Counts:
    """Gaps, duplicates, handovers and pauses for the offsets ``[start, end)`` per partition.

    ``steps``: (name, start, end) unix times of the churn steps, for the pause per step.
    """
    processed, flushes, redone, effective = read_logs(directory)
    result = Counts(redone=redone, processed=processed)
    for key, (start, end) in ranges.items():
        result.produced += max(0, end - start)
        times: dict[int, int] = defaultdict(int)
        for p in effective.get(key, []):
            if start <= p.offset < end:
                times[p.offset] += 1
        result.effective[key] = dict(times)
        for offset in range(start, end):
            n = times.get(offset, 0)
            if n == 0:
                result.gaps += 1
            elif n > 1:
                result.duplicates += 1
                result.extra += n - 1
        result.handovers.extend(_handovers(key, processed.get(key, []), flushes.get(key, [])))
    for _name, begin, finish in steps or []:
        longest = 0.0
        for key in ranges:
            times_in = [p.time for p in processed.get(key, []) if begin <= p.time <= finish]
            before = [p.time for p in processed.get(key, []) if p.time < begin]
            if before:
                times_in.insert(0, before[-1])
            gaps = [b - a for a, b in itertools.pairwise(times_in)]
            if gaps:
                longest = max(longest, max(gaps))
        result.step_pauses.append(longest)
    return result


def _handovers(key: Key, processed: list[Processing], flushes: list[Flush]) -> list[Handover]:
    found = []
    for previous, current in itertools.pairwise(processed):
        if current.app == previous.app:
            continue
        # The old owner's flush that made its state of this partition durable; None when it
        # dropped that state first (lost) or never flushed it (killed).
        flush = next(
            (
                f
                for f in flushes
                if f.app == previous.app
                and f.time >= previous.time
                and (f.position > previous.offset or f.reason == DROPPED)
            ),
            None,
        )
        if flush is not None and flush.reason == DROPPED:
            flush = None
        found.append(
            Handover(
                key,
                previous.app,
                current.app,
                current.time,
                previous.time,
                None if flush is None else flush.time,
            )
        )
    return found
