"""Throughput of the analytics batch job on ``local[2]``, and whether it scales linearly.

    python -m bench.analytics_bench                      # 1M, 2M, 4M events (~15 min)
    python -m bench.analytics_bench --sizes 20000,40000  # smoke run

For each size: a synthetic fleet (``sidecar.analytics.generator``, cached in
``--workdir`` by size and seed) goes through the whole batch job (read JSONL, build
the tables, write Parquet, render the report) in one SparkSession that a small run
warmed up first, so JIT compilation is not billed to the first size. Printed: seconds,
events/s, and for each step the cost ratio against the previous size next to the size
ratio: linear growth shows as equal ratios.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.analytics_stages import read_event_log, slowest_stages, stage_table
from sidecar.analytics.generator import FleetSpec, write_fleet_file
from sidecar.analytics.job import run_batch
from sidecar.analytics.session import REPO_ROOT, build_session

DEFAULT_SIZES = (1_000_000, 2_000_000, 4_000_000)
WARMUP_EVENTS = 20_000


@dataclass(frozen=True)
class Measurement:
    events: int
    generate_seconds: float
    job_seconds: float
    rebalances: int

    @property
    def events_per_second(self) -> float:
        return self.events / self.job_seconds


def fleet_file(workdir: Path, events: int, groups: int, seed: int) -> tuple[Path, float]:
    """The fleet of that size (generated once, then reused); seconds spent generating."""
    path = workdir / f"fleet-{events}-g{groups}-s{seed}.jsonl"
    if path.exists():
        return path, 0.0
    started = time.monotonic()
    partial = path.with_suffix(".partial")
    write_fleet_file(partial, FleetSpec(groups=groups, events=events, seed=seed))
    partial.replace(path)
    return path, time.monotonic() - started


def parse_sizes(text: str) -> list[int]:
    sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    if not sizes or any(size <= 0 for size in sizes):
        raise argparse.ArgumentTypeError("sizes must be positive integers, e.g. 1000000,2000000")
    return sizes


def table(results: list[Measurement]) -> str:
    header = (
        f"{'events':>10} {'generate s':>11} {'job s':>8} {'events/s':>10} "
        f"{'size ratio':>11} {'time ratio':>11}"
    )
    lines = [header, "-" * len(header)]
    previous: Measurement | None = None
    for m in results:
        size_ratio = f"{m.events / previous.events:.2f}" if previous else "-"
        time_ratio = f"{m.job_seconds / previous.job_seconds:.2f}" if previous else "-"
        lines.append(
            f"{m.events:>10,} {m.generate_seconds:>11.1f} {m.job_seconds:>8.1f} "
            f"{m.events_per_second:>10,.0f} {size_ratio:>11} {time_ratio:>11}"
        )
        previous = m
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.analytics_bench",
        description="Events/s of the analytics batch job for growing synthetic fleets.",
    )
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=list(DEFAULT_SIZES),
        help="comma-separated event counts (default 1000000,2000000,4000000)",
    )
    parser.add_argument("--groups", type=int, default=200, help="consumer groups (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=REPO_ROOT / ".cache" / "analytics-bench",
        help="where fleets and outputs go (default .cache/analytics-bench)",
    )
    parser.add_argument("--no-report", action="store_true", help="time the tables only")
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also print where each size's time went (Spark jobs and stages, event log)",
    )
    args = parser.parse_args(argv)
    workdir: Path = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)

    conf: dict[str, str] = {}
    event_log = workdir / "event-log"
    if args.stages:
        shutil.rmtree(event_log, ignore_errors=True)
        event_log.mkdir(parents=True)
        conf = {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_log.as_uri(),
            # Plain JSON lines that analytics_stages reads while the app still runs.
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
    spark = build_session(master=args.master, driver_memory=args.driver_memory, conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    report = not args.no_report
    warmup, _ = fleet_file(workdir, WARMUP_EVENTS, min(args.groups, 20), args.seed)
    run_batch(spark, [str(warmup)], workdir / "out-warmup", report=report)

    results: list[Measurement] = []
    for size in args.sizes:
        path, generated = fleet_file(workdir, size, args.groups, args.seed)
        output = workdir / f"out-{size}"
        shutil.rmtree(output, ignore_errors=True)
        since_ms = int(time.time() * 1000)
        result = run_batch(spark, [str(path)], output, report=report)
        results.append(Measurement(size, generated, result.seconds, result.rebalances))
        print(
            f"{size:,} events: {result.seconds:.1f}s, {result.rebalances:,} rebalances",
            file=sys.stderr,
        )
        if args.stages:
            jobs, stages = read_event_log(event_log)
            print(f"\n{size:,} events: where the time went\n")
            print(stage_table(jobs, stages, since_ms=since_ms, total_seconds=result.seconds))
            print()
            print(slowest_stages(jobs, stages, since_ms=since_ms))
            print()
    print(f"analytics batch job on {args.master}, {args.groups} groups, seed {args.seed}")
    print(table(results))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
