"""Section 4: ``GET /assignment`` requests/s and latency on one worker.

One sidecar with the shipped settings, stable in a group on a 24-partition topic (so its
consumer thread polls alongside), takes keep-alive load from 32 connections. Baselines,
each in its own process and served the way the daemon serves (``bench/baseline_app.py``):
a one-route FastAPI app returning the same JSON document, and a raw ASGI app sending the
same bytes (the server's ceiling). All three run side by side and are measured in turn,
in rounds (a 1 s warm-up before each window), so a change of load on the machine during
the section falls on all of them alike. In every round the sidecar and the raw ASGI app
are measured one right after the other, and which of the two goes first alternates
(sidecar, ASGI, FastAPI; then FastAPI, ASGI, sidecar). Each server's figure is the median
of its rounds (requests/s; the p50 and p99 of the round with the median rate); the
target's ratio is the median of the rounds' own ratios, sidecar against the ASGI app of
the same round.
Load: see "Run" above; it shares the 2 cores with the server.
"""

from __future__ import annotations

import math
import uuid

from bench.baseline_app import BaselineProcess
from bench.common import Context, SectionResult, Table, Target, compare, median, ms, ratio
from bench.loads import Load, run_load
from bench.processes import shipped_sidecar, start_timed, stop
from sidecar.testkit.kafka import create_topic, unique

PARTITIONS = 24
CONNECTIONS = 32


def _measure(url: str, ctx: Context) -> Load:
    run_load(url, 1.0, CONNECTIONS, ctx.load_tool)  # warm-up
    return run_load(url, ctx.sizes.window, CONNECTIONS, ctx.load_tool)


def _rounds(ctx: Context) -> str:
    count = ctx.sizes.http_rounds
    return f"medians of {count} interleaved rounds" if count > 1 else "one round"


def _median(loads: list[Load]) -> Load:
    """The round with the median rate (its latencies go with it)."""
    return sorted(loads, key=lambda load: load.requests_per_second)[len(loads) // 2]


def round_order(number: int) -> tuple[str, ...]:
    """Who is measured when in round ``number`` (from 1): the sidecar and the ceiling
    always next to each other, each of them first in every other round."""
    return ("sidecar", "asgi", "fastapi") if number % 2 else ("fastapi", "asgi", "sidecar")


def _share(share: float, count: int) -> str:
    figure = "n/a (no ceiling measured)" if math.isnan(share) else f"x{share:.2f}"
    return f"per round {figure}, the median of {count} rounds" if count > 1 else figure


def round_ratio(ours: list[Load], ceiling: list[Load]) -> float:
    """The median of each round's requests/s ratio, ours against the ceiling's; NaN when
    no round has a ceiling to compare with (nothing to judge)."""
    shares = [
        a.requests_per_second / b.requests_per_second
        for a, b in zip(ours, ceiling, strict=True)
        if b.requests_per_second > 0
    ]
    return median(shares)


def run(ctx: Context) -> SectionResult:
    result = SectionResult(
        key="http",
        title="4. HTTP: GET /assignment on one worker",
        method=(__doc__ or "").split("\n", 2)[2].strip(),
    )
    root = ctx.work_dir / f"http-{uuid.uuid4().hex[:8]}"
    topic = create_topic(ctx.bootstrap, PARTITIONS)
    sidecar = shipped_sidecar(
        ctx.bootstrap, unique("bench-http"), topic, root / "sidecar", None, ctx.sidecar_python
    )
    apps: list[BaselineProcess] = []
    rounds: dict[str, list[Load]] = {"sidecar": [], "fastapi": [], "asgi": []}
    try:
        start_timed(sidecar)
        body = root / "assignment.json"
        body.write_bytes(sidecar.client.get("/assignment").content)
        urls = {"sidecar": f"http://127.0.0.1:{sidecar.port}/assignment"}
        for kind in ("fastapi", "asgi"):
            apps.append(BaselineProcess(kind, body))
            urls[kind] = f"http://127.0.0.1:{apps[-1].port}/assignment"
        for number in range(1, ctx.sizes.http_rounds + 1):
            for name in round_order(number):
                rounds[name].append(_measure(urls[name], ctx))
            ctx.say(
                f"    round {number}: "
                + ", ".join(f"{n} {r[-1].requests_per_second:,.0f}" for n, r in rounds.items())
                + " req/s"
            )
    finally:
        stop(sidecar)
        for app in apps:
            app.stop()
    ours = _median(rounds["sidecar"])
    baselines = {kind: _median(rounds[kind]) for kind in ("fastapi", "asgi")}
    base = baselines["fastapi"]
    ctx.say(
        compare(
            "GET /assignment req/s",
            f"{ours.requests_per_second:,.0f}",
            f"{base.requests_per_second:,.0f}",
            ratio(ours.requests_per_second, base.requests_per_second),
        )
    )
    ctx.say(compare("GET /assignment p99", ms(ours.p99), ms(base.p99), ratio(ours.p99, base.p99)))
    ctx.say(f"  raw ASGI ceiling: {baselines['asgi'].requests_per_second:,.0f} req/s")
    table = Table(
        ["server", "requests/s", "ratio to FastAPI baseline", "p50", "p99", "errors"],
        caption=f"{CONNECTIONS} keep-alive connections, {_rounds(ctx)} of "
        f"{max(1, round(ctx.sizes.window))} s per server, load generator: {ours.tool}.",
    )
    for name, load in (
        ("sidecar `GET /assignment`", ours),
        ("baseline: one-route FastAPI app, same body", base),
        ("ceiling: raw ASGI app, same bytes", baselines["asgi"]),
    ):
        table.rows.append(
            [
                name,
                f"{load.requests_per_second:,.0f}",
                ratio(load.requests_per_second, base.requests_per_second),
                ms(load.p50),
                ms(load.p99),
                str(load.errors),
            ]
        )
    result.tables.append(table)
    ceiling = baselines["asgi"].requests_per_second
    share = round_ratio(rounds["sidecar"], rounds["asgi"])
    result.targets.append(
        Target(
            "GET /assignment, one worker",
            "≥ 0.8 x the bare ASGI app, same stack and load tool",
            f"{ours.requests_per_second:,.0f} vs {ceiling:,.0f} req/s ({_rounds(ctx)}); "
            f"{_share(share, len(rounds['asgi']))}; p99 {ms(ours.p99)}",
            share >= 0.8,
        )
    )
    result.raw = {name: [load.__dict__ for load in loads] for name, loads in rounds.items()}
    return result
