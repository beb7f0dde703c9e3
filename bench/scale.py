"""Section 6: how the cost grows with the fleet, against bare members in the same run.

* **Group size.** A group of N sidecars (N = 3, 10, 30) next to a group of N bare
  confluent-kafka members (``bench/bare.py``), every member a process of its own, each
  group on its own topic of 2N (at least 24) partitions, eager (range) and cooperative
  (cooperative-sticky). Rounds as in section 2 (the same trigger, the same end: every
  member assigned in one new generation); a cooperative round runs on a freshly started
  group (finding 3). Reported: the end-to-end medians, what the sidecar adds on the
  critical path (the wait for the command to run plus the longest callback hold, as in
  section 2) and resident memory per member.
* **Assignment size.** One member owning P partitions spread over four topics (P = 24,
  200, 1,000): spawn → first assignment, and resident memory once assigned, a shipped
  sidecar against a bare member.
* **Journal.** Events appended through the product's ``Journal`` with the daemon's
  retention (100,000 events; pruned every 10,000 appends, as the daemon prunes on a
  timer): the file size and the durable append time at the start and after 1M events.

Event latency with 1, 10 and 50 subscribers is section 1.
"""

from __future__ import annotations

import time
import uuid
from functools import partial
from pathlib import Path
from statistics import mean

import psutil

from bench.bare import BareProcess
from bench.common import Context, SectionResult, Table, Target, median, ms, percentile, ratio
from bench.processes import mb, shipped_sidecar, start_timed, stop
from bench.rebalance import (
    FRESH_GROUP_PER_ROUND,
    STRATEGIES,
    BareGroup,
    Lane,
    Round,
    SidecarGroup,
    bare_config,
)
from bench.receiver import ReceiverProcess
from sidecar.journal import Journal
from sidecar.model import EventDraft, PartitionOffset
from sidecar.subscriptions import new_secret
from sidecar.testkit.events import draft
from sidecar.testkit.kafka import create_topic, unique

TOPICS = 4
KEEP_EVENTS = 100_000  # the shipped journal_retention_events
PRUNE_EVERY = 10_000
TIMED_APPENDS = 1_000


def run(ctx: Context) -> SectionResult:
    result = SectionResult(
        key="scale",
        title="6. Scale: group size, assignment size, journal size",
        method=(__doc__ or "").split("\n", 2)[2].strip(),
    )
    _group_sizes(ctx, result)
    _assignment_sizes(ctx, result)
    _journal(ctx, result)
    return result


# -- group size -------------------------------------------------------------------------------


def _rss_per_member(pids: list[int]) -> float:
    return sum(psutil.Process(pid).memory_info().rss for pid in pids) / max(1, len(pids))


