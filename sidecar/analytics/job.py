"""``rebalance-sidecar analytics``: the batch and streaming entry points.

    rebalance-sidecar analytics --input journal.jsonl --output out/
    rebalance-sidecar analytics --input kafka://127.0.0.1:9092/fleet --output out/ \\
        --stream --trigger-seconds 30
    rebalance-sidecar analytics convert --input journal.jsonl --output journal.parquet

In-process use (tests, notebooks): :func:`run_batch` with a session, or
``build_tables(spark, events)`` from :mod:`sidecar.analytics.tables`.

What the options accept, and the checks that refuse bad input (exit code 2, one line)
before any Spark session starts: :mod:`sidecar.analytics.arguments`. A failure once the
job runs is one line and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import SparkSession

from . import session as sessions
from .arguments import (
    DEFAULT_DRIVER_MEMORY,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_USAGE,
    PARTITIONS,
    TIMEOUT_SECONDS,
    TRIGGER_SECONDS,
    WINDOW_SECONDS,
    JobError,
    Parser,
    UsageError,
    check_convert,
    check_job,
    dir_path,
    driver_memory,
    kafka_jars,
    one_line,
    path_text,
)
from .events import is_kafka_url, read_normalized, write_parquet_events
from .interrupt import Interrupt
from .output import REPORT_NAME, refresh, step
from .path_checks import check_replaceable
from .paths import PathOrUri, child, hadoop_lister, local_path, on_default_fs
from .streaming import StreamOptions, run_stream
from .tables import TABLE_NAMES

__all__ = ["JobError", "UsageError", "main", "run_batch"]


@dataclass(frozen=True)
class BatchResult(Generic[PathOrUri]):
    output: PathOrUri
    report: PathOrUri | None
    rebalances: int
    seconds: float


def run_batch(
    spark: SparkSession, inputs: Sequence[str], output: PathOrUri, *, report: bool = True
) -> BatchResult[PathOrUri]:
    """Build and write every table (and the report) under ``output``: a local ``Path``,
    or text, which may be a URI (``s3a://bucket/out``)."""
    started = time.monotonic()
    with step(spark, "read"):
        events = read_normalized(spark, inputs)
    rebalances = refresh(spark, events, output, report=report)
    return BatchResult(
        output=output,
        report=child(output, REPORT_NAME) if report else None,
        rebalances=rebalances,
        seconds=time.monotonic() - started,
    )


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="rebalance-sidecar analytics",
        description=(
            "Build fleet rebalance tables (Parquet: rebalances, ownership, downtime, "
            "members, summary, delivery) and report.html from sidecar events. They "
            "replace their namesakes in --output, which, if it exists, must be empty or "
            "hold only an earlier output of the job, or --overwrite be given."
        ),
        epilog=(
            "`rebalance-sidecar analytics convert --input X.jsonl --output X.parquet` "
            "turns a JSONL archive into Parquet, the fast input (see convert --help). " + EXIT_CODES
        ),
    )
    p.add_argument(
        "--input",
        "-i",
        action="extend",
        nargs="+",
        required=True,
        type=path_text,
        metavar="PATH_OR_URL",
        help="JSONL/Parquet files or directories, or kafka://host:port/topic",
    )
    _output_option(
        p,
        "output directory",
        "write into an --output that holds other files too (they stay; only the "
        "tables' and report.html's namesakes are replaced)",
    )
    p.add_argument(
        "--master",
        default="local[*]",
        help="Spark master when run from Python (default %(default)s)",
    )
    p.add_argument(
        "--stream",
        action="store_true",
        help="keep reading the Kafka topic and refresh the tables per micro-batch",
    )
    p.add_argument(
        "--trigger-seconds",
        type=TRIGGER_SECONDS,
        default=30.0,
        help="streaming: seconds between micro-batches (default %(default)s)",
    )
    p.add_argument(
        "--window-seconds",
        type=WINDOW_SECONDS,
        default=None,
        help="streaming: build the tables from the events of this much event time up to "
        "the newest read, not from all read so far, so that a micro-batch costs the same "
        "however long the stream has run (default: all)",
    )
    p.add_argument(
        "--timeout-seconds",
        type=TIMEOUT_SECONDS,
        default=None,
        help="streaming: stop after this long (default: run until interrupted)",
    )
    p.add_argument(
        "--starting-offsets",
        choices=("earliest", "latest"),
        default="earliest",
        help="streaming: where a new checkpoint starts reading (default %(default)s)",
    )
    p.add_argument(
        "--checkpoint",
        type=path_text,
        default=None,
        help="streaming: checkpoint directory (default OUTPUT/_checkpoint)",
    )
    p.add_argument(
        "--kafka-jars",
        type=dir_path,
        default=None,
        help="directory with the spark-sql-kafka jars (default: the cache "
        "scripts/spark-jars.sh fills, .cache/spark-jars/<pyspark version>)",
    )
    p.add_argument(
        "--packages",
        action="store_true",
        help="fetch the Kafka connector with spark.jars.packages instead",
    )
    p.add_argument(
        "--driver-memory",
        type=driver_memory,
        default=None,
        help="driver JVM memory for a local run: at least 512m, at most 80 %% of the "
        "memory (the host's or the container's, the smaller) and 512m less than it "
        "(default: spark.driver.memory from spark-defaults.conf, else "
        f"{DEFAULT_DRIVER_MEMORY} or that most when less)",
    )
    p.add_argument(
        "--shuffle-partitions",
        type=PARTITIONS,
        default=None,
        help="spark.sql.shuffle.partitions (default 16 locally)",
    )
    p.add_argument("--no-report", action="store_true", help="skip report.html")
    return p


