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
import errno
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from sidecar.argtypes import bounded_int
from sidecar.errors import JOURNAL_FAILED_EXIT

if TYPE_CHECKING:
    from sidecar.settings import Settings

EXIT_USAGE = 2
#: The command was right but the machine failed it (a full disk, an I/O error writing).
EXIT_FAILED = 1
#: A reader that stopped reading (``journal export | head``): the shell's code for SIGPIPE.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class CommandFailed(Exception):
    """Unusable input (a file it cannot read or write, a journal it cannot open): exit 2."""


class OutputFailed(CommandFailed):
    """Writing the command's output failed part way (a full disk, an I/O error): nothing
    was wrong with the command, so ``main`` exits 1, not 2, with one line."""


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
    from sidecar.settings import InvalidSettings

    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command not in ("run", "demo"):
        _signals.restore()
    if args.command == "analytics":
        from sidecar.analytics.job import main as analytics_main

        return analytics_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "run":
            return _run(args.config, args.env_file)
        if args.command == "demo":
            return _demo(args)
        if args.command == "settings":
            return _settings_table(args.write)
        if args.command == "journal":
            return _export(args)
    except (InvalidSettings, CommandFailed) as exc:
        print(f"rebalance-sidecar: {_as_one_line(str(exc))}", file=sys.stderr)
        return EXIT_FAILED if isinstance(exc, OutputFailed) else EXIT_USAGE
    except _ReaderGone:
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
        epilog="exit codes: 0 done or stopped by a signal (run); 1 failed while running "
        "(the output could not be written: a full disk; a listener of run died); 2 bad "
        "arguments, settings or input; "
        f"{JOURNAL_FAILED_EXIT} the journal failed, the member stopped (run); "
        f"130 interrupted; {EXIT_BROKEN_PIPE} the reader of stdout went away",
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
        "--port", type=_PORT, default=8080, help="HTTP port (default 8080; 0: any free port)"
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
        help="print the settings as a Markdown table (the README's)",
        description="Print every setting with its default and meaning as a Markdown table, "
        "generated from the settings' own descriptions. With --write FILE (repeatable), "
        "regenerate the table between the markers in FILE instead.",
    )
    settings.add_argument(
        "--write", type=Path, action="append", default=[], help="file with the table markers"
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
    export.add_argument(
        "--after", type=_SEQUENCE, default=0, help="only events after this sequence"
    )
    return parser


def _run(config: Path | None, env_file: Path | None) -> int:
    import structlog

    from sidecar import __version__, logs, tracing
    from sidecar.settings import InvalidSettings
    from sidecar.settings_sources import load_settings, unknown_variables

    unknown = unknown_variables(os.environ)
    try:
        settings = load_settings(os.environ, config, env_file)
        settings.require_group()
    except InvalidSettings as exc:
        # A typo in a variable name is the likeliest cause of a missing setting.
        raise InvalidSettings("; ".join([str(exc), *unknown])) from None
    logs.configure(settings.log_level, settings.log_format)
    log = structlog.get_logger("sidecar.cli")
    for line in unknown:
        log.warning(line)
    check_resolvable(settings, warn=log.warning)
    check_kafka_config(settings)
    _check_declared_webhooks(settings)
    tracing.install(tracing.from_environment(os.environ, __version__, log.warning))
    return run_sidecar(settings)


def _demo(args: argparse.Namespace) -> int:
    from sidecar import logs
    from sidecar.demo import demo_cluster

    logs.configure("info", "auto")
    _signals.defer()  # the demo starts threads (peers, the mock cluster) before the daemon
    with demo_cluster(port=args.port, peers=args.peers, data_dir=args.data_dir) as settings:
        return run_sidecar(settings)


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


_PERMANENT_DNS_ERRORS = frozenset(
    code
    for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None))
    if code is not None
)


def check_resolvable(
    settings: Settings,
    warn: Callable[..., Any],
    resolve: Callable[..., Any] = socket.getaddrinfo,
) -> None:
    """Fail fast when no bootstrap host exists: that is a typo, not an outage.

    Only a definite "no such name" counts. A temporary failure (``EAI_AGAIN``: the
    resolver is unreachable, as in a pod whose DNS is not up yet) is an outage that
    librdkafka rides out by retrying, so it is logged and start-up goes on.
    """
    from sidecar.settings import InvalidSettings

    assert settings.bootstrap_servers
    problems = []
    temporary = []
    for entry in settings.bootstrap_servers.split(","):
        host = entry.strip().split("://")[-1].rsplit(":", 1)[0].strip("[]")
        try:
            resolve(host, None)
        except UnicodeError as exc:
            problems.append(f"{host}: {exc}")
        except socket.gaierror as exc:
            if exc.errno in _PERMANENT_DNS_ERRORS:
                problems.append(f"{host}: {exc.strerror}")
            else:
                temporary.append(f"{host}: {exc.strerror}")
        else:
            return
    if temporary:
        warn(
            "bootstrap servers do not resolve yet; librdkafka keeps retrying",
            errors=problems + temporary,
        )
        return
    raise InvalidSettings(
        "invalid setting SIDECAR_BOOTSTRAP_SERVERS: no host resolves (" + "; ".join(problems) + ")"
    )