def _group_sizes(ctx: Context, result: SectionResult) -> None:
    table = Table(
        [
            "protocol",
            "members",
            "rounds",
            "sidecars (request → all assigned)",
            "bare",
            "ratio",
            "added by the sidecar",
            "allowed",
            "RSS per member, sidecar / bare",
            "CPU per member per round, sidecar / bare",
        ],
        caption="Medians over the rounds. 'Added by the sidecar': request → command run plus "
        "the longest callback hold (section 2's measure). Allowed: max(5 % of bare, 50 ms). "
        "CPU (mean over the rounds): time on the CPU of every thread of every member's "
        "process (/proc schedstat, ns), from the trigger to the last member assigned, "
        "divided by the group's size, idle work included; "
        "all members share the machine's cores, so at N members a round needs about N x "
        "that much CPU time.",
    )
    receiver = ReceiverProcess(new_secret())
    root = ctx.work_dir / f"scale-{uuid.uuid4().hex[:8]}"
    rounds = max(1, ctx.sizes.repetitions // 3)
    try:
        for protocol, strategy in STRATEGIES.items():
            for members in ctx.sizes.group_sizes:
                ctx.say(f"  {protocol}: {members} sidecars and {members} bare members ...")
                row, added, allowed = _group_round(
                    ctx, receiver, root, protocol, strategy, members, rounds
                )
                table.rows.append(row)
                if members == max(ctx.sizes.group_sizes):
                    result.targets.append(
                        Target(
                            f"rebalance cost at {members} members, {protocol}",
                            "≤ max(5 %, 50 ms) over bare",
                            f"+{ms(added)} (allowed {ms(allowed)})",
                            added <= allowed,
                        )
                    )
    finally:
        receiver.stop()
    result.tables.append(table)


def _group_round(
    ctx: Context,
    receiver: ReceiverProcess,
    root: Path,
    protocol: str,
    strategy: str,
    members: int,
    rounds: int,
) -> tuple[list[str], float, float]:
    partitions = max(24, 2 * members)
    fresh = FRESH_GROUP_PER_ROUND[protocol]
    ours = Lane(
        partial(SidecarGroup, ctx, receiver, protocol, strategy, root, members, partitions),
        fresh,
    )
    theirs = Lane(partial(BareGroup, ctx, protocol, strategy, members, partitions), fresh)
    rss = (0.0, 0.0)
    try:
        ours.prepare()
        theirs.prepare()
        for rep in range(rounds):
            for lane in (ours, theirs) if rep % 2 == 0 else (theirs, ours):
                time.sleep(1.0)
                lane.round()
        rss = (_lane_rss(ours), _lane_rss(theirs))
    finally:
        ours.stop()
        theirs.stop()
    sidecars = median([r.seconds for r in ours.rounds])
    bare = median([r.seconds for r in theirs.rounds])
    added = median([_added(r) for r in ours.rounds])
    allowed = max(0.05 * bare, 0.050)
    cpu = (mean([r.cpu for r in ours.rounds]), mean([r.cpu for r in theirs.rounds]))
    ctx.say(
        f"    sidecars {ms(sidecars)}, bare {ms(bare)}, added {ms(added)}, CPU per member "
        f"{ms(cpu[0])} / {ms(cpu[1])}"
    )
    row = [
        protocol,
        str(members),
        str(len(ours.rounds)),
        ms(sidecars),
        ms(bare),
        ratio(sidecars, bare),
        ms(added),
        ms(allowed),
        f"{mb(int(rss[0]))} / {mb(int(rss[1]))}",
        f"{ms(cpu[0])} / {ms(cpu[1])}",
    ]
    return row, added, allowed


def _added(r: Round) -> float:
    return (r.seconds - r.from_command) + r.held


def _lane_rss(lane: Lane) -> float:
    group = lane.group
    if isinstance(group, SidecarGroup):
        return _rss_per_member([s.process.pid for s in group.sidecars if s.process is not None])
    if isinstance(group, BareGroup):
        return _rss_per_member([m.process.pid for m in group.members])
    return 0.0


# -- assignment size --------------------------------------------------------------------------


def _assignment_sizes(ctx: Context, result: SectionResult) -> None:
    table = Table(
        ["partitions", "sidecar: spawn → assigned", "bare", "sidecar RSS", "bare RSS"],
        caption=f"One member owning every partition of {TOPICS} topics; RSS once assigned.",
    )
    biggest_rss = 0
    for total in ctx.sizes.assignment_sizes:
        ctx.say(f"  one member with {total} partitions ...")
        per_topic = max(1, total // TOPICS)
        topics = ",".join(create_topic(ctx.bootstrap, per_topic) for _ in range(TOPICS))
        group = unique("bench-scale-assign")
        sidecar = shipped_sidecar(
            ctx.bootstrap,
            group,
            topics,
            ctx.work_dir / f"assign-{uuid.uuid4().hex[:6]}",
            None,
            ctx.sidecar_python,
        )
        try:
            started = start_timed(sidecar, timeout=120)
            assert sidecar.process is not None
            ours_rss = psutil.Process(sidecar.process.pid).memory_info().rss
        finally:
            stop(sidecar)
        bare_took, bare_rss = _bare_first_assignment(ctx, topics, per_topic * TOPICS)
        biggest_rss = ours_rss
        table.rows.append(
            [
                str(per_topic * TOPICS),
                ms(started.assigned),
                ms(bare_took),
                mb(ours_rss),
                mb(bare_rss),
            ]
        )
    result.tables.append(table)
    result.targets.append(
        Target(
            f"RSS with {max(ctx.sizes.assignment_sizes)} assigned partitions",
            "≤ 100 MB",
            mb(biggest_rss),
            biggest_rss <= 100e6,
        )
    )


def _bare_first_assignment(ctx: Context, topics: str, partitions: int) -> tuple[float, int]:
    config = bare_config(ctx.bootstrap, unique("bench-scale-bare"), "range")
    spawned = time.time()
    member = BareProcess(config, topics, cooperative=False).start()
    try:
        deadline = time.monotonic() + 120
        while not any(a.assignment == partitions for a in member.history()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"bare member: no assignment of {partitions} partitions")
            time.sleep(0.01)
        first = next(a for a in member.history() if a.assignment == partitions)
        return first.at - spawned, psutil.Process(member.process.pid).memory_info().rss
    finally:
        member.stop()


# -- journal size -----------------------------------------------------------------------------


def _draft() -> EventDraft:
    return draft(
        partitions=(PartitionOffset("orders", p, p * 1000) for p in range(8)),
        group_id="bench-scale",
        member_id="rdkafka-bench",
        generation_id=7,
    )


def _timed(journal: Journal, count: int) -> list[float]:
    took = []
    for _ in range(count):
        started = time.perf_counter()
        journal.append(_draft())
        took.append(time.perf_counter() - started)
    return took


def _journal(ctx: Context, result: SectionResult) -> None:
    directory = ctx.work_dir / f"scale-journal-{uuid.uuid4().hex[:8]}"
    total = ctx.sizes.journal_events
    ctx.say(f"  journal: {total:,} events with retention {KEEP_EVENTS:,} ...")
    durable = Journal(directory, durable=True)
    bulk = Journal(directory, durable=False)  # fills faster; the same file and schema
    try:
        start = _timed(durable, TIMED_APPENDS)
        size_start = _size(directory)
        filled = TIMED_APPENDS
        fill_started = time.perf_counter()
        while filled < total:
            step = min(PRUNE_EVERY, total - filled)
            for _ in range(step):
                bulk.append(_draft())
            filled += step
            bulk.prune(keep_events=KEEP_EVENTS, max_age_seconds=7 * 86400)
        fill_rate = (filled - TIMED_APPENDS) / max(1e-9, time.perf_counter() - fill_started)
        end = _timed(durable, TIMED_APPENDS)
        size_end = _size(directory)
        kept = len(bulk.events_after(0, KEEP_EVENTS * 2))
    finally:
        bulk.close()
        durable.close()
    table = Table(
        ["after", "durable append p50", "p99", "journal on disk", "events kept"],
        caption=f"Durable appends (fsync) timed over {TIMED_APPENDS:,} events; the fill in "
        f"between ran at {fill_rate:,.0f} events/s (synchronous=NORMAL), pruning every "
        f"{PRUNE_EVERY:,}.",
    )
    table.rows.append(
        [
            f"{TIMED_APPENDS:,} events",
            ms(median(start)),
            ms(_p99(start)),
            mb(size_start),
            f"{TIMED_APPENDS:,}",
        ]
    )
    table.rows.append(
        [
            f"{filled + TIMED_APPENDS:,} events",
            ms(median(end)),
            ms(_p99(end)),
            mb(size_end),
            f"{kept:,}",
        ]
    )
    result.tables.append(table)
    result.raw["journal"] = {
        "events": filled + TIMED_APPENDS,
        "size_start": size_start,
        "size_end": size_end,
        "kept": kept,
        "p99_start": _p99(start),
        "p99_end": _p99(end),
    }


def _p99(values: list[float]) -> float:
    return percentile(values, 99)


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
