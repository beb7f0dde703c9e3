"""What ``rebalance-sidecar analytics`` (and ``analytics convert``) accept: option types
and the checks that run before any Spark session starts.

Bad input (an option's value, an input path that does not exist, an output that cannot
be a directory) ends the command with one line on stderr and exit code 2, before any
Spark session starts; a failure once the job runs is one line and exit code 1. Paths are
checked on this machine only for a session the job starts itself.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import stat
import sys
from pathlib import Path
from typing import NoReturn

from sidecar.argtypes import bounded_float, bounded_int

from . import session as sessions
from .events import KafkaInput, is_kafka_url
from .output import REPORT_NAME
from .paths import Lister, child, list_local, local_path
from .streaming import CHECKPOINT_DIR, EVENTS_DIR
from .tables import TABLE_NAMES

#: The job failed once started (Spark's first line of the error).
EXIT_FAILED = 1
#: Bad arguments or inputs, refused before anything started.
EXIT_USAGE = 2
EXIT_CODES = (
    "Exit codes: 0 done; 1 the job failed once started; 2 bad arguments or inputs "
    "(an option's value, a missing input path, an output that cannot be a directory, "
    "or that holds other files, without --overwrite), "
    "refused before Spark starts; 130 interrupted (Ctrl-C stops Spark). Errors are one "
    "line on stderr."
)


class JobError(Exception):
    """A problem with the job's inputs or set-up, reported without a traceback."""