def _output_option(p: argparse.ArgumentParser, what: str, overwrite: str) -> None:
    p.add_argument(
        "--output",
        "-o",
        required=True,
        type=path_text,
        metavar="PATH_OR_URI",
        help=f"{what}: a local path, or a URI Spark can write (s3a://, hdfs://, file://)",
    )
    p.add_argument("--overwrite", action="store_true", help=overwrite)


def _session(args: argparse.Namespace, managed: bool) -> SparkSession:
    if managed:
        # spark-submit (or a notebook) owns master, jars and memory.
        return sessions.apply_planner_conf(
            SparkSession.builder.appName("rebalance-analytics").getOrCreate()
        )
    needs_kafka = any(is_kafka_url(i) for i in args.input)
    jars: list[str] = []
    packages: list[str] = []
    if needs_kafka and args.packages:
        packages = [sessions.kafka_package()]
    elif needs_kafka:
        jars = kafka_jars(args.kafka_jars)
    conf = {}
    if args.shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(args.shuffle_partitions)
    return sessions.build_session(
        master=args.master,
        jars=jars,
        packages=packages,
        driver_memory=args.driver_memory,
        conf=conf,
    )


def convert_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="rebalance-sidecar analytics convert",
        description=(
            "Convert JSONL event archives to Parquet (the raw CloudEvent form with a "
            "`data` struct and `time` as a timestamp), the fast input of the job. "
            "Records that the job would drop are dropped here too. It replaces the whole "
            "--output directory: one that exists must be empty or an earlier convert "
            "output (a Parquet dataset: part-* files, _SUCCESS, .crc files, key=value "
            "directories), or --overwrite be given."
        ),
        epilog=EXIT_CODES,
    )
    p.add_argument(
        "--input",
        "-i",
        action="extend",
        nargs="+",
        required=True,
        type=path_text,
        metavar="PATH",
        help="JSONL (or Parquet) files or directories",
    )
    _output_option(
        p,
        "Parquet directory to write",
        "replace an --output that holds anything but an earlier convert output "
        "(everything in it is deleted)",
    )
    p.add_argument("--master", default="local[*]", help="Spark master (default %(default)s)")
    p.add_argument(
        "--driver-memory",
        type=driver_memory,
        default=None,
        help="driver memory: at least 512m, at most 80 %% of the memory (the host's or "
        "the container's, the smaller) and 512m less than it (default: spark.driver.memory "
        f"from spark-defaults.conf, else {DEFAULT_DRIVER_MEMORY} or that most when less)",
    )
    return p


def convert_main(argv: Sequence[str], *, managed_session: bool = False) -> int:
    args = convert_parser().parse_args(argv)
    if any(is_kafka_url(i) for i in args.input):
        return _refuse("convert reads files only")
    return _guarded(lambda interrupt: _convert(args, managed_session, interrupt))


