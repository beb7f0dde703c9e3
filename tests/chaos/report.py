"""The chaos run's report: what was injected, what was found, and the verdict.

``invariants`` fills it in; ``format()`` prints it; ``failures`` lists what breaks a
promise (an empty list is a pass). Windows of double ownership that the protocol allows
are counted and described, never failed.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

Partition = tuple[str, int]

# Why two applications may both believe they own a partition (the protocol allows it).
KILLED = "lost session: kill -9"
BROKER_FAULT = "lost session: broker paused/restarted"
LOST_EVENT = "lost session: member saw `lost`"
BARRIER_TIMEOUT = "barrier timed out"
UNEXPLAINED = "UNEXPLAINED"


@dataclass(frozen=True)
class Exit:
    """How one sidecar process ended."""

    member: str
    how: str  # "kill -9", "SIGTERM", "final SIGTERM", "crash", "start failed"
    code: int | None
    at: float
    seconds: float = 0.0  # SIGTERM to exit
    detail: str = ""


@dataclass(frozen=True)
class HealthProblem:
    member: str
    at: float
    status: int
    reason: str


@dataclass(frozen=True)
class Window:
    partition: Partition
    stale: str  # the member whose application still held it
    new: str  # the member whose application was told it owns it
    started: float
    ended: float
    cause: str
    after_fault: float | None = None  # for a kill: from the kill to the new owner's `assigned`

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    def describe(self) -> str:
        topic, number = self.partition
        return (
            f"{topic}[{number}]: {self.stale} still owned it when {self.new} got it, "
            f"{self.seconds:.2f} s ({self.cause})"
        )


@dataclass
class Report:
    title: str
    faults: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    journaled: int = 0
    expected_deliveries: int = 0
    delivered: int = 0
    receipts: int = 0
    duplicates: int = 0
    given_up: int = 0
    lost: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    barrier_timeouts: int = 0
    offsets_committed: int = 0
    commit_failures: int = 0
    commits_unknown: int = 0  # handed back, not confirmed within the bound
    windows: list[Window] = field(default_factory=list)
    intervals: int = 0
    callback_max: dict[str, float] = field(default_factory=dict)
    callback_bucket: dict[str, float] = field(default_factory=dict)
    stall_bound: float = 0.0
    rebalance_max: float = 0.0
    rebalances: int = 0
    recovery_seconds: float | None = None
    recovery_bound: float = 0.0
    exits: list[Exit] = field(default_factory=list)
    health: list[HealthProblem] = field(default_factory=list)
    log_errors: Counter[str] = field(default_factory=Counter)
    exceptions: list[str] = field(default_factory=list)
    api_errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    # -- verdicts ---------------------------------------------------------------------

    @property
    def unexplained(self) -> list[Window]:
        return [w for w in self.windows if w.cause == UNEXPLAINED]

    @property
    def crashes(self) -> list[Exit]:
        return [e for e in self.exits if e.how in ("crash", "start failed")]

    @property
    def bad_exits(self) -> list[Exit]:
        return [e for e in self.exits if e.how.endswith("SIGTERM") and e.code != 0]

    @property
    def stalled(self) -> list[str]:
        found = [
            f"{kind} callback held the group {held:.2f} s > {self.stall_bound:.1f} s"
            for kind, held in self.callback_max.items()
            if held > self.stall_bound
        ]
        if self.recovery_seconds is None:
            found.append("the group did not recover (all partitions owned) after the faults")
        elif self.recovery_seconds > self.recovery_bound:
            found.append(
                f"recovery took {self.recovery_seconds:.1f} s > {self.recovery_bound:.0f} s"
            )
        return found

    @property
    def failures(self) -> list[str]:
        problems = [f"lost: {x}" for x in self.lost]
        problems += [f"mismatch: {x}" for x in self.mismatched]
        problems += [f"order: {x}" for x in self.out_of_order]
        problems += [f"double ownership: {w.describe()}" for w in self.unexplained]
        problems += [f"stall: {x}" for x in self.stalled]
        problems += [f"crash: {e.member} {e.how} {e.code} {e.detail}" for e in self.crashes]
        problems += [f"exit: {e.member} {e.how} exited {e.code}" for e in self.bad_exits]
        problems += [f"liveness: {h.member} answered {h.status} ({h.reason})" for h in self.health]
        problems += [f"exception logged: {x}" for x in self.exceptions]
        problems += [f"API: {x}" for x in self.api_errors]
        return problems

    @property
    def ok(self) -> bool:
        return not self.failures

    # -- printing ---------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``dataclasses.asdict`` mangles ``Counter`` fields)."""
        document: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, Counter):
                document[name] = dict(value)
            elif isinstance(value, list):
                document[name] = [
                    {**vars(v), "seconds": v.seconds}
                    if isinstance(v, Window)
                    else vars(v)
                    if hasattr(v, "__dataclass_fields__")
                    else v
                    for v in value
                ]
            else:
                document[name] = value
        document["ok"] = self.ok
        document["failures"] = self.failures
        return document

    def format(self) -> str:
        lines = [f"== {self.title} ==", f"ran {self.seconds:.0f} s"]
        total = sum(self.faults.values())
        lines.append(
            f"faults injected: {total} ("
            + ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()))
            + ")"
        )
        if self.skipped:
            lines.append(
                "  skipped (target not in the planned state): "
                + ", ".join(f"{k} {n}" for k, n in sorted(self.skipped.items()))
            )
        lines.append("")
        lines.append("nothing lost:")
        lines.append(
            f"  events journaled {self.journaled}; deliveries expected {self.expected_deliveries}, "
            f"delivered {self.delivered}, given up (recorded) {self.given_up}, "
            f"LOST {len(self.lost)}"
        )
        lines.append(
            f"  receipts {self.receipts}, redeliveries {self.duplicates} (all with the same id "
            f"and bytes: {'yes' if not self.mismatched else 'NO'}); out of order "
            f"{len(self.out_of_order)}"
        )
        lines.append(
            f"  revoke acknowledgements that handed back offsets: committed "
            f"{self.offsets_committed}, commit failed {self.commit_failures}, "
            f"commit unknown {self.commits_unknown}"
        )
        lines.append("")
        lines.append("no double ownership (applications' view):")
        lines.append(
            f"  ownership intervals {self.intervals}; overlapping windows {len(self.windows)}, "
            f"UNEXPLAINED {len(self.unexplained)}"
        )
        by_cause: dict[str, list[float]] = defaultdict(list)
        for window in self.windows:
            by_cause[window.cause].append(window.seconds)
        for cause, lengths in sorted(by_cause.items()):
            lines.append(
                f"  {cause}: {len(lengths)} windows, max {max(lengths):.2f} s, "
                f"median {statistics.median(lengths):.2f} s, total {sum(lengths):.1f} s"
            )
        grace = [w.after_fault for w in self.windows if w.after_fault is not None]
        if grace:
            lines.append(
                f"    (after a kill -9 the new owner was told {min(grace):.1f} s later at the "
                f"earliest, median {statistics.median(grace):.1f} s: when the dead member's "
                "session expired, or its restarted sidecar rejoined; the window lasts until "
                "that sidecar's `assigned` reaches the old application)"
            )
        lines.append(f"  barrier timeouts recorded: {self.barrier_timeouts}")
        lines.append("")
        lines.append("bounded stalls:")
        for kind in ("revoked", "lost", "assigned"):
            if kind in self.callback_max:
                bucket = self.callback_bucket.get(kind)
                lines.append(
                    f"  {kind} callback: max held {self.callback_max[kind]:.2f} s "
                    f"(histogram max bucket le={bucket if bucket is not None else '-'}); "
                    f"bound {self.stall_bound:.1f} s"
                )
        lines.append(
            f"  rebalances completed {self.rebalances}, longest {self.rebalance_max:.2f} s "
            "(first sign to assignment; includes session timeouts)"
        )
        recovery = "never" if self.recovery_seconds is None else f"{self.recovery_seconds:.1f} s"
        lines.append(
            f"  recovery after the last fault: {recovery} (bound {self.recovery_bound:.0f} s)"
        )
        lines.append("")
        lines.append("no crash:")
        hows = Counter(f"{e.how} -> {e.code}" for e in self.exits)
        lines.append("  process exits: " + ", ".join(f"{k} x{n}" for k, n in sorted(hows.items())))
        lines.append(
            f"  crashes {len(self.crashes)}, bad SIGTERM exits {len(self.bad_exits)}, "
            f"liveness failures {len(self.health)}, exceptions logged {len(self.exceptions)}"
        )
        if self.log_errors:
            lines.append(
                "  error-level log lines: "
                + ", ".join(f"{k!r} x{n}" for k, n in self.log_errors.most_common(8))
            )
        for note in self.notes:
            lines.append(f"note: {note}")
        lines.append("")
        failures = self.failures
        lines.append("VERDICT: " + ("PASS" if not failures else f"FAIL ({len(failures)})"))
        lines.extend(f"  - {f}" for f in failures[:50])
        return "\n".join(lines)
