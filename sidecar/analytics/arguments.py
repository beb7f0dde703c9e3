"""What ``rebalance-sidecar analytics`` (and ``analytics convert``) accept: option types
and the checks that run before any Spark session starts.

Bad input (an option's value, an input path that does not exist, an output that cannot
be a directory) ends the command with one line on stderr and exit code 2, before any
Spark session starts; a failure once the job runs is one line and exit code 1. Paths are
checked on this machine only for a session the job starts itself.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

from sidecar.argtypes import bounded_float, bounded_int

from . import session as sessions
from .errors import JobError as JobError
from .errors import UsageError as UsageError
from .events import KafkaInput, is_kafka_url
from .path_checks import check_input, check_output, check_replaceable, local_matches
from .paths import list_local, local_path

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
            check_input(text)
    if managed:
        return
    check_output("--output", args.output)
    if local_path(args.output) is not None:
        check_replaceable(args, list_local, convert=False)
    if args.stream and args.checkpoint is not None:
        check_output("--checkpoint", args.checkpoint)
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
        check_input(text)
    check_output("--output", args.output)
    # The output directory is replaced: an input inside it would be deleted before it is
    # read, and an output inside an input directory is read back as input next time.
    local = local_path(args.output)
    output = None if local is None else local.resolve()
    for text in args.input:
        for read in local_matches(text):
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
