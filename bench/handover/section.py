"""Section: handover — the promise at the data level (issue 14).

Records are produced continuously (300/s, keyed by user) to one topic; fleets process it
under churn while keeping a running tally per user per partition (the
``ConsumerRebalanceListener`` documentation example), each in its own consumer group started at
the topic's end. Contenders, on the same topic with the same churn, one after the other so each
has the machine alone: rebalance-sidecar + the Python reference app; rebalance-sidecar + the Go
reference app; the gold standard, a Java consumer with an in-process
``ConsumerRebalanceListener`` that flushes and commits on revoke; and a peer sidecar, Dapr's
``pubsub.kafka`` (``daprd``), whose app cannot flush on revoke because Dapr never tells it.

Two phases per contender, each with a fresh group: **graceful** churn (an enforced rebalance,
a member joining, a member drained and stopped with SIGTERM, a member restarting) and
**kill -9** (of an application, restarted a second later; of a sidecar, restarted likewise).
Counted from every app's record log (``bench/handover/analysis.py``): per record, whether its
effect reached the store 0 times (gap) or more than once (duplicate); per ownership change the
split-state window (old owner's flush - new owner's first record; ≤ 0: the old owner flushed
first); per churn step the processing pause (the longest gap between processed records of any
partition during the step). Footprint: RSS and CPU of each member's sidecar and app, while
processing, before the churn.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from bench.common import REPO, Context, SectionResult, Table, Target, percentile
from bench.handover.enforce_pause import enforce_pauses
from bench.handover.members import COMMIT_INTERVAL_MS, GO_APP, TOOLS
from bench.handover.run import (
    CHAOS,
    CONTENDERS,
    GRACEFUL,
    FleetResult,
    Producer_,
    create_topic,
    run_handover,
)

RATE = 300.0
PARTITIONS = 6


def _prepare(ctx: Context) -> list[str]:
    """Build what the contenders need (idempotent); the ones that cannot run are left out."""
    chosen = ["python"]
    build = subprocess.run(
        [str(REPO / "scripts" / "build-go-app.sh")], capture_output=True, text=True, check=False
    )
    if build.returncode == 0 and GO_APP.exists():
        chosen.append("go")
    else:
        ctx.say(f"  Go app not built, left out: {build.stderr[-500:]}")
    if shutil.which("javac") and shutil.which("java"):
        chosen.append("java")
    else:
        ctx.say("  no JDK: the Java listener is left out")
    dapr = subprocess.run(
        [str(REPO / "scripts" / "daprd.sh")], capture_output=True, text=True, check=False
    )
    if dapr.returncode == 0 and (TOOLS / "daprd").exists():
        chosen.append("dapr")
    else:
        ctx.say(f"  daprd not built, Dapr left out: {dapr.stderr[-500:]}")
    return chosen


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:.0f} ms"


def _mb(size: float) -> str:
    return f"{size / 1e6:.0f} MB" if size else "—"


def _row(name: str, phase: str, r: FleetResult) -> list[str]:
    c = r.counts
    windows = c.split_windows
    worst = max(windows) if windows else math.nan
    pauses = c.step_pauses
    skipped = f" (not possible: {', '.join(r.skipped)})" if r.skipped else ""
    return [
        CONTENDERS[name] + skipped,
        phase,
        str(c.produced),
        str(c.gaps),
        str(c.duplicates),
        f"{_ms(worst)} / {_ms(percentile(windows, 50))}",
        str(c.state_lost),
        f"{_ms(percentile(pauses, 50))} / {_ms(max(pauses) if pauses else math.nan)}",
        f"{_mb(r.footprint.sidecar_rss)}, {r.footprint.sidecar_cpu:.1f} %"
        if r.footprint.sidecar_rss
        else "— (in-process)",
        f"{_mb(r.footprint.app_rss)}, {r.footprint.app_cpu:.1f} %",
    ]


def run(ctx: Context) -> SectionResult:
    quick = ctx.sizes.window < 10
    members = 2 if quick else 3
    step_seconds = 5.0 if quick else 8.0
    result = SectionResult(
        key="handover",
        title="Handover: the promise at the data level",
        method=__doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
    )
    contenders = _prepare(ctx)
    work = ctx.work_dir / "handover"
    phases: dict[str, dict[str, FleetResult]] = {"graceful": {}, "kill -9": {}}
    # One topic and one producer for the whole section: every contender reads the same stream.
    topic = f"handover-{int(time.time())}"
    create_topic(ctx.bootstrap, topic, PARTITIONS)
    producer = Producer_(ctx.bootstrap, topic, RATE).start()
    try:
        _phases(ctx, contenders, producer, work, members, step_seconds, quick, phases)
    finally:
        producer.stop()
    columns = [
        "contender",
        "churn",
        "records",
        "gaps",
        "duplicates",
        "split-state window max / p50",
        "old owner's state lost",
        "pause per step p50 / max",
        "sidecar RSS, CPU",
        "app RSS, CPU",
    ]
    rows = [
        _row(name, phase, phases[phase][name])
        for name in contenders
        for phase in ("graceful", "kill -9")
    ]
    result.tables.append(
        Table(
            columns,
            rows,
            caption=f"{members} members (+1 joining), {RATE:.0f} records/s on one topic of "
            f"{PARTITIONS} partitions for all, {step_seconds:.0f} s per churn step, commit "
            f"interval {COMMIT_INTERVAL_MS} ms; "
            "footprint per member while processing (CPU: % of one core).",
        )
    )
    _targets(result, phases, contenders)
    if not quick:  # the enforce pause per protocol, beside Java's (issue 41)
        producer = Producer_(ctx.bootstrap, topic, RATE).start()
        try:
            table, enforce_raw = enforce_pauses(
                ctx, contenders, producer, work, members, step_seconds, PARTITIONS
            )
        finally:
            producer.stop()
        result.tables.append(table)
    result.raw = {
        phase: {
            name: {
                "produced": r.counts.produced,
                "gaps": r.counts.gaps,
                "duplicates": r.counts.duplicates,
                "extra": r.counts.extra,
                "redone": r.counts.redone,
                "split_windows": r.counts.split_windows,
                "state_lost": r.counts.state_lost,
                "step_pauses": r.counts.step_pauses,
                "handover_pauses": [h.pause for h in r.counts.handovers],
                "footprint": asdict(r.footprint),
                "skipped": r.skipped,
            }
            for name, r in by_name.items()
        }
        for phase, by_name in phases.items()
    }
    if not quick:
        result.raw["enforce_pause"] = enforce_raw
    result.notes.append(
        "Gaps and duplicates count effects in the store: a record processed by an app that was "
        "killed before it flushed is not counted (its work was redone by the next owner)."
    )
    return result


def _targets(
    result: SectionResult, phases: dict[str, dict[str, FleetResult]], contenders: list[str]
) -> None:
    graceful, chaos = phases["graceful"], phases["kill -9"]
    java = graceful.get("java")
    for name in [n for n in ("python", "go") if n in contenders]:
        g, k = graceful[name].counts, chaos[name].counts
        label = CONTENDERS[name]
        result.targets.append(
            Target(
                f"{label}: graceful churn",
                "0 gaps, 0 duplicates",
                f"{g.gaps} gaps, {g.duplicates} duplicates",
                g.gaps == 0 and g.duplicates == 0,
            )
        )
        worst = max(g.split_windows) if g.split_windows else math.nan
        result.targets.append(
            Target(
                f"{label}: split-state window",
                "≤ 0 (old owner flushed first), no state lost",
                f"max {_ms(worst)}, {g.state_lost} lost",
                (math.isnan(worst) or worst <= 0) and g.state_lost == 0,
            )
        )
        bound = int(RATE * COMMIT_INTERVAL_MS / 1000 * len(CHAOS))
        result.targets.append(
            Target(
                f"{label}: kill -9",
                f"0 gaps, duplicates ≤ {bound} (records in one commit interval per kill)",
                f"{k.gaps} gaps, {k.duplicates} duplicates",
                k.gaps == 0 and k.duplicates <= bound,
            )
        )
        if java is not None:
            ours = percentile(g.step_pauses, 50)
            theirs = percentile(java.counts.step_pauses, 50)
            goal = max(1.1 * theirs, theirs + 0.05)
            result.targets.append(
                Target(
                    f"{label}: processing pause per rebalance (p50)",
                    f"≤ 1.1 x or +50 ms of the Java listener's ({_ms(theirs)})",
                    _ms(ours),
                    ours <= goal,
                )
            )


def _phases(
    ctx: Context,
    contenders: list[str],
    producer: Producer_,
    work: Path,
    members: int,
    step_seconds: float,
    quick: bool,
    phases: dict[str, dict[str, FleetResult]],
) -> None:
    for name in contenders:
        for phase, steps in (("graceful", GRACEFUL), ("kill -9", CHAOS)):
            ctx.say(f"  -- {CONTENDERS[name]}: {phase} churn")
            (found,) = run_handover(
                ctx.bootstrap,
                work,
                [name],
                steps=steps,
                members=members,
                partitions=PARTITIONS,
                producer=producer,
                step_seconds=step_seconds,
                footprint_seconds=3.0 if quick else 5.0,
                say=ctx.say,
            )
            phases[phase][name] = found
            c = found.counts
            ctx.say(
                f"     records {c.produced}, gaps {c.gaps}, duplicates {c.duplicates}, "
                f"split-state max {_ms(max(c.split_windows) if c.split_windows else math.nan)}"
                f", state lost {c.state_lost}, pauses {[round(p, 3) for p in c.step_pauses]}"
            )