# The configuration check's logger: what its probe consumer logs goes nowhere.
_SILENT = logging.getLogger("rebalance-sidecar.config-check")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


def check_kafka_config(settings: Settings) -> None:
    """Let librdkafka judge the final configuration before anything starts.

    Constructing a ``Consumer`` validates every property (names, types, empty values,
    combinations such as ``session.timeout.ms`` with ``group.protocol=consumer``) without
    network I/O; a refusal here would otherwise kill the member thread with a traceback
    while the process keeps serving.
    """
    from confluent_kafka import Consumer, KafkaException

    from sidecar.settings import InvalidSettings

    # The probe's connection attempts to the brokers are not worth a line: its logger
    # drops them. Not ``log_level: 0``, which hid an invalid ``log_level`` of the user's
    # from the check (the member thread then died of it while the process served on).
    config = {**settings.consumer_config(), "logger": _SILENT}
    try:
        Consumer(config).close()
    except KafkaException as exc:
        error = exc.args[0]
        message = error.str() if hasattr(error, "str") else str(error)
        raise InvalidSettings(
            f"invalid setting {_culprits(config, message)}: librdkafka: {message}"
        ) from None
    except (TypeError, ValueError) as exc:
        # confluent-kafka's own properties, e.g. error_cb or stats_cb given as text: they
        # take Python callables, which no setting can give.
        raise InvalidSettings(
            f"invalid setting {_culprits(config, str(exc))}: confluent-kafka: {exc}"
        ) from None
    _check_subscription(settings, config)


def _check_subscription(settings: Settings, config: dict[str, Any]) -> None:
    """Let librdkafka judge the subscription too: its own regex engine (not Python's)
    refuses some patterns, e.g. ``(?:...)`` groups, and ``subscribe`` checks the assignment
    strategy. Refused, the member thread died at start while the process served on.

    The probe talks to librdkafka's in-process mock cluster only, in a group of its own,
    with none of the real settings but the two ``subscribe`` judges (the assignment
    strategy and the group protocol): no network, no credentials, no token fetch, so it
    can join nothing and hold nothing up.
    """
    from confluent_kafka import Consumer, KafkaException

    from sidecar.settings import InvalidSettings

    probe: dict[str, Any] = {
        "group.id": "rebalance-sidecar-probe",
        "test.mock.num.brokers": 1,
        "log_level": 0,
        **{
            k: config[k] for k in ("group.protocol", "partition.assignment.strategy") if k in config
        },
    }

    def refused(topics: list[str]) -> bool:
        consumer = Consumer(probe)
        try:
            consumer.subscribe(topics)
        except KafkaException:
            return True
        finally:
            consumer.close()
        return False

    if not settings.topics or not refused(list(settings.topics)):
        return
    patterns = [t for t in settings.topics if t.startswith("^") and refused([t])]
    if patterns:
        raise InvalidSettings(
            "invalid setting SIDECAR_TOPICS: librdkafka's regex engine refuses "
            + ", ".join(repr(p) for p in patterns)
            + " (no (?...) groups, lookarounds or backreferences)"
        )
    raise InvalidSettings(
        "invalid setting SIDECAR_TOPICS, SIDECAR_ASSIGNMENT_STRATEGY: librdkafka refuses "
        "the subscription"
    )


def _culprits(config: dict[str, Any], message: str) -> str:
    """The variables behind the properties of the configuration that librdkafka's (or
    confluent-kafka's) message names. Only those: a file name in the message
    (``dlopen() failed: /x.so``) is not a property."""
    import re

    from sidecar.kafka_properties import kafka_property_variable, setting_of_property

    names = []
    # librdkafka quotes property names in some messages and not in others.
    for prop in re.findall(r"\b[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*\b", message):
        if prop not in config:
            continue
        owner = setting_of_property(prop)
        name = owner if owner else kafka_property_variable(prop)
        if name not in names:
            names.append(name)
    return ", ".join(names) or "SIDECAR_KAFKA_*"


