"""Commands: ``run``, ``demo``, ``settings``, ``analytics``, ``journal export``.

Settings problems end the process with one line naming the setting and exit code 2,
never a traceback: that is what an operator reading ``kubectl logs`` needs.

As a container's PID 1 the process gets no default action for SIGTERM: a signal that
arrives before a handler exists is simply lost. So ``main`` installs one first, before
the heavy imports (pydantic, confluent-kafka, uvicorn); until the daemon takes over the
signals, a SIGTERM or SIGINT means a clean exit 0. This module therefore imports only
the standard library at the top.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from sidecar.argtypes import bounded_int
from sidecar.errors import JOURNAL_FAILED_EXIT
from sidecar.output_files import (
    CommandFailed,
    OutputFailed,
    ReaderGone,
    reason,
    replacing,
    writing_stdout,
)

if TYPE_CHECKING:
    from sidecar.settings import Settings

EXIT_USAGE = 2
#: The command was right but the machine failed it (a full disk, an I/O error writing).
EXIT_FAILED = 1
#: A reader that stopped reading (``journal export | head``): the shell's code for SIGPIPE.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Stopped(BaseException):
    """A stop signal before the daemon's own handling: unwinds to ``main``, exit 0.

    A ``BaseException`` so no ``except Exception`` on the way swallows it.
    """


class _EarlySignals:
    """Signal handling from the first instant until the daemon installs its own.

    Before start-up has anything to undo, a signal unwinds the stack (``_Stopped``).
    Once threads are being started (``defer``), it is only recorded, and the daemon is
    asked to stop as soon as its own handlers are in place (``hand_over``): the normal
    drain, leaving the group.
    """

    def __init__(self) -> None:
        self.received: int | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # main() called from a thread (a test, an embedding): not ours to handle
        for signum in _STOP_SIGNALS:
            signal.signal(signum, self._unwind)

    def _unwind(self, signum: int, frame: object) -> None:
        self.received = signum
        raise _Stopped

    def _record(self, signum: int, frame: object) -> None:
        self.received = signum

    def restore(self) -> None:
        """For the commands that are not the daemon (export, analytics): the usual
        handling, so an interrupted export is exit 130, not a clean 0."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def defer(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in _STOP_SIGNALS:
            signal.signal(signum, self._record)

    def hand_over(self, request_stop: Callable[[], None]) -> None:
        """Called once the daemon handles the signals itself."""
        if self.received is not None:
            request_stop()


_signals = _EarlySignals()


def main(argv: Sequence[str] | None = None) -> int:
    _signals.install()
    try:
        return _main(argv)
    except _Stopped:
        return 0


