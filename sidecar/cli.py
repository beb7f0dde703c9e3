"""Commands: ``run``, ``demo``, ``analytics``, ``journal export``.

Settings problems end the process with one line naming the setting and exit code 2,
never a traceback: that is what an operator reading ``kubectl logs`` needs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from sidecar import logs
from sidecar.settings import InvalidSettings, Settings, load_settings

EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "analytics":
        from sidecar.analytics.job import main as analytics_main

        return analytics_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "run":
            return _run(args.config)
        if args.command == "demo":
            from sidecar.demo import run_demo

            return run_demo(port=args.port, peers=args.peers, data_dir=args.data_dir)
        if args.command == "journal":
            return _export(args)
    except InvalidSettings as exc:
        print(f"rebalance-sidecar: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    parser.print_help()
    return EXIT_USAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rebalance-sidecar",
        description="Join a Kafka consumer group for an application and turn its rebalances "
        "into signed, durable, ordered webhooks, SSE and a journal.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run the sidecar (settings from SIDECAR_* environment variables)",
        description="Run the sidecar. Settings come from SIDECAR_* environment variables and "
        "an optional YAML/TOML file (SIDECAR_CONFIG_FILE or --config); the README lists them.",
    )
    run.add_argument("--config", type=Path, help="YAML or TOML settings file")
    demo = commands.add_parser(
        "demo",
        help="run against an embedded mock cluster with simulated peers (no Kafka, no Java)",
        description="Start librdkafka's mock cluster, a topic, this sidecar and a few "
        "simulated peer members that join and leave, so you can watch /assignment and "
        "/events change.",
    )
    demo.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    demo.add_argument("--peers", type=int, default=2, help="simulated peers (default 2)")
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="journal directory (default: a temporary directory)",
    )
    commands.add_parser(
        "analytics",
        help="fleet rebalance analytics on Spark (run `analytics --help`)",
        add_help=False,
    )
    journal = commands.add_parser("journal", help="journal tools")
    journal_commands = journal.add_subparsers(
        dest="journal_command", metavar="ACTION", required=True
    )
    export = journal_commands.add_parser(
        "export",
        help="write the journal's events as JSONL (one CloudEvent per line)",
        description="Export the local journal as JSONL, the input format of `analytics`.",
    )
    export.add_argument("--data-dir", type=Path, required=True, help="SIDECAR_DATA_DIR")
    export.add_argument("--output", type=Path, default=None, help="file (default: stdout)")
    export.add_argument("--after", type=int, default=0, help="only events after this sequence")
    return parser


def _run(config: Path | None) -> int:
    settings = load_settings(os.environ, config)
    settings.require_group()
    _check_resolvable(settings)
    _check_declared_webhooks(settings)
    logs.configure(settings.log_level, settings.log_format)
    return run_sidecar(settings)


def run_sidecar(settings: Settings) -> int:
    from sidecar.daemon import Sidecar, StartupError

    try:
        return asyncio.run(Sidecar(settings).run())
    except StartupError as exc:
        print(f"rebalance-sidecar: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _check_resolvable(settings: Settings) -> None:
    """Fail fast when no bootstrap host resolves: that is a typo, not an outage."""
    assert settings.bootstrap_servers
    problems = []
    for entry in settings.bootstrap_servers.split(","):
        host = entry.strip().split("://")[-1].rsplit(":", 1)[0].strip("[]")
        try:
            socket.getaddrinfo(host, None)
        except (socket.gaierror, UnicodeError) as exc:
            problems.append(f"{host}: {exc}")
        else:
            return
    raise InvalidSettings(
        "invalid setting SIDECAR_BOOTSTRAP_SERVERS: no host resolves (" + "; ".join(problems) + ")"
    )


def _check_declared_webhooks(settings: Settings) -> None:
    from sidecar.subscriptions import InvalidSubscription, check_events, check_secret, check_url

    for index, spec in enumerate(settings.webhooks):
        try:
            check_url(spec.url, settings.webhook_allowed_hosts)
            check_secret(spec.secret.get_secret_value())
            check_events(spec.events)
        except InvalidSubscription as exc:
            raise InvalidSettings(f"invalid setting SIDECAR_WEBHOOKS[{index}]: {exc}") from None


def _export(args: argparse.Namespace) -> int:
    from sidecar.journal import FILE_NAME, Journal

    if not (args.data_dir / FILE_NAME).exists():
        raise InvalidSettings(f"--data-dir: no journal in {args.data_dir}")
    journal = Journal(args.data_dir, durable=False)
    try:
        if args.output is None:
            count = journal.export_jsonl(sys.stdout, after=args.after)
        else:
            with args.output.open("w") as out:
                count = journal.export_jsonl(out, after=args.after)
    finally:
        journal.close()
    print(f"exported {count} events", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