class UsageError(JobError):
    """Arguments or inputs the job cannot use: one line, exit code 2, nothing started."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line like every other refusal of the command
    (the usage itself is one ``--help`` away), with argparse's exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(message: str) -> str:
    return " ".join(message.splitlines())


# Spark's trigger resolution is a millisecond; a micro-batch more than a day apart is a
# batch job. A stream stopped after more than a year: leave the timeout out.
TRIGGER_SECONDS = bounded_float(0.001, 86_400)
TIMEOUT_SECONDS = bounded_float(0.001, 365 * 86_400)
# A window of event time: at least a second, at most ten years.
WINDOW_SECONDS = bounded_float(1, 10 * 365 * 86_400)
# spark.sql.shuffle.partitions is a Java int.
PARTITIONS = bounded_int(1, 2**31 - 1)

# The JVM's -Xmx form, which the driver's memory becomes: a plain number is bytes there.
_MEMORY = re.compile(r"([0-9]+)([kmgt])", re.IGNORECASE)
_MEMORY_UNITS = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
# Spark refuses a heap under 450 MiB; 512m is the smallest round size the JVM gives that.
MIN_DRIVER_MEMORY = "512m"
#: The driver heap when --driver-memory is not given (lowered to what the machine allows).
DEFAULT_DRIVER_MEMORY = "2g"


def _memory_bytes(text: str) -> int | None:
    match = _MEMORY.fullmatch(text)
    return None if match is None else int(match[1]) * _MEMORY_UNITS[match[2].lower()]


def driver_memory(text: str) -> str:
    """An argparse ``type``: a JVM heap size (``2g``, ``512m``) of at least 512m."""
    size = _memory_bytes(text.strip())
    if size is None:
        raise argparse.ArgumentTypeError(
            f"not a memory size such as 2g or 512m (k, m, g or t): {text!r}"
        )
    if size < (_memory_bytes(MIN_DRIVER_MEMORY) or 0):
        raise argparse.ArgumentTypeError(f"must be at least {MIN_DRIVER_MEMORY}, not {text}")
    return text.strip()


def path_text(text: str) -> str:
    """An argparse ``type`` for paths: anything but the empty string (``Path("")`` is the
    current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path")
    return text


def dir_path(text: str) -> Path:
    return Path(path_text(text))


# The checks below run before any session starts. Paths are checked on this machine only
# for a session the job starts itself: under spark-submit a path without a scheme is on
# the cluster's default file system, and Spark's own PATH_NOT_FOUND is exit 2 there.


def check_job(args: argparse.Namespace, managed: bool) -> None:
    if args.window_seconds is not None and not args.stream:
        raise UsageError("--window-seconds applies to --stream only (a batch run reads all)")
    for text in args.input:
        if is_kafka_url(text):
            _check_kafka_url(text)
        elif not managed:
            _check_input(text)
    if managed:
        return
    _check_output("--output", args.output)
    if local_path(args.output) is not None:
        check_replaceable(args, list_local, convert=False)
    if args.stream and args.checkpoint is not None:
        _check_output("--checkpoint", args.checkpoint)
    if args.kafka_jars is not None and not args.kafka_jars.is_dir():
        raise UsageError(f"--kafka-jars {args.kafka_jars}: not a directory")
    if any(is_kafka_url(i) for i in args.input) and not args.packages:
        kafka_jars(args.kafka_jars)
    _check_master(args.master)
    args.driver_memory = _driver_memory(args.driver_memory)


def check_convert(args: argparse.Namespace, managed: bool) -> None:
    if managed:
        return
    for text in args.input:
        _check_input(text)
    _check_output("--output", args.output)
    # The output directory is replaced: an input inside it would be deleted before it is
    # read, and an output inside an input directory is read back as input next time.
    local = local_path(args.output)
    output = None if local is None else local.resolve()
    for text in args.input:
        for read in _local_matches(text):
            if output is not None and (
                output == read or output in read.parents or read in output.parents
            ):
                raise UsageError(
                    f"--output {args.output}: overlaps --input {text} "
                    "(convert replaces the whole output directory)"
                )
    if local is not None:
        check_replaceable(args, list_local, convert=True)
    _check_master(args.master)
    args.driver_memory = _driver_memory(args.driver_memory)


# Hadoop's glob characters; Python's glob knows all but the {a,b} alternatives.
_GLOB = re.compile(r"[*?\[{]")


def _local_matches(text: str) -> list[Path]:
    path = local_path(text)
    if path is None:
        return []
    if _GLOB.search(str(path)):
        return [Path(match).resolve() for match in glob.glob(str(path))]
    return [path.resolve()]


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def _check_input(text: str) -> None:
    path = local_path(text)
    if path is None:
        return
    if _GLOB.search(str(path)):
        if "{" not in str(path) and not glob.glob(str(path)):
            raise UsageError(f"--input {text}: no file matches")
        return
    try:
        mode = path.stat().st_mode
    except OSError as error:
        raise UsageError(f"--input {text}: {_reason(error)}") from None
    wanted = os.R_OK | os.X_OK if stat.S_ISDIR(mode) else os.R_OK
    if not os.access(path, wanted):
        raise UsageError(f"--input {text}: permission denied")


def _check_output(option: str, given: str) -> None:
    """``given`` is, or can be made, a directory this process may write in."""
    path = local_path(given)
    if path is None:
        return
    path = path.absolute()
    for existing in (path, *path.parents):
        try:
            mode = existing.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as error:
            raise UsageError(f"{option} {given}: {_reason(error)}") from None
        if not stat.S_ISDIR(mode):
            where = "" if existing == path else f"{existing} "
            raise UsageError(f"{option} {given}: {where}is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {given}: permission denied")
        return


def check_replaceable(args: argparse.Namespace, lister: Lister, *, convert: bool) -> None:
    """Without ``--overwrite``, an existing ``--output`` must be empty or look like an
    earlier output of the same command: ``convert`` replaces the whole directory, the job
    its tables, ``report.html`` (and, streaming, ``_events``) in it. ``lister`` reaches
    the output's file system (this machine's, or Hadoop's for a URI)."""
    if args.overwrite:
        return
    entries = lister(args.output)
    if not entries:  # missing, or empty (not a directory: refused elsewhere)
        return
    if convert and not _converted(lister, args.output, entries):
        raise UsageError(
            f"--output {args.output}: not empty and not a Parquet dataset convert wrote "
            "(convert replaces the whole directory); pass --overwrite to replace it"
        )
    if not convert and not _job_output(lister, args.output, entries):
        raise UsageError(
            f"--output {args.output}: not empty and not an earlier output of the job "
            "(it replaces its tables and report.html there); pass --overwrite to write there"
        )


#: Files Spark writes into a Parquet dataset besides its parts: the job's marker and the
#: summary files of ``parquet.summary.metadata.level``.
_DATASET_FILES = {"_SUCCESS", "_metadata", "_common_metadata"}


def _hidden(name: str) -> bool:
    """A dot-file: Hadoop's ``.crc`` checksums, ``.DS_Store``, an editor's or NFS's."""
    return name.startswith(".")


def _parquet_dataset(lister: Lister, where: str, entries: list[tuple[str, bool]] | None) -> bool:
    """Only what Spark writes for a Parquet dataset: ``part-*`` files, ``_SUCCESS``, the
    summary files ``_metadata`` and ``_common_metadata``, a failed write's ``_temporary``
    or ``.spark-staging-*``, the S3A magic committer's ``__magic*``, ``key=value``
    partition directories holding the same, and hidden files (``.crc`` checksums,
    ``.DS_Store``)."""
    if entries is None:
        return False
    for name, is_dir in entries:
        if not is_dir:
            if not (name in _DATASET_FILES or name.startswith("part-") or _hidden(name)):
                return False
        elif not (
            name == "_temporary"
            or name.startswith(("__magic", ".spark-staging-"))
            or (
                "=" in name
                and not name.startswith(("_", "."))
                and _parquet_dataset(lister, child(where, name), lister(child(where, name)))
            )
        ):
            return False
    return True


def _converted(lister: Lister, where: str, entries: list[tuple[str, bool]]) -> bool:
    """A dataset convert wrote: as :func:`_parquet_dataset`, and not hidden files only
    (convert deletes the whole directory: a new account's home holds only those)."""
    return _parquet_dataset(lister, where, entries) and not all(
        _hidden(name) and not is_dir for name, is_dir in entries
    )


def _job_output(lister: Lister, where: str, entries: list[tuple[str, bool]]) -> bool:
    """Only what the job (batch or streaming) writes under its ``--output``, and hidden
    files (which it leaves alone)."""
    for name, is_dir in entries:
        if name in {*TABLE_NAMES, EVENTS_DIR}:
            ok = is_dir and _parquet_dataset(lister, child(where, name), lister(child(where, name)))
        elif name == CHECKPOINT_DIR:
            ok = is_dir
        elif is_dir:
            ok = False
        else:
            ok = name in {REPORT_NAME, f"{REPORT_NAME}.partial"} or _hidden(name)
        if not ok:
            return False
    return True


def _check_kafka_url(text: str) -> None:
    try:
        source = KafkaInput.parse(text)
    except ValueError as error:
        raise UsageError(f"--input: {error}") from None
    for server in source.bootstrap_servers.split(","):
        host, _, port = server.rpartition(":")
        if not host or not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536:
            raise UsageError(f"--input {text}: {server!r} is not host:port")


def kafka_jars(explicit: Path | None) -> list[str]:
    jars = sessions.jar_paths(sessions.kafka_jars_dir(explicit))
    if jars:
        return jars
    if explicit is not None:
        raise UsageError(f"--kafka-jars {explicit}: no jars in it")
    raise UsageError(
        "no spark-sql-kafka jars found; run scripts/spark-jars.sh, "
        "or pass --kafka-jars DIR or --packages"
    )


# Spark's local masters (local-cluster[...] and the cluster URLs are Spark's to judge).
_LOCAL_MASTER = re.compile(r"local(\[([1-9][0-9]{0,5}|\*)(\s*,\s*[0-9]{1,5})?\])?")


def _check_master(master: str) -> None:
    local = master.startswith("local") and not master.startswith("local-cluster")
    if local and not _LOCAL_MASTER.fullmatch(master):
        raise UsageError(
            f"--master {master}: expected local, local[N], local[*] or local[N,F] "
            "(N threads, at least 1; F task failures)"
        )


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Which cgroups this process is in: ``hierarchy:controllers:path`` lines.
PROC_CGROUP = Path("/proc/self/cgroup")


def _own_cgroups(proc_cgroup: Path) -> tuple[str, str]:
    """(cgroup v2 path, v1 memory controller path) of this process, ``/`` when unknown.
    A path outside this cgroup namespace (``/..``) says nothing about the mount here."""
    v2 = v1 = "/"
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return v2, v1
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if ".." in path.split("/"):
            continue
        if hierarchy == "0" and not controllers:
            v2 = path or "/"
        elif "memory" in controllers.split(","):
            v1 = path or "/"
    return v2, v1


def _up_to(base: Path, cgroup: str) -> list[Path]:
    """``base/cgroup`` and each directory above it, up to ``base`` itself."""
    parts = [part for part in cgroup.split("/") if part]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _limit_in(file: Path) -> int | None:
    try:
        value = file.read_text().strip()
    except OSError:
        return None
    return int(value) if value.isdigit() else None  # "max": none


def cgroup_memory_limit(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int | None:
    """The memory limit of this process's container: the smallest limit of its own cgroup
    (from ``proc_cgroup``) and every one above it, as cgroup v2's ``memory.max`` under
    ``root``, or v1's ``memory.limit_in_bytes`` under ``root/memory`` (or ``root``, a
    v1 memory controller mounted there). Walking up also finds the limit of a container
    whose own cgroup is mounted at ``root`` while ``proc_cgroup`` names its path on the
    host. None when there is none (``max``, no such file; v1's "unlimited" is a number
    past any machine's memory, which the physical memory then undercuts)."""
    v2, v1 = _own_cgroups(proc_cgroup)
    files = [directory / "memory.max" for directory in _up_to(root, v2)]
    files += [d / "memory.limit_in_bytes" for d in (*_up_to(root / "memory", v1), root)]
    limits = [limit for limit in map(_limit_in, files) if limit is not None]
    return min(limits, default=None)


def memory_available(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int | None:
    """What a local driver's process may use: the machine's memory or the container's
    limit, whichever is smaller."""
    known = [
        m for m in (_physical_memory(), cgroup_memory_limit(root, proc_cgroup)) if m is not None
    ]
    return min(known, default=None)


#: The share of :func:`memory_available` a driver's heap may take, and the least it
#: leaves: the rest is for what the container holds besides the heap. Spark itself sizes
#: a driver's container as the heap plus max(10 %, 384 MiB) (spark.driver.memoryOverhead:
#: metaspace, code cache, thread stacks, Netty's direct buffers); the Python driver and
#: any Python workers come on top (a local[2] run with a 1g heap peaked at 1.06 GiB for
#: the JVM and its workers and 35 MiB for Python). 20 %, and at least 512 MiB, covers
#: that with room to spare; a heap at the whole limit was killed for memory.
HEAP_SHARE = 0.8
HEAP_HEADROOM = 512 * 2**20


def max_heap(available: int) -> int:
    """The largest driver heap that leaves room for the rest in ``available`` bytes."""
    return min(int(available * HEAP_SHARE), available - HEAP_HEADROOM)


def _driver_memory(given: str | None) -> str:
    """The one given, checked; else the default, lowered to what fits (never below the
    least a driver needs: then the check says why)."""
    if given is not None:
        _check_driver_memory(given)
        return given
    # spark-defaults.conf's own setting, as spark-submit would take it (the session's
    # explicit setting would otherwise override it without a word).
    site = sessions.site_default("spark.driver.memory", os.environ)
    if site:
        where = "spark.driver.memory in spark-defaults.conf"
        try:
            site = driver_memory(site)
        except argparse.ArgumentTypeError as error:
            raise UsageError(f"{where}: {error}") from None
        _check_driver_memory(site, where)
        return site
    total = memory_available(CGROUP_ROOT, PROC_CGROUP)
    default = _memory_bytes(DEFAULT_DRIVER_MEMORY)
    if total is None or default is None or default <= max_heap(total):
        return DEFAULT_DRIVER_MEMORY
    least = _memory_bytes(MIN_DRIVER_MEMORY) or 0
    if max_heap(total) < least:
        raise UsageError(
            f"this machine's or container's memory ({total >> 20}m) leaves no room for the "
            f"least driver heap ({MIN_DRIVER_MEMORY}) next to the JVM's own memory and "
            f"Python's ({HEAP_HEADROOM >> 20}m or {100 - round(HEAP_SHARE * 100)} %): "
            "run it on a larger one, or on a cluster"
        )
    lowered = f"{max_heap(total) >> 20}m"
    print(
        f"note: --driver-memory not given (nor spark.driver.memory in spark-defaults.conf): "
        f"{lowered}, not the default {DEFAULT_DRIVER_MEMORY}, "
        f"which does not fit this machine's or container's memory ({total >> 20}m) with room "
        "for the JVM's own memory and Python",
        file=sys.stderr,
    )
    return lowered


def _check_driver_memory(memory: str, where: str = "--driver-memory") -> None:
    """A local driver's heap must fit the machine, or its container, with room for the
    JVM's own memory and Python's (else the JVM would not even start, or be killed for
    memory)."""
    size, total = _memory_bytes(memory), memory_available(CGROUP_ROOT, PROC_CGROUP)
    if size is not None and total is not None and size > max_heap(total):
        raise UsageError(
            f"{where} {memory}: more than the {max(max_heap(total), 0) >> 20}m "
            f"a heap may take of this machine's or container's memory ({total >> 20}m): "
            f"{100 - round(HEAP_SHARE * 100)} % of it, and at least "
            f"{HEAP_HEADROOM >> 20}m, is left for the JVM's own memory and Python"
        )