def _main(argv: Sequence[str] | None) -> int:
    from sidecar.datadir import DataDirInUse
    from sidecar.settings import InvalidSettings

    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command not in ("run", "demo"):
        _signals.restore()
    if args.command == "analytics":
        return _analytics(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "run":
            return _run(args.config, args.env_file)
        if args.command == "demo":
            return _demo(args)
        if args.command == "settings":
            if (args.config or args.env_file) and not args.effective:
                parser.error("settings: --config and --env-file go with --effective")
            if args.effective:
                from sidecar.effective_settings import print_effective

                with writing_stdout():
                    return print_effective(os.environ, args.config, args.env_file)
            return _settings_table(args.write)
        if args.command == "journal":
            return _export(args)
    except (InvalidSettings, CommandFailed, DataDirInUse) as exc:
        print(f"rebalance-sidecar: {_as_one_line(str(exc))}", file=sys.stderr)
        return EXIT_FAILED if isinstance(exc, OutputFailed) else EXIT_USAGE
    except ReaderGone:
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return 130
    parser.print_help()
    return EXIT_USAGE


def _as_one_line(message: str) -> str:
    """A refusal as one line: what librdkafka or a name read from the environment brings
    (a trailing newline, one inside a variable's name) is shown, not obeyed."""
    return message.strip().replace("\r", "\\r").replace("\n", "\\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rebalance-sidecar")
    except PackageNotFoundError:  # a source checkout that was never installed
        return "unknown"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line like every other refusal (the usage itself
    is one ``--help`` away), and exit code 2 as argparse's own."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("rebalance-sidecar").strip()
        where = f"{command}: " if command else ""
        self.exit(EXIT_USAGE, f"rebalance-sidecar: {where}{message} (see {self.prog} --help)\n")


_PORT = bounded_int(0, 65535)  # 0: any free port (the demo picks one and prints it)
_SEQUENCE = bounded_int(0, 2**63 - 1)  # SQLite's INTEGER, the journal's sequences
_PEERS = bounded_int(0, 64)  # each peer is a consumer with its threads


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rebalance-sidecar",
        description="Join a Kafka consumer group for an application and turn its rebalances "
        "into signed, durable, ordered webhooks, SSE and a journal.",
        epilog="exit codes: 0 done or stopped by a signal (run); 1 failed while running (the "
        "output could not be written: a full disk; a listener of run died); 2 bad arguments, "
        f"settings or input; {JOURNAL_FAILED_EXIT} the journal failed, the member stopped (run); "
        "75 drained to load renewed TLS files (run); 78 Kafka kept refusing the credentials "
        f"(run); 130 interrupted; {EXIT_BROKEN_PIPE} the reader of stdout went away",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run the sidecar (settings from SIDECAR_* environment variables)",
        description="Run the sidecar. Settings come from SIDECAR_* environment variables, an "
        "optional dotenv file (SIDECAR_ENV_FILE or --env-file) and an optional YAML/TOML/JSON "
        "file (SIDECAR_CONFIG_FILE or --config), in that order of precedence; "
        "`rebalance-sidecar settings` lists them.",
    )
    run.add_argument("--config", type=Path, help="YAML, TOML or JSON settings file")
    run.add_argument("--env-file", type=Path, help="dotenv file of SIDECAR_* variables")
    demo = commands.add_parser(
        "demo",
        help="run against an embedded mock cluster with simulated peers (no Kafka, no Java)",
        description="Start librdkafka's mock cluster, a topic, this sidecar and a few "
        "simulated peer members that join and leave, so you can watch /assignment and "
        "/events change.",
    )
    demo.add_argument(
        "--port",
        type=_PORT,
        default=None,
        help="HTTP port (default SIDECAR_API_PORT, else 8080; 0: any free port)",
    )
    demo.add_argument("--peers", type=_PEERS, default=2, help="simulated peers, 0-64 (default 2)")
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="journal directory (default: a temporary directory)",
    )
    settings = commands.add_parser(
        "settings",
        help="print the settings as a Markdown table (docs/settings.md's)",
        description="Print every setting with its default and meaning as a Markdown table, "
        "generated from the settings' own descriptions. With --write FILE (repeatable), "
        "regenerate the table between the markers in FILE instead.",
    )
    settings.add_argument(
        "--write", type=Path, action="append", default=[], help="file with the table markers"
    )
    settings.add_argument(
        "--effective",
        action="store_true",
        help="the settings `run` would use, each with its source (default, environment, "
        "file), secrets redacted",
    )
    settings.add_argument("--config", type=Path, help="with --effective: as `run --config`")
    settings.add_argument("--env-file", type=Path, help="with --effective: as `run --env-file`")
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
    export.add_argument(
        "--after", type=_SEQUENCE, default=0, help="only events after this sequence"
    )
    return parser


def _run(config: Path | None, env_file: Path | None) -> int:
    import structlog

    from sidecar import __version__, logs, tracing
    from sidecar.datadir import lock_data_dir
    from sidecar.preflight import check_declared_webhooks, check_kafka_config, check_resolvable
    from sidecar.settings import InvalidSettings
    from sidecar.settings_sources import load_settings, unknown_variables, with_secret_files

    unknown = unknown_variables(environ := with_secret_files(os.environ))  # SIDECAR_<X>_FILE
    try:
        settings = load_settings(environ, config, env_file)
        settings.require_group()
    except InvalidSettings as exc:
        # A typo in a variable name is the likeliest cause of a missing setting.
        raise InvalidSettings("; ".join([str(exc), *unknown])) from None
    held = lock_data_dir(settings.data_dir)  # before anything touches the directory
    logs.configure(settings.log_level, settings.log_format)
    log = structlog.get_logger("sidecar.cli")
    for line in unknown:
        log.warning(line)
    check_resolvable(settings, warn=log.warning)
    check_kafka_config(settings)
    check_declared_webhooks(settings)
    tracing.install(tracing.from_environment(os.environ, __version__, log.warning))
    try:
        return run_sidecar(settings)
    finally:
        held.release()


