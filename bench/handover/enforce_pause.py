"""The enforce pause per group protocol, against Java's ``enforceRebalance()`` (issue 41).

For each protocol (classic eager ``range``, classic ``cooperative-sticky``, KIP-848), a
fleet of each contender (the sidecar with a reference app; the Java listener) processes the
handover topic while one member enforces a rebalance, ``ENFORCES`` times, a step apart.
Per enforce: the processing pause (the longest gap between processed records of any
partition during the step, as in the handover table). What an enforce does differs per
protocol (``sidecar.kafka.enforce``, ``docs/kip848.md``): eager revokes everything (the sidecar
leaves and rejoins as a new member id, Java keeps its member id), cooperative moves
nothing, and under KIP-848 there is no consumer-triggered rebalance (the sidecar bumps the
member epochs; Java's ``enforceRebalance()`` does nothing there).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.common import Context, Table, percentile
from bench.handover.run import CONTENDERS, Producer_, run_handover

ENFORCES = 3
PROTOCOLS = {  # label: (group protocol, classic strategy)
    "classic, eager (range)": ("classic", "range"),
    "classic, cooperative-sticky": ("classic", "cooperative-sticky"),
    "KIP-848 (consumer)": ("consumer", "range"),
}


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:.0f} ms"


def enforce_pauses(
    ctx: Context,
    contenders: list[str],
    producer: Producer_,
    work: Path,
    members: int,
    step_seconds: float,
    partitions: int,
) -> tuple[Table, dict[str, Any]]:
    """Run every protocol for every contender that can enforce; the table and raw figures."""
    chosen = [c for c in contenders if c in ("python", "go", "java")]
    raw: dict[str, Any] = {}
    rows = []
    for label, (protocol, strategy) in PROTOCOLS.items():
        raw[label] = {}
        for name in chosen:
            ctx.say(f"  -- enforce pause: {CONTENDERS[name]}, {label}")
            (found,) = run_handover(
                ctx.bootstrap,
                work,
                [name],
                steps=["enforce"] * ENFORCES,
                members=members,
                partitions=partitions,
                producer=producer,
                step_seconds=step_seconds,
                footprint_seconds=1.0,
                say=ctx.say,
                protocol=protocol,
                strategy=strategy,
            )
            pauses = found.counts.step_pauses
            began = found.steps[0][1] if found.steps else 0.0  # not the start-up's moves
            moved = sum(1 for h in found.counts.handovers if h.first_new >= began)
            raw[label][name] = {
                "step_pauses": pauses,
                # Not in the table: it also counts a fleet still settling after its start.
                "handovers_after_first_enforce": moved,
                "gaps": found.counts.gaps,
                "duplicates": found.counts.duplicates,
            }
            ctx.say(f"     pauses {[round(p, 3) for p in pauses]}, partitions moved {moved}")
            rows.append(
                [
                    label,
                    CONTENDERS[name],
                    " / ".join(_ms(p) for p in pauses),
                    _ms(percentile(pauses, 50)),
                    f"{found.counts.gaps} / {found.counts.duplicates}",
                ]
            )
    table = Table(
        [
            "protocol",
            "contender",
            "pause per enforce",
            "p50",
            "gaps / duplicates",
        ],
        rows,
        caption=f"{members} members, one of them enforcing {ENFORCES} times, "
        f"{step_seconds:.0f} s apart; the pause is the longest gap between processed records "
        "of any partition during the step (the records keep coming, so an idle partition "
        "shows as a pause too: compare contenders, not absolute values).",
    )
    return table, raw
