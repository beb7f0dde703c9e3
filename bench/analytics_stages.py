"""Where the analytics job's time goes: Spark jobs and stages from the event log.

The job labels its Spark jobs (``setJobDescription``: ``write rebalances``,
``report``...), Spark writes an event log when asked
(``spark.eventLog.enabled``), and this reads it back: per job its description and
wall time, per stage its name, tasks, wall time, executor run time and shuffle
bytes. Reading the log after the run (instead of polling the status tracker) costs
the job nothing and sees every stage, including the ones AQE re-planned or skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Stage:
    stage_id: int
    name: str
    tasks: int = 0
    submitted_ms: int = 0
    completed_ms: int = 0
    run_ms: int = 0  # executor run time summed over tasks (CPU-ish work)
    shuffle_read: int = 0
    shuffle_write: int = 0
    input_bytes: int = 0
    spilled: int = 0

    @property
    def seconds(self) -> float:
        return max(0, self.completed_ms - self.submitted_ms) / 1000


@dataclass
class Job:
    job_id: int
    description: str
    started_ms: int = 0
    ended_ms: int = 0
    stage_ids: list[int] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return max(0, self.ended_ms - self.started_ms) / 1000


ACCUMULATORS = {
    "internal.metrics.executorRunTime": "run_ms",
    "internal.metrics.shuffle.read.remoteBytesRead": "shuffle_read",
    "internal.metrics.shuffle.read.localBytesRead": "shuffle_read",
    "internal.metrics.shuffle.write.bytesWritten": "shuffle_write",
    "internal.metrics.input.bytesRead": "input_bytes",
    "internal.metrics.diskBytesSpilled": "spilled",
}


def _stage(info: dict[str, Any], stages: dict[int, Stage]) -> None:
    stage = stages.setdefault(
        info["Stage ID"], Stage(stage_id=info["Stage ID"], name=info.get("Stage Name", ""))
    )
    stage.tasks = int(info.get("Number of Tasks", 0))
    stage.submitted_ms = int(info.get("Submission Time") or 0)
    stage.completed_ms = int(info.get("Completion Time") or 0)
    for acc in info.get("Accumulables", []):
        attribute = ACCUMULATORS.get(acc.get("Name", ""))
        if attribute:
            setattr(stage, attribute, getattr(stage, attribute) + int(acc.get("Value") or 0))


def parse_event_log(lines: Iterable[str]) -> tuple[list[Job], dict[int, Stage]]:
    jobs: dict[int, Job] = {}
    stages: dict[int, Stage] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # the last line of a log still being written
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            properties = event.get("Properties") or {}
            jobs[event["Job ID"]] = Job(
                job_id=event["Job ID"],
                description=properties.get("spark.job.description") or "(unlabelled)",
                started_ms=int(event.get("Submission Time") or 0),
                stage_ids=list(event.get("Stage IDs", [])),
            )
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]].ended_ms = int(event.get("Completion Time") or 0)
        elif kind == "SparkListenerStageCompleted":
            _stage(event["Stage Info"], stages)
    return sorted(jobs.values(), key=lambda j: j.job_id), stages


def read_event_log(directory: Path) -> tuple[list[Job], dict[int, Stage]]:
    """The newest application's log in ``directory`` (``spark.eventLog.dir``).

    The application may still be running (``.inprogress``): Spark flushes each event
    as it happens, so the jobs that have ended are all there.
    """
    logs = sorted(directory.iterdir(), key=lambda p: p.stat().st_mtime)
    if not logs:
        raise FileNotFoundError(f"no event log in {directory}")
    newest = logs[-1]
    # Spark 4 rolls event logs by default: a directory of events_<n>_<app> files.
    parts = (
        sorted(newest.glob("events_*"), key=lambda p: int(p.name.split("_")[1]))
        if newest.is_dir()
        else [newest]
    )
    return parse_event_log(line for part in parts for line in part.open(encoding="utf-8"))


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f}"


def stage_table(
    jobs: list[Job], stages: dict[int, Stage], *, since_ms: int = 0, total_seconds: float
) -> str:
    """Markdown: the jobs after ``since_ms`` grouped by description, stages inside."""
    rows = [
        "| step (job description) | Spark jobs | stages run | tasks | wall s | executor s "
        "| input MB | shuffle write MB | spill MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    steps: dict[str, list[Job]] = {}
    for job in jobs:
        if job.started_ms >= since_ms:
            steps.setdefault(job.description, []).append(job)
    wall = 0.0
    for description, group in steps.items():
        ran = [stages[s] for j in group for s in set(j.stage_ids) if s in stages]
        # AQE runs a query as several jobs, some at once: the step's wall time is
        # from its first job's start to its last job's end.
        seconds = max(0, max(j.ended_ms for j in group) - min(j.started_ms for j in group)) / 1000
        wall += seconds
        rows.append(
            f"| {description} | {len(group)} | {len(ran)} | {sum(s.tasks for s in ran)} "
            f"| {seconds:.1f} | {sum(s.run_ms for s in ran) / 1000:.1f} "
            f"| {_mb(sum(s.input_bytes for s in ran))} "
            f"| {_mb(sum(s.shuffle_write for s in ran))} | {_mb(sum(s.spilled for s in ran))} |"
        )
    rows.append(
        f"| driver outside Spark jobs (planning, Python) | | | | "
        f"{max(0.0, total_seconds - wall):.1f} | | | | |"
    )
    rows.append(f"| **whole job** | | | | **{total_seconds:.1f}** | | | | |")
    return "\n".join(rows)


def slowest_stages(
    jobs: list[Job], stages: dict[int, Stage], *, since_ms: int = 0, top: int = 12
) -> str:
    """Markdown: the slowest stages, with the step they belong to."""
    step_of = {
        s: job.description for job in jobs if job.started_ms >= since_ms for s in job.stage_ids
    }
    ranked = sorted(
        (stages[s] for s in step_of if s in stages), key=lambda s: s.seconds, reverse=True
    )
    rows = [
        "| stage | step | name | tasks | wall s | executor s | shuffle write MB |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for stage in ranked[:top]:
        rows.append(
            f"| {stage.stage_id} | {step_of[stage.stage_id]} | {stage.name.split(' at ')[0]} "
            f"| {stage.tasks} | {stage.seconds:.1f} | {stage.run_ms / 1000:.1f} "
            f"| {_mb(stage.shuffle_write)} |"
        )
    return "\n".join(rows)