def _check_declared_webhooks(settings: Settings) -> None:
    from sidecar.settings import InvalidSettings
    from sidecar.subscriptions import InvalidSubscription, check_events, check_secret, check_url

    for index, spec in enumerate(settings.webhooks):
        try:
            check_url(spec.url, settings.webhook_allowed_hosts)
            check_secret(spec.secret.get_secret_value())
            check_events(spec.events)
        except InvalidSubscription as exc:
            raise InvalidSettings(f"invalid setting SIDECAR_WEBHOOKS[{index}]: {exc}") from None


def _settings_table(files: list[Path]) -> int:
    from sidecar.settings import InvalidSettings
    from sidecar.settings_table import markdown_table, rewrite_table

    if not files:
        with _writing_stdout():
            print(markdown_table(), end="")
    # Every file is read and checked before the first is written: one bad --write
    # leaves them all as they were.
    rewritten = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandFailed(f"--write {path}: cannot read it: {_reason(exc)}") from None
        except UnicodeDecodeError as exc:
            raise CommandFailed(
                f"--write {path}: not UTF-8 text (byte {exc.start}: {exc.reason})"
            ) from None
        try:
            rewritten.append((path, rewrite_table(text)))
        except InvalidSettings as exc:
            raise CommandFailed(f"--write {path}: {exc}") from None
    for path, text in rewritten:
        with _replacing(path, "--write") as out:
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
        raise CommandFailed(f"--data-dir {args.data_dir}: {_reason(exc)}") from None
    try:
        if args.output is not None and _is_journal_file(args.output, journal.path):
            raise CommandFailed(f"--output {args.output}: is the journal's own file")
        if args.output is None:
            with _writing_stdout():  # a closed pipe or a full disk shows here, not at exit
                count = journal.export_jsonl(sys.stdout, after=args.after)
        else:
            with _replacing(args.output, "--output") as out:
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


# Errors of the machine, not of the command: a full disk or quota, an I/O error.
_MACHINE_FAILED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


class _ReaderGone(Exception):
    """stdout's reader stopped reading (``| head``): ``main`` exits quietly with SIGPIPE's code."""


@contextlib.contextmanager
def _writing_stdout() -> Iterator[None]:
    """A block that writes to stdout, flushed at its end: a reader that went away ends the
    command quietly (``_ReaderGone``), a stdout that cannot take it (a full disk) is one
    line (``CommandFailed``). Either way stdout then points at /dev/null, so the flush at
    exit has nothing left to fail on."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise _ReaderGone from None
    except OSError as exc:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise OutputFailed(f"cannot write to stdout: {_reason(exc)}") from None


@contextlib.contextmanager
def _replacing(path: Path, option: str) -> Iterator[IO[str]]:
    """A text file that becomes ``path`` only once the block ends without an error.

    Until then ``path`` keeps what it had: the text goes to a temporary file beside it,
    synced and renamed over it at the end (a symbolic link is followed: its target is
    replaced). A ``path`` that is not a regular file (``/dev/null``, a FIFO,
    ``/dev/stdout``) is written as it is: there is nothing there to keep. Failures are
    ``CommandFailed`` naming ``option`` and ``path``; the temporary file never stays.
    """
    import stat
    import tempfile

    try:
        mode: int | None = path.stat().st_mode
    except FileNotFoundError:
        mode = None  # a new file (or a dangling link: its target is created)
    except OSError as exc:
        raise CommandFailed(f"{option} {path}: {_reason(exc)}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise CommandFailed(f"{option} {path}: is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        try:
            special = path.open("w", encoding="utf-8")
        except OSError as exc:
            raise CommandFailed(f"{option} {path}: {_reason(exc)}") from None
        try:
            with special:
                yield special
        except BrokenPipeError:  # --output /dev/stdout (or a FIFO) whose reader went away
            raise _ReaderGone from None
        except OSError as exc:
            raise OutputFailed(f"{option} {path}: {_reason(exc)}") from None
        return
    target = path.resolve()
    try:
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        failed = OutputFailed if exc.errno in _MACHINE_FAILED else CommandFailed
        raise failed(f"{option} {path}: {_reason(exc)}") from None
    renamed = False
    try:
        with open(fd, "w", encoding="utf-8") as out:
            # mkstemp's 0600 made what open() would have given: the old file's mode, or
            # the umask's for a new file.
            os.fchmod(fd, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
        renamed = True
    except OSError as exc:
        raise OutputFailed(f"{option} {path}: {_reason(exc)}") from None
    finally:
        if not renamed:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


if __name__ == "__main__":
    sys.exit(main())
