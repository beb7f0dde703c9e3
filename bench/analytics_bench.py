"""Throughput of the analytics batch job on ``local[2]``, its scaling, and streaming keep-up.

    python -m bench.analytics_bench                       # 1M..8M events, Parquet + JSONL
    python -m bench.analytics_bench --sizes 250000,500000 --formats parquet --stages
    python -m bench.analytics_bench --sizes 20000 --stream-rates 500,1000  # needs Kafka

For each size: a synthetic fleet (``sidecar.analytics.generator``, cached in
``--workdir`` by size and seed; its Parquet copy made once with ``analytics convert``)
goes through the whole batch job (read, build the tables, write Parquet, render the
report) in one SparkSession that a small run warmed up first, so JIT compilation is not
billed to the first size. Printed: seconds and events/s per input format, for each
step the time ratio next to the size ratio, and the targets, met or missed:

- >= 150,000 events/s at 4M events from Parquet, >= 100,000 from JSONL;
- linear: each doubling of the events costs <= 2.1x the time.

Next to each run of the job, on the same input in the same session, three baselines
(bench/analytics_baseline.py): the read floor (the job's own read, nothing else), the
plain job the issue names (dedupe, one window, one group-by) and the write floor (the
job's tables written again). Printed with the job's time and CPU as multiples of the
plain job's, the floors' share of the job, and each rate target as a multiple of the
plain job's rate: how far a target is beyond what Spark does here with a minimal job.
``--no-baselines`` skips them.

``--stages`` adds, per size, where the time went (Spark jobs and stages from the
event log, see bench/analytics_stages.py). ``--stream-rates`` feeds the fleet topic
at each rate (events/s) for ``--stream-seconds`` and reports whether the streaming
job's tables stayed within two triggers of the input (the lag of every micro-batch:
from its oldest record's arrival in Kafka to the tables that include it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
from pyspark.sql import SparkSession

from bench.analytics_baseline import BASELINES, BaselineRun, run_baselines
from bench.analytics_stages import read_event_log, slowest_stages, stage_table
from sidecar.analytics.arguments import WINDOW_SECONDS
from sidecar.analytics.events import write_parquet_events
from sidecar.analytics.generator import FleetSpec, write_fleet_file
from sidecar.analytics.job import run_batch
from sidecar.analytics.session import REPO_ROOT, build_session, jar_paths

DEFAULT_SIZES = (1_000_000, 2_000_000, 4_000_000, 8_000_000)
WARMUP_EVENTS = 20_000
TARGET_SIZE = 4_000_000
TARGETS = {"parquet": 150_000.0, "jsonl": 100_000.0}  # events/s at TARGET_SIZE
MAX_DOUBLING = 2.1


@dataclass(frozen=True)
class Measurement:
    events: int
    form: str  # "parquet" or "jsonl"
    job_seconds: float
    rebalances: int
    cpu_seconds: float | None = None  # the Spark JVM's CPU (local masters only)

    @property
    def events_per_second(self) -> float:
        return self.events / self.job_seconds


class JvmCpu:
    """CPU seconds (user + system) of the session's JVM.

    On a ``local`` master that JVM is driver and executors both, so its CPU is the whole
    job's Spark work: a figure that other load on the machine inflates far less than
    wall time (which includes waiting for a core). None elsewhere (executors are other
    processes, maybe other hosts).
    """

    def __init__(self, spark: SparkSession, master: str) -> None:
        self._process: psutil.Process | None = None
        # local, local[N], local[*]; not local-cluster[...], whose executors are other JVMs.
        if master == "local" or master.startswith("local["):
            jvm = spark.sparkContext._jvm  # noqa: SLF001 - py4j's view: the JVM's own pid
            if jvm is not None:
                self._process = psutil.Process(jvm.java.lang.ProcessHandle.current().pid())

    def seconds(self) -> float | None:
        if self._process is None:
            return None
        try:
            times = self._process.cpu_times()
        except psutil.Error:  # the JVM is gone
            return None
        return times.user + times.system


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


def parquet_copy(spark: SparkSession, jsonl: Path) -> tuple[Path, float]:
    """``analytics convert`` of the fleet (once); seconds spent converting."""
    path = jsonl.with_suffix(".parquet")
    if (path / "_SUCCESS").exists():
        return path, 0.0
    started = time.monotonic()
    write_parquet_events(spark, [str(jsonl)], path)
    return path, time.monotonic() - started


def parse_list(text: str) -> list[int]:
    values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("expected positive integers, e.g. 1000000,2000000")
    return values


def curve(results: list[Measurement], form: str) -> str:
    header = (
        f"{'events':>10} {'job s':>8} {'events/s':>10} {'size ratio':>11} {'time ratio':>11}"
        f" {'JVM CPU s':>10} {'events/CPU-s':>13} {'CPU ratio':>10}"
    )
    lines = [f"from {form}:", header, "-" * len(header)]
    previous: Measurement | None = None
    for m in (r for r in results if r.form == form):
        size_ratio = f"{m.events / previous.events:.2f}" if previous else "-"
        time_ratio = f"{m.job_seconds / previous.job_seconds:.2f}" if previous else "-"
        cpu = per_cpu = cpu_ratio = "-"
        if m.cpu_seconds:
            cpu, per_cpu = f"{m.cpu_seconds:.1f}", f"{m.events / m.cpu_seconds:,.0f}"
            if previous and previous.cpu_seconds:
                cpu_ratio = f"{m.cpu_seconds / previous.cpu_seconds:.2f}"
        lines.append(
            f"{m.events:>10,} {m.job_seconds:>8.1f} {m.events_per_second:>10,.0f} "
            f"{size_ratio:>11} {time_ratio:>11} {cpu:>10} {per_cpu:>13} {cpu_ratio:>10}"
        )
        previous = m
    return "\n".join(lines)


def targets(results: list[Measurement]) -> list[str]:
    lines: list[str] = []
    for form, target in TARGETS.items():
        at_size = [m for m in results if m.form == form and m.events == TARGET_SIZE]
        label = f">= {target:,.0f} events/s at {TARGET_SIZE:,} events from {form}"
        if not at_size:
            lines.append(f"  {label}: not measured (size {TARGET_SIZE:,} not run)")
            continue
        rate = at_size[0].events_per_second
        lines.append(f"  {label}: {rate:,.0f} -> {'met' if rate >= target else 'MISSED'}")
    for form in TARGETS:
        runs = [m for m in results if m.form == form]
        steps = [
            (b.job_seconds / a.job_seconds, a.events, b.events)
            for a, b in itertools.pairwise(runs)
            if b.events == 2 * a.events
        ]
        if not steps:
            continue
        worst = max(steps)
        verdict = "met" if worst[0] <= MAX_DOUBLING else "MISSED"
        lines.append(
            f"  linear ({form}): each doubling <= {MAX_DOUBLING}x the time: worst "
            f"{worst[0]:.2f}x ({worst[1]:,} -> {worst[2]:,}) -> {verdict}"
        )
    return lines


def baseline_table(results: list[Measurement], baselines: list[BaselineRun], form: str) -> str:
    """Per size: each baseline's time and rate, and the job as a multiple of them."""
    header = (
        f"{'events':>10} {'read floor s':>13} {'plain job s':>12} {'events/s':>10}"
        f" {'write floor s':>14} {'job s':>8} {'job/plain time':>15} {'job/plain CPU':>14}"
        f" {'floors/job':>11}"
    )
    lines = [f"baselines from {form} (same input, same session):", header, "-" * len(header)]
    for m in (r for r in results if r.form == form):
        runs = {b.name: b for b in baselines if b.form == form and b.events == m.events}
        if set(runs) != set(BASELINES):
            continue
        floor, plain, write = runs["read floor"], runs["plain job"], runs["write floor"]
        cpu_ratio = "-"
        if m.cpu_seconds and plain.cpu_seconds:
            cpu_ratio = f"{m.cpu_seconds / plain.cpu_seconds:.2f}"
        floors = (floor.seconds + write.seconds) / m.job_seconds
        lines.append(
            f"{m.events:>10,} {floor.seconds:>13.1f} {plain.seconds:>12.1f}"
            f" {plain.events_per_second:>10,.0f} {write.seconds:>14.1f} {m.job_seconds:>8.1f}"
            f" {m.job_seconds / plain.seconds:>15.2f} {cpu_ratio:>14} {floors:>11.2f}"
        )
    return "\n".join(lines)


