"""What every section shares: sizes, the run context, statistics, results, the machine."""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Sizes:
    """How much each section measures. ``--quick`` shrinks all of it."""

    latency_events: int  # revoked events with 1 subscriber (fewer with 10 and 50)
    repetitions: int  # enforced rebalances per protocol and kind
    starts: int  # timed sidecar starts (and bare joins)
    window: float  # seconds of each timed window (idle, load, HTTP, journal)
    group_sizes: tuple[int, ...] = (3, 10, 30)  # members per group in the scale curves
    assignment_sizes: tuple[int, ...] = (24, 200, 1000)  # partitions owned by one member
    journal_events: int = 1_000_000  # events through the journal, retention working
    # POST /commit when idle: enough for a p99 that is not just the largest sample (60 gave
    # the max, and the verdict swung with one slow broker round trip)
    idle_commands: int = 300
    # HTTP: rounds of (sidecar, FastAPI, raw ASGI) windows, interleaved; medians reported
    http_rounds: int = 3

    @classmethod
    def full(cls) -> Sizes:
        return cls(latency_events=2000, repetitions=12, starts=3, window=10.0)

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            latency_events=300,
            repetitions=2,
            starts=1,
            window=3.0,
            group_sizes=(3,),
            assignment_sizes=(24, 100),
            journal_events=20_000,
            idle_commands=30,
            http_rounds=1,
        )


@dataclass
class Context:
    bootstrap: str
    sizes: Sizes
    work_dir: Path
    say: Callable[[str], None]
    load_tool: str  # "wrk" or "python"
    # The sidecars' interpreter: a virtualenv with the runtime dependencies only, as the
    # image installs them (``shipped_python``), not this one's test and lint tools.
    sidecar_python: str = sys.executable


# -- statistics -------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), ``q`` in [0, 100]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "n/a"
    value = seconds * 1000
    return f"{value:.2f} ms" if abs(value) < 100 else f"{value:.0f} ms"


def ratio(value: float, baseline: float) -> str:
    if baseline == 0 or math.isnan(value) or math.isnan(baseline):
        return "n/a"
    return f"x{value / baseline:.2f}"


def compare(label: str, value: str, baseline: str, times: str, extra: str = "") -> str:
    """One printed line: a figure, its baseline and the ratio."""
    tail = f"  {extra}" if extra else ""
    return f"  {label:<44} {value:>12}   baseline {baseline:>12}   {times:>7}{tail}"


# -- results ----------------------------------------------------------------------------------


@dataclass
class Target:
    what: str
    goal: str
    measured: str
    met: bool


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""


@dataclass
class SectionResult:
    key: str
    title: str
    method: str
    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


# -- the machine ------------------------------------------------------------------------------


def _first(path: str, prefix: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def kafka_version() -> str:
    pom = REPO / "deploy" / "local" / "pom.xml"
    try:
        text = pom.read_text()
    except OSError:
        return "unknown"
    start = text.find("<kafka.version>")
    end = text.find("</kafka.version>")
    return text[start + len("<kafka.version>") : end] if 0 <= start < end else "unknown"


def wrk_version() -> str | None:
    path = shutil.which("wrk")
    if path is None:
        return None
    found = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    words = (found.stdout + found.stderr).split()
    return words[1] if len(words) > 1 else "unknown"


def machine() -> dict[str, str]:
    import confluent_kafka

    mem_kb = _first("/proc/meminfo", "MemTotal").split()[0]
    memory = f"{int(mem_kb) / 1024 / 1024:.1f} GiB" if mem_kb.isdigit() else "unknown"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "nproc": str(os.cpu_count()),
        "cpu": _first("/proc/cpuinfo", "model name"),
        "memory": memory,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "confluent-kafka": _version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "kafka broker": kafka_version(),
        "uvicorn": _version("uvicorn"),
        "fastapi": _version("fastapi"),
        "httpx": _version("httpx"),
        "event loop in the sidecar": "asyncio (stdlib; uvloop measured, not adopted: finding 13)",
        "HTTP parser in the sidecar": f"h11 {_version('h11')}",
        # The receiver and the load generator take uvloop when it is installed; their
        # floors move with it (finding 13).
        "uvloop (receiver, load generator)": _version("uvloop"),
        "sniffio": _version("sniffio"),
        "sidecars run from": "a virtualenv with the runtime dependencies only, as the image "
        "(.tools/shipped-venv; the bench's own tools run from the development one)",
        "load average at start": load,
    }


SHIPPED_VENV = REPO / ".tools" / "shipped-venv"


def shipped_python() -> str:
    """The interpreter of a virtualenv holding the package and its runtime dependencies
    only (the image's set), made or brought up to date by ``scripts/bootstrap.sh``: in the
    development one, structlog also imports the test tools' rich, pygments and greenlet
    (about 4 MB of RSS that no image has)."""
    subprocess.run(
        [str(REPO / "scripts" / "bootstrap.sh"), ""],
        env={**os.environ, "VENV": str(SHIPPED_VENV), "PYTHON": sys.executable},
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return str(SHIPPED_VENV / "bin" / "python")


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started
