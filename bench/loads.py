"""HTTP load on one URL: ``wrk`` when installed, else a raw-asyncio generator process.

``wrk`` (C, one thread) needs far less CPU per request than any Python client, so on a
2-core machine the server gets the other core. The fallback speaks HTTP/1.1 keep-alive
over plain asyncio streams (uvloop when installed) in its own process: no client
library, so it is not the bottleneck either for a server in the low thousands of req/s.
Run it directly: ``python -m bench.loads URL --connections 32 --seconds 10``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench.common import REPO, percentile


@dataclass(frozen=True)
class Load:
    requests_per_second: float
    p50: float  # seconds
    p99: float
    requests: int
    errors: int  # non-2xx answers and socket errors
    tool: str


def run_load(url: str, seconds: float, connections: int, tool: str) -> Load:
    if tool == "wrk":
        return _wrk(url, seconds, connections)
    found = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.loads",
            url,
            "--connections",
            str(connections),
            "--seconds",
            str(seconds),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    )
    data = json.loads(found.stdout)
    return Load(
        data["requests"] / data["seconds"],
        data["p50"],
        data["p99"],
        data["requests"],
        data["errors"],
        "python",
    )


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _duration(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not match:
        raise ValueError(f"wrk: unexpected duration {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _wrk(url: str, seconds: float, connections: int) -> Load:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise RuntimeError("wrk is not installed")
    found = subprocess.run(
        [
            wrk,
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "--timeout",
            "10s",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    )
    out = found.stdout
    percentiles = dict(re.findall(r"^\s+(\d+)%\s+(\S+)$", out, re.MULTILINE))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = 0
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        errors += int(non2xx.group(1))
    sockets = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    if sockets:
        errors += sum(int(x) for x in sockets.groups())
    return Load(
        rps, _duration(percentiles["50"]), _duration(percentiles["99"]), total, errors, "wrk"
    )


# -- the Python generator (its own process) -----------------------------------------------------


async def _connection(
    host: str, port: int, request: bytes, until: float, latencies: list[float], errors: list[int]
) -> None:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        errors.append(1)
        return
    try:
        while time.perf_counter() < until:
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if not head.startswith(b"HTTP/1.1 2"):
                errors.append(1)
    except (OSError, asyncio.IncompleteReadError):
        errors.append(1)
    finally:
        writer.close()


async def _generate(url: str, connections: int, seconds: float) -> dict[str, float]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = (
        f"GET {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nAccept: application/json\r\n\r\n"
    ).encode()
    latencies: list[float] = []
    errors: list[int] = []
    started = time.perf_counter()
    until = started + seconds
    await asyncio.gather(
        *(_connection(host, port, request, until, latencies, errors) for _ in range(connections))
    )
    elapsed = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "errors": len(errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="HTTP/1.1 keep-alive GET load generator")
    parser.add_argument("url")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    coroutine = _generate(args.url, args.connections, args.seconds)
    try:
        import uvloop

        result = uvloop.run(coroutine)
    except ImportError:
        result = asyncio.run(coroutine)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
