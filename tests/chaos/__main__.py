"""``python -m tests.chaos``: a chaos soak run; prints the report, exits 1 when it fails."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.chaos.harness import ChaosConfig, run_chaos


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos",
        description="Run sidecars, subscribers and a private Kafka broker under a seeded "
        "fault schedule, then check: nothing lost, no double ownership outside the cases "
        "the protocol allows, bounded stalls, no crash.",
    )
    parser.add_argument("--seed", type=int, default=1, help="schedule seed (default 1)")
    parser.add_argument("--faults", type=int, default=200, help="faults to inject (default 200)")
    parser.add_argument(
        "--minutes", type=float, default=20.0, help="spread the faults over this long (default 20)"
    )
    parser.add_argument("--members", type=int, default=4, help="sidecars, 2..8 (default 4)")
    parser.add_argument(
        "--statics", type=int, default=2, help="members with group.instance.id (default 2)"
    )
    parser.add_argument(
        "--strategy",
        default="range",
        help="partition.assignment.strategy: range (eager) or cooperative-sticky",
    )
    parser.add_argument(
        "--protocol",
        choices=("classic", "consumer"),
        default="classic",
        help="group protocol: classic (default) or consumer (KIP-848; the broker assigns "
        "and --strategy is ignored)",
    )
    parser.add_argument("--partitions", type=int, default=12, help="topic partitions (default 12)")
    parser.add_argument(
        "--revoke-timeout-ms", type=int, default=3000, help="SIDECAR_REVOKE_TIMEOUT_MS"
    )
    parser.add_argument(
        "--port", type=int, default=None, help="private broker port (default: a free one)"
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="data dirs and logs (default: a temp dir)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    parser.add_argument(
        "--stops-in-pauses",
        action="store_true",
        help="also stop members (SIGTERM) while the broker is paused, half the pauses",
    )
    args = parser.parse_args(argv)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rebalance-chaos-"))
    config = ChaosConfig(
        seed=args.seed,
        workdir=workdir,
        members=args.members,
        statics=args.statics,
        faults=args.faults,
        seconds=args.minutes * 60,
        strategy=args.strategy,
        protocol=args.protocol,
        partitions=args.partitions,
        revoke_timeout_ms=args.revoke_timeout_ms,
        stops_in_pauses=args.stops_in_pauses,
        port=args.port,
    )
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {line}", file=sys.stderr, flush=True)

    progress(f"workdir {workdir}")
    report = run_chaos(config, progress)
    print(report.format(), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report.as_dict(), indent=2, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
