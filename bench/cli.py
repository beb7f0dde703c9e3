"""``python -m bench``: run the benchmark sections, print each figure against its baseline,
and write ``docs/benchmarks.md``."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from bench.common import (
    REPO,
    Context,
    SectionResult,
    Sizes,
    Stopwatch,
    Table,
    Target,
    machine,
    shipped_python,
)

SECTIONS: dict[str, str] = {
    "latency": "bench.latency",
    "rebalance": "bench.rebalance",
    "footprint": "bench.footprint",
    "http": "bench.http_api",
    "journal": "bench.journal_append",
    "scale": "bench.scale",
    "tracing": "bench.tracing_cost",
    "handover": "bench.handover.section",
    "image": "bench.image",
}
NEEDS_KAFKA = {"latency", "rebalance", "footprint", "http", "scale", "tracing", "handover"}
# Run only when asked (--only handover): about 22 minutes (10 of them the enforce pause per
# protocol), its own report (docs/handover.md).
# image: only when asked (--only image): it builds the image when missing (podman).
OPT_IN = {"handover", "image"}
KAFKA_SH = REPO / "deploy" / "local" / "kafka.sh"
BROKER_DATA = REPO / ".cache" / "kafka-bench"  # the broker the bench starts itself
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks.md"


def _install_wrk() -> None:
    """Every run uses the same load tool: install Debian's wrk when it is missing."""
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return
    print("bench: installing wrk (apt-get) ...", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "wrk"]):
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            print(f"bench: {' '.join(command)} failed: {done.stderr[-300:]}", file=sys.stderr)
            return


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Measure what the sidecar costs against baselines measured in the same run "
        "(latency, rebalance cost, footprint, HTTP, journal). A full run takes about "
        "14-16 minutes on 2 cores (the 30-member groups and the 1M-event journal are most "
        "of it) and writes docs/benchmarks.md.",
        epilog="Sections: " + ", ".join(SECTIONS) + " (handover only with --only: it compares "
        "the reference apps with a Java listener and Dapr under churn, and the enforce pause "
        "per protocol, about 22 minutes; "
        "--output docs/handover.md; image only with --only too: the image's size against its "
        "base, building it with scripts/image.sh when missing). Without --bootstrap, a "
        "broker is started "
        "with deploy/local/kafka.sh on --kafka-port (empty at each start, data in "
        ".cache/kafka-bench) and stopped "
        "afterwards. The document is written by a full run of every section, or wherever "
        "--output says.",
    )
    parser.add_argument("--bootstrap", help="an existing broker, host:port (default: start one)")
    parser.add_argument(
        "--kafka-port",
        type=int,
        default=int(os.environ.get("BENCH_KAFKA_PORT", "49092")),
        help="port for the broker started when --bootstrap is not given "
        "(default $BENCH_KAFKA_PORT or 49092)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: about 2 minutes")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(SECTIONS),
        metavar="SECTION",
        help="run only this section (repeatable): " + ", ".join(SECTIONS),
    )
    parser.add_argument("--repetitions", type=int, help="enforced rebalances per protocol/kind")
    parser.add_argument("--events", type=int, help="revoked events with one subscriber")
    parser.add_argument("--starts", type=int, help="timed sidecar starts")
    parser.add_argument("--window", type=float, help="seconds of each timed window")
    parser.add_argument(
        "--output", type=Path, help="Markdown report (default docs/benchmarks.md on a full run)"
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="where to write the raw figures as JSON (default: last-run.json in --work-dir)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=REPO / ".cache" / "bench",
        help="scratch space for journals and logs (default .cache/bench)",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="run nothing: rewrite the report (--output, default docs/benchmarks.md) from the "
        "raw figures of an earlier run (--json), e.g. after editing bench/findings.md",
    )
    parser.add_argument(
        "--load-tool",
        choices=["auto", "wrk", "python"],
        default="auto",
        help="HTTP load generator: wrk when installed (auto), or the raw-asyncio one",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.render is not None:
        return _render_again(args.render, args.output or DEFAULT_OUTPUT)
    sizes = Sizes.quick() if args.quick else Sizes.full()
    sizes = replace(
        sizes,
        **{
            name: value
            for name, value in (
                ("repetitions", args.repetitions),
                ("latency_events", args.events),
                ("starts", args.starts),
                ("window", args.window),
            )
            if value is not None
        },
    )
    chosen = [s for s in SECTIONS if (s in args.only if args.only else s not in OPT_IN)]
    output = args.output
    if output is None and not args.only and not args.quick:
        output = DEFAULT_OUTPUT
    load_tool = args.load_tool
    if load_tool in ("auto", "wrk") and "http" in chosen and not shutil.which("wrk"):
        _install_wrk()
    if load_tool == "auto":
        load_tool = "wrk" if shutil.which("wrk") else "python"
    elif load_tool == "wrk" and not shutil.which("wrk"):
        print("--load-tool wrk: wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2

    def say(line: str) -> None:
        print(line, flush=True)

    args.work_dir.mkdir(parents=True, exist_ok=True)
    description = machine()
    given = sys.argv[1:] if argv is None else list(argv)
    command = " ".join(["python -m bench", shlex.join(given)]).strip()
    say(f"bench: {command}")
    for key, value in description.items():
        say(f"  {key}: {value}")
    total = Stopwatch()
    results: list[SectionResult] = []
    broker_needed = bool(NEEDS_KAFKA & set(chosen))
    with _broker(args.bootstrap, args.kafka_port, broker_needed, say) as bootstrap:
        ctx = Context(
            bootstrap or "", sizes, args.work_dir.resolve(), say, load_tool, shipped_python()
        )
        for name in chosen:
            module = __import__(SECTIONS[name], fromlist=["run"])
            runner: Callable[[Context], SectionResult] = module.run
            watch = Stopwatch()
            say(f"\n== {name} ==")
            section = runner(ctx)
            section.seconds = watch.elapsed
            results.append(section)
            for target in section.targets:
                verdict = "met" if target.met else "MISSED"
                say(f"  target {target.what}: {target.goal}: {target.measured} -> {verdict}")
    description["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    say(f"\nbench: done in {total.elapsed:.0f} s")
    finished = dt.datetime.now(dt.UTC)
    if output is not None:
        from bench.report import render

        output.parent.mkdir(parents=True, exist_ok=True)
        findings = not set(chosen) <= OPT_IN  # bench/findings.md is about the main sections
        output.write_text(
            render(
                results,
                description,
                command,
                asdict(sizes),
                load_tool,
                total.elapsed,
                findings,
                finished=finished,
            )
        )
        say(f"bench: wrote {output}")
    raw: Path = args.json or args.work_dir / "last-run.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(
        json.dumps(
            {
                "machine": description,
                "command": command,
                "sizes": asdict(sizes),
                "load_tool": load_tool,
                "seconds": total.elapsed,
                "finished": finished.isoformat(),
                "sections": [asdict(r) for r in results],
            },
            indent=2,
            default=str,
        )
    )
    return 0


def _render_again(raw: Path, output: Path) -> int:
    from bench.report import render

    try:
        data = json.loads(raw.read_text())
        results = [
            SectionResult(
                **{
                    **section,
                    "tables": [Table(**t) for t in section["tables"]],
                    "targets": [Target(**t) for t in section["targets"]],
                }
            )
            for section in data["sections"]
        ]
        recorded = (data["machine"], data["command"], dict(data["sizes"]), data["load_tool"])
        seconds = float(data["seconds"])
        finished = _finished(data, raw)
    except OSError as exc:
        print(f"--render: cannot read {raw}: {exc.strerror}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        print(f"--render: {raw} is not the raw JSON of a bench run ({exc!r})", file=sys.stderr)
        return 2
    machine, command, sizes, load_tool = recorded
    # The sizes as recorded (a field added since is not shown with today's default), and
    # bench/findings.md only with the main sections, as when the run wrote its report.
    findings = not {r.key for r in results} <= OPT_IN
    text = render(results, machine, command, sizes, load_tool, seconds, findings, finished=finished)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
    except OSError as exc:
        print(f"--render: cannot write {output}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"bench: wrote {output} from {raw}")
    return 0


def _finished(data: dict[str, object], raw: Path) -> dt.datetime:
    """When the recorded run ended: as recorded, else (older files) when the file was written."""
    recorded = data.get("finished")
    if isinstance(recorded, str):
        when = dt.datetime.fromisoformat(recorded)
        return when.astimezone(dt.UTC) if when.tzinfo else when.replace(tzinfo=dt.UTC)
    return dt.datetime.fromtimestamp(raw.stat().st_mtime, dt.UTC)


@contextlib.contextmanager
def _broker(
    given: str | None, port: int, needed: bool, say: Callable[[str], None]
) -> Iterator[str | None]:
    if given or not needed:
        yield given
        return
    data = BROKER_DATA
    env = {**os.environ, "KAFKA_PORT": str(port), "KAFKA_DATA_DIR": str(data)}
    was_running = (
        subprocess.run([str(KAFKA_SH), "status"], env=env, capture_output=True).returncode == 0
    )
    # Empty unless running (kafka.sh fresh): topics of earlier runs are never deleted.
    if not was_running:
        say(f"bench: emptying the bench's broker ({data}); its last log goes to {data}.last-log")
    say(f"bench: starting a broker on 127.0.0.1:{port} (deploy/local/kafka.sh)")
    started = subprocess.run(
        [str(KAFKA_SH), "fresh"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if started.returncode != 0:
        raise SystemExit(f"kafka.sh fresh failed:\n{started.stderr[-4000:]}")
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        if not was_running:
            subprocess.run([str(KAFKA_SH), "stop"], env=env, capture_output=True, timeout=120)