def target_against_baselines(baselines: list[BaselineRun]) -> list[str]:
    """Each rate target as a multiple of what the baselines reach at the target size."""
    lines: list[str] = []
    for form, target in TARGETS.items():
        runs = {b.name: b for b in baselines if b.form == form and b.events == TARGET_SIZE}
        if set(runs) != set(BASELINES):
            continue
        plain = runs["plain job"]
        floors = TARGET_SIZE / (runs["read floor"].seconds + runs["write floor"].seconds)
        lines.append(
            f"  {target:,.0f} events/s from {form}: {target / plain.events_per_second:.2f}x"
            f" the plain job's rate ({plain.events_per_second:,.0f}/s);"
            f" reading the events and writing the job's tables alone: {floors:,.0f}/s"
        )
    return lines


def kafka_jars() -> list[str]:
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "spark-jars.sh")],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return jar_paths(Path(done.stdout.strip().splitlines()[-1]))


def fleet_lines(path: Path) -> Iterator[bytes]:
    while True:  # a long run at a high rate may need the fleet more than once
        with path.open("rb") as handle:
            yield from (line.rstrip(b"\n") for line in handle)


def feed(bootstrap: str, topic: str, lines: Iterator[bytes], rate: int, seconds: float) -> int:
    """Produce ``rate`` events/s for ``seconds``, in 10 ms ticks; returns events sent."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    started = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(rate * elapsed)
        while sent < due:
            value = next(lines)
            producer.produce(topic, value=value, key=json.loads(value)["data"]["group_id"])
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)
    return sent


@dataclass(frozen=True)
class StreamRun:
    rate: int
    sent: int
    batches: int
    max_lag: float
    trigger: float
    lags: tuple[float, ...] = ()  # every micro-batch's, in order: does the lag grow?
    window: float | None = None  # --window-seconds of the stream (event time)

    @property
    def keeps_up(self) -> bool:
        return self.batches > 0 and self.max_lag <= 2 * self.trigger


def stream_run(
    spark: SparkSession,
    bootstrap: str,
    fleet: Path,
    workdir: Path,
    rate: int,
    seconds: float,
    trigger: float,
    window: float | None = None,
) -> StreamRun:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from sidecar.analytics.streaming import StreamOptions, start_stream

    topic = f"analytics-bench-{rate}-{int(time.time())}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(timeout=30)
    output = workdir / f"stream-{rate}"
    shutil.rmtree(output, ignore_errors=True)
    options = StreamOptions(
        inputs=[f"kafka://{bootstrap}/{topic}"],
        output=output,
        trigger_seconds=trigger,
        starting_offsets="earliest",
        window_seconds=window,
    )
    query, refresher = start_stream(spark, options)
    sent = 0

    def produce() -> None:
        nonlocal sent
        sent = feed(bootstrap, topic, fleet_lines(fleet), rate, seconds)

    producer = threading.Thread(target=produce, name="bench-feed")
    producer.start()
    producer.join()
    # The last events are in once the stream caught up: wait at most two triggers
    # (plus one batch) beyond the feed, then read the lags of every batch.
    deadline = time.monotonic() + 3 * trigger + 60
    while time.monotonic() < deadline:
        if sum(lag.records for lag in refresher.lags) >= sent:
            break
        time.sleep(0.5)
    query.stop()
    lags = [lag.lag_seconds for lag in refresher.lags]
    caught_up = sum(lag.records for lag in refresher.lags) >= sent
    return StreamRun(
        rate=rate,
        sent=sent,
        batches=len(lags),
        max_lag=max(lags) if lags and caught_up else float("inf"),
        trigger=trigger,
        lags=tuple(lags),
        window=window,
    )


def event_log_conf(event_log: Path) -> dict[str, str]:
    """Spark settings for an event log in ``event_log`` (emptied first), for --stages."""
    shutil.rmtree(event_log, ignore_errors=True)
    event_log.mkdir(parents=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_log.as_uri(),
        # Plain JSON lines that analytics_stages reads while the app still runs.
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def streaming_lines(
    streams: list[StreamRun], master: str, stream_seconds: float, trigger_seconds: float
) -> str:
    lines = [
        f"streaming on {master}: trigger {trigger_seconds:g}s, "
        f"{stream_seconds:g}s of feed per rate; keeps up = every batch's tables "
        f"within two triggers of its oldest record"
    ]
    for run in streams:
        window = "all events" if run.window is None else f"window {run.window:g}s"
        lines.append(
            f"  {run.rate:>7,} events/s ({window}): {run.sent:,} sent, {run.batches} batches, "
            f"max lag {run.max_lag:.1f}s -> {'keeps up' if run.keeps_up else 'falls behind'}; "
            f"lag per batch (s): {' '.join(f'{lag:.0f}' for lag in run.lags)}"
        )
    kept = [run.rate for run in streams if run.keeps_up]
    lines.append(
        f"  highest rate kept up with: {max(kept):,} events/s" if kept else "  none kept up"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.analytics_bench",
        description="Events/s of the analytics batch job for growing synthetic fleets, "
        "and the rates the streaming job keeps up with.",
    )
    parser.add_argument(
        "--sizes",
        type=parse_list,
        default=list(DEFAULT_SIZES),
        help="comma-separated event counts (default 1000000,2000000,4000000,8000000)",
    )
    parser.add_argument(
        "--formats",
        default="parquet,jsonl",
        help="inputs to time, comma-separated: parquet, jsonl (default both)",
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
        "--no-baselines",
        action="store_true",
        help="skip the read floor, the plain job and the write floor run next to each size",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also print where each run's time went (Spark jobs and stages, event log)",
    )
    parser.add_argument(
        "--stream-rates",
        type=parse_list,
        default=[],
        help="streaming: feed the topic at these events/s (needs Kafka; default: skip)",
    )
    parser.add_argument("--stream-seconds", type=float, default=60.0)
    parser.add_argument("--trigger-seconds", type=float, default=10.0)
    parser.add_argument(
        "--stream-windows",
        type=lambda text: [None if w == "all" else WINDOW_SECONDS(w) for w in text.split(",")],
        default=[None],
        help="streaming: --window-seconds of event time to run each rate with, "
        "comma-separated, 'all' for none (default all)",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:39092"),
        help="Kafka for --stream-rates (default $KAFKA_BOOTSTRAP_SERVERS)",
    )
    args = parser.parse_args(argv)
    workdir: Path = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    forms = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not set(forms) <= set(TARGETS):
        parser.error("--formats takes parquet and/or jsonl")

    event_log = workdir / "event-log"
    conf = event_log_conf(event_log) if args.stages else {}
    spark = build_session(
        master=args.master,
        driver_memory=args.driver_memory,
        conf=conf,
        jars=kafka_jars() if args.stream_rates else [],
    )
    spark.sparkContext.setLogLevel("ERROR")
    jvm_cpu = JvmCpu(spark, args.master)
    cpu = jvm_cpu.seconds
    report = not args.no_report
    warmup, _ = fleet_file(workdir, WARMUP_EVENTS, min(args.groups, 20), args.seed)
    warmup_parquet, _ = parquet_copy(spark, warmup)
    for path in (warmup, warmup_parquet):
        run_batch(spark, [str(path)], workdir / "out-warmup", report=report)

    if not args.no_baselines:  # their code paths compiled once, like the job's
        for form, path in (("jsonl", warmup), ("parquet", warmup_parquet)):
            plain_output, job_output = workdir / "out-warmup-plain", workdir / "out-warmup"
            run_baselines(spark, path, form, WARMUP_EVENTS, plain_output, job_output, cpu)

    results: list[Measurement] = []
    baselines: list[BaselineRun] = []
    prepared: list[str] = []
    for size in args.sizes:
        jsonl, generated = fleet_file(workdir, size, args.groups, args.seed)
        inputs = {"jsonl": jsonl}
        converted = 0.0
        if "parquet" in forms:
            inputs["parquet"], converted = parquet_copy(spark, jsonl)
        prepared.append(f"{size:,}: generated in {generated:.1f}s, converted in {converted:.1f}s")
        for form in forms:
            output = workdir / f"out-{size}-{form}"
            shutil.rmtree(output, ignore_errors=True)
            since_ms = int(time.time() * 1000)
            cpu_before = cpu()
            result = run_batch(spark, [str(inputs[form])], output, report=report)
            cpu_after = cpu()
            spent = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
            results.append(Measurement(size, form, result.seconds, result.rebalances, spent))
            print(
                f"{size:,} events from {form}: {result.seconds:.1f}s"
                + (f" ({spent:.1f} CPU-s in the JVM)" if spent is not None else "")
                + f", {result.rebalances:,} rebalances",
                file=sys.stderr,
            )
            if not args.no_baselines:
                plain_output = workdir / f"out-{size}-{form}-plain"
                baselines += run_baselines(
                    spark, inputs[form], form, size, plain_output, output, cpu
                )
            if args.stages:
                jobs, stages = read_event_log(event_log)
                print(f"\n{size:,} events from {form}: where the time went\n")
                print(stage_table(jobs, stages, since_ms=since_ms, total_seconds=result.seconds))
                print()
                print(slowest_stages(jobs, stages, since_ms=since_ms))
                print()

    streams = [
        stream_run(
            spark,
            args.bootstrap,
            fleet_file(workdir, max(args.sizes), args.groups, args.seed)[0],
            workdir,
            rate,
            args.stream_seconds,
            args.trigger_seconds,
            window,
        )
        for rate in args.stream_rates
        for window in args.stream_windows
    ]

    print(f"analytics batch job on {args.master}, {args.groups} groups, seed {args.seed}")
    print("inputs: " + "; ".join(prepared))
    for form in forms:
        print(curve(results, form))
    if baselines:
        for form in forms:
            print(baseline_table(results, baselines, form))
    print("targets (whole job: read, tables, write, report):")
    print("\n".join(targets(results)))
    against = target_against_baselines(baselines)
    if against:
        print("the rate targets against the baselines, at the target size:")
        print("\n".join(against))
    if streams:
        print(streaming_lines(streams, args.master, args.stream_seconds, args.trigger_seconds))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