def _convert(args: argparse.Namespace, managed_session: bool, interrupt: Interrupt) -> int:
    check_convert(args, managed_session)
    interrupt.hold()
    spark = (
        sessions.apply_planner_conf(
            SparkSession.builder.appName("rebalance-analytics-convert").getOrCreate()
        )
        if managed_session
        else sessions.build_session(master=args.master, driver_memory=args.driver_memory)
    )
    interrupt.install(spark)
    spark.sparkContext.setLogLevel("ERROR")
    _check_output_there(spark, args, managed_session, convert=True)
    *inputs, output = _placed(spark, [*args.input, args.output], managed_session)
    started = time.monotonic()
    with step(spark, "convert"):
        write_parquet_events(spark, inputs, output)
    print(f"wrote {output} ({time.monotonic() - started:.1f}s)", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None, *, managed_session: bool = False) -> int:
    """CLI entry; ``managed_session`` = running under spark-submit (see submit.py)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["convert"]:
        return convert_main(arguments[1:], managed_session=managed_session)
    args = parser().parse_args(arguments)
    if args.stream and not all(is_kafka_url(i) for i in args.input):
        return _refuse("--stream reads Kafka only (kafka://host:port/topic)")

    def run(interrupt: Interrupt) -> int:
        check_job(args, managed_session)
        return _run(args, managed_session, interrupt)

    return _guarded(run)


def _guarded(run: Callable[[Interrupt], int]) -> int:
    """``run``'s exit code; an error is one line (see :func:`_failed`), and Ctrl-C ends
    it with Spark stopped, ``interrupted`` and exit code 130 (see :mod:`.interrupt`)."""
    interrupt = Interrupt()
    try:
        code = run(interrupt)
        # Before uninstall(): a second Ctrl-C while finish() waits for Spark to stop
        # must still find this module's handler (exit now), not PySpark's.
        return interrupt.finish() if interrupt.requested else code
    except KeyboardInterrupt:  # before the session was up, so before install()
        return interrupt.finish()
    except (JobError, ValueError, PySparkException, Py4JError) as error:
        return interrupt.finish() if interrupt.requested else _failed(error)
    except Exception:
        if interrupt.requested:  # whatever the session's stop made the main thread raise
            return interrupt.finish()
        raise
    finally:
        interrupt.uninstall()


def _check_output_there(
    spark: SparkSession, args: argparse.Namespace, managed: bool, *, convert: bool
) -> None:
    """The --overwrite rule for an output only Hadoop reaches (a URI; under spark-submit
    also a path without a scheme, on the cluster's default file system); a local one
    was checked before the session started."""
    if managed or local_path(args.output) is None:
        check_replaceable(args, hadoop_lister(spark), convert=convert)


def _placed(spark: SparkSession, targets: Sequence[str], managed: bool) -> list[str]:
    """Where the job's paths are. One without a scheme is on Spark's default file system
    (``fs.defaultFS``), where Spark reads and writes it. Under spark-submit (HDFS on
    YARN, say) each is qualified here (``hdfs://nn:8020/user/me/out``, or ``file:/...``
    when that file system is local), so that what the job reads and writes itself (the
    input's format, the output directory, report.html) is on the same file system as
    what Spark writes. A local run checked its paths on this machine before the session
    started and keeps them as given; a default file system that is not this machine's
    (``HADOOP_CONF_DIR`` naming HDFS) is refused, as it would split the output between
    two file systems."""
    placed = [on_default_fs(spark, target) for target in targets]
    if managed:
        return placed
    for given, where in zip(targets, placed, strict=True):
        if where != given and local_path(where) is None:  # no scheme, not local
            raise UsageError(
                f"{given}: Spark's default file system puts it at {where}, not on this "
                "machine; give a full URI (file:///... for a local path)"
            )
    return list(targets)


def _refuse(message: str) -> int:
    print(f"error: {one_line(message)}", file=sys.stderr)
    return EXIT_USAGE


def _failed(error: Exception) -> int:
    """One line for an error: exit 2 for bad input (also a path Spark found missing, as
    under spark-submit, where the paths are the cluster's to check), else 1."""
    if isinstance(error, UsageError):
        return _refuse(str(error))
    text = _java_error(error) if isinstance(error, Py4JJavaError) else str(error).strip()
    first_line = text.splitlines()[0] if text else repr(error)
    print(f"error: {first_line}", file=sys.stderr)
    path_not_found = isinstance(error, AnalysisException) and (
        error.getCondition() == "PATH_NOT_FOUND"
    )
    return EXIT_USAGE if path_not_found else EXIT_FAILED


def _java_error(error: Py4JJavaError) -> str:
    """The Java exception's own message (py4j's first line only names the call)."""
    try:
        return str(error.java_exception.toString()).strip()
    except Py4JError:
        return str(error).strip()


def _run(args: argparse.Namespace, managed_session: bool, interrupt: Interrupt) -> int:
    interrupt.hold()
    spark = _session(args, managed_session)
    interrupt.install(spark)
    spark.sparkContext.setLogLevel("ERROR")
    _check_output_there(spark, args, managed_session, convert=False)
    *inputs, output = _placed(spark, [*args.input, args.output], managed_session)
    if args.stream:
        options = StreamOptions(
            inputs=tuple(inputs),
            output=output,
            trigger_seconds=args.trigger_seconds,
            checkpoint=args.checkpoint,
            starting_offsets=args.starting_offsets,
            report=not args.no_report,
            window_seconds=args.window_seconds,
        )
        batches = run_stream(spark, options, timeout_seconds=args.timeout_seconds)
        print(f"streamed {batches} micro-batches into {output}", file=sys.stderr)
        return 0
    result = run_batch(spark, inputs, output, report=not args.no_report)
    print(
        f"wrote {', '.join(TABLE_NAMES)} to {output} "
        f"({result.rebalances} rebalances, {result.seconds:.1f}s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