def _demo(args: argparse.Namespace) -> int:
    from sidecar import logs
    from sidecar.datadir import lock_data_dir
    from sidecar.demo import demo_cluster
    from sidecar.demo_checks import check_demo_environment, check_port_free

    # All before the banner: a refusal is the only line.
    port = check_demo_environment(os.environ, args.port)
    check_port_free(port, "--port" if args.port is not None else "SIDECAR_API_PORT or --port")
    held = lock_data_dir(args.data_dir) if args.data_dir is not None else None
    logs.configure("info", "auto")
    _signals.defer()  # the demo starts threads (peers, the mock cluster) before the daemon
    try:
        with demo_cluster(port=port, peers=args.peers, data_dir=args.data_dir) as settings:
            return run_sidecar(settings)
    finally:
        if held is not None:
            held.release()


def _analytics(rest: list[str]) -> int:
    try:
        import pyspark  # noqa: F401  (the quick start installs no analytics extra)
    except ImportError:
        print(
            "rebalance-sidecar: analytics needs PySpark (and Java 17+): "
            "pip install 'rebalance-sidecar[analytics]' (in a checkout: "
            "scripts/bootstrap.sh analytics)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from sidecar.analytics.job import main as analytics_main

    return analytics_main(rest)


def run_sidecar(settings: Settings) -> int:
    import asyncio

    from sidecar.daemon import Sidecar, StartupError

    # From here on start-up starts threads: a signal is recorded, and acted on as a
    # normal drain once the daemon's own handlers are installed (its ``ready`` callback).
    _signals.defer()
    try:
        sidecar = Sidecar(settings)
        return asyncio.run(sidecar.run(ready=lambda _: _signals.hand_over(sidecar.request_stop)))
    except StartupError as exc:
        print(f"rebalance-sidecar: {_as_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE


def _settings_table(files: list[Path]) -> int:
    from sidecar.settings import InvalidSettings
    from sidecar.settings_table import markdown_table, rewrite_table

    if not files:
        with writing_stdout():
            print(markdown_table(), end="")
    # Every file is read and checked before the first is written: one bad --write
    # leaves them all as they were.
    rewritten = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandFailed(f"--write {path}: cannot read it: {reason(exc)}") from None
        except UnicodeDecodeError as exc:
            raise CommandFailed(
                f"--write {path}: not UTF-8 text (byte {exc.start}: {exc.reason})"
            ) from None
        try:
            rewritten.append((path, rewrite_table(text)))
        except InvalidSettings as exc:
            raise CommandFailed(f"--write {path}: {exc}") from None
    for path, text in rewritten:
        with replacing(path, "--write") as out:
            out.write(text)
    return 0


def _export(args: argparse.Namespace) -> int:
    import sqlite3

    from sidecar.journal import FILE_NAME, Journal, JournalUnopenable

    if not (args.data_dir / FILE_NAME).exists():
        raise CommandFailed(f"--data-dir: no journal in {args.data_dir}")
    with contextlib.suppress(OSError):
        if (args.data_dir / FILE_NAME).stat().st_size == 0:  # opening it would write one
            raise CommandFailed(f"--data-dir: the journal in {args.data_dir} is empty (0 bytes)")
    try:
        journal = Journal(args.data_dir, durable=False)
    except JournalUnopenable as exc:
        raise CommandFailed(f"--data-dir: {exc}") from None
    except OSError as exc:
        raise CommandFailed(f"--data-dir {args.data_dir}: {reason(exc)}") from None
    try:
        if args.output is not None and _is_journal_file(args.output, journal.path):
            raise CommandFailed(f"--output {args.output}: is the journal's own file")
        if args.output is None:
            with writing_stdout():  # a closed pipe or a full disk shows here, not at exit
                count = journal.export_jsonl(sys.stdout, after=args.after)
        else:
            with replacing(args.output, "--output") as out:
                count = journal.export_jsonl(out, after=args.after)
    except sqlite3.Error as exc:  # found corrupt while reading it: no output replaced
        raise CommandFailed(f"--data-dir: cannot read the journal {journal.path}: {exc}") from None
    finally:
        journal.close()
    print(f"exported {count} events", file=sys.stderr)
    return 0


def _is_journal_file(path: Path, journal: Path) -> bool:
    """``path`` is the journal or its write-ahead log or shared memory."""
    for own in (
        journal,
        journal.with_name(f"{journal.name}-wal"),
        journal.with_name(f"{journal.name}-shm"),
    ):
        with contextlib.suppress(OSError):
            if path.samefile(own):
                return True
    return False


if __name__ == "__main__":
    sys.exit(main())
