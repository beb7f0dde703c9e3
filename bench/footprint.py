"""Section 3: footprint — memory and CPU, idle and under load, and start-up time.

One sidecar with the shipped settings (librdkafka's group defaults: heartbeat 3 s, session
45 s; statistics every 5 s; JSON logs) and one blocking webhook, alone in a group on a
24-partition topic. Start-up is timed from spawning ``python -m sidecar run`` to the
first answer of ``/healthz`` (HTTP ready) and to ``GET /assignment`` showing the
assignment (a long-poll, so no polling delay). The broker's own share, a bare
confluent-kafka consumer's time from creation to ``on_assign`` in a fresh group with the
same settings, is measured in the same run and subtracted; so is the time of a bare
``python -c "import sidecar.daemon"``, for reference. Then, with the last sidecar
started: RSS (sampled every 0.25 s, the largest; and USS at the end) and CPU (user +
system over the window, % of one core) while idle in the stable group, and while the
HTTP load generator keeps 10 connections busy on ``GET /assignment``. The idle figure's
floor is measured in the same run: a bare confluent-kafka consumer with the sidecar's
group settings and its idle poll timeout (190 ms: commands wake the sidecar's poll), idle
in a group of its own on the same topic. Last, the same sidecar with the ``ctypes``
wake-up off (``SIDECAR_POLL_WAKEUP=false``, a plain poll every ``SIDECAR_POLL_TIMEOUT_MS``):
its idle CPU and ``POST /commit`` latency against the default's, the measurement that keeps
the wake-up on by default.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
import uuid
from pathlib import Path

from bench.bare import BareMember, BareProcess
from bench.common import (
    REPO,
    Context,
    SectionResult,
    Table,
    Target,
    compare,
    median,
    ms,
    percentile,
    ratio,
)
from bench.loads import Load, run_load
from bench.processes import SHIPPED, Usage, mb, observe, shipped_sidecar, start_timed, stop
from bench.receiver import ReceiverProcess
from sidecar.member import WOKEN_POLL_SECONDS
from sidecar.settings import Settings
from sidecar.subscriptions import new_secret
from sidecar.testkit.kafka import create_topic, unique
from sidecar.testkit.sidecars import Sidecar

PARTITIONS = 24
LOAD_CONNECTIONS = 10
# How often the sidecar's member thread wakes when idle: its poll timeout while commands
# wake the poll (the default; sidecar.kafka.wakeup).
POLL_MS: int = round(WOKEN_POLL_SECONDS * 1000)
NO_WAKEUP = (
    f"plain poll every {Settings.model_fields['poll_timeout_ms'].default} ms "
    "(`SIDECAR_POLL_WAKEUP=false`)"
)


def bare_join(bootstrap: str, topic: str, timeout: float = 60.0) -> float:
    """Seconds from creating a bare consumer to its first ``on_assign`` (fresh group)."""
    member = BareMember(
        {"bootstrap.servers": bootstrap, "group.id": unique("bench-join")}, topic, False
    ).start()
    try:
        deadline = time.monotonic() + timeout
        while not member.history():
            if time.monotonic() > deadline:
                raise RuntimeError("bare consumer not assigned in time")
            time.sleep(0.005)
        return member.history()[0].at - member.created_at
    finally:
        member.stop()


def import_seconds(python: str) -> float:
    started = time.monotonic()
    subprocess.run([python, "-c", "import sidecar.daemon"], cwd=REPO, check=True)
    return time.monotonic() - started


def run(ctx: Context) -> SectionResult:
    result = SectionResult(
        key="footprint",
        title="3. Footprint: memory, CPU, start-up",
        method=(__doc__ or "").split("\n", 2)[2].strip(),
    )
    receiver = ReceiverProcess(new_secret())
    topic = create_topic(ctx.bootstrap, PARTITIONS)
    root = ctx.work_dir / f"footprint-{uuid.uuid4().hex[:8]}"
    webhook = {"url": receiver.url("footprint"), "secret": receiver.secret, "mode": "blocking"}
    http_ready: list[float] = []
    assigned: list[float] = []
    joins: list[float] = []
    imports = [import_seconds(ctx.sidecar_python) for _ in range(ctx.sizes.starts)]
    sidecar = None
    try:
        for i in range(ctx.sizes.starts):
            joins.append(bare_join(ctx.bootstrap, topic))
            if sidecar is not None:
                stop(sidecar)
            sidecar = shipped_sidecar(
                ctx.bootstrap,
                unique("bench-footprint"),
                topic,
                root / f"start-{i}",
                webhook,
                ctx.sidecar_python,
            )
            started = start_timed(sidecar)
            http_ready.append(started.http_ready)
            assigned.append(started.assigned)
            ctx.say(
                f"    start {i + 1}: HTTP ready {ms(started.http_ready)}, assigned "
                f"{ms(started.assigned)}; bare consumer joined in {ms(joins[-1])}"
            )
        assert sidecar is not None and sidecar.process is not None
        pid = sidecar.process.pid
        time.sleep(2.0)  # let the start-up settle (first statistics, webhook delivered)
        idle = observe(pid, 2 * ctx.sizes.window)
        bare_idle = _bare_idle(ctx, topic)
        commands = _command_latencies(sidecar, topic, ctx.sizes.idle_commands)
        loads: list[Load] = []
        url = f"http://127.0.0.1:{sidecar.port}/assignment"
        generator = threading.Thread(
            target=lambda: loads.append(
                run_load(url, ctx.sizes.window + 1.0, LOAD_CONNECTIONS, ctx.load_tool)
            )
        )
        generator.start()
        time.sleep(0.5)
        loaded = observe(pid, ctx.sizes.window)
        generator.join()
        stop(sidecar)
        sidecar = None
        unwoken, unwoken_commands = _without_wakeups(ctx, topic, root, webhook)
    finally:
        if sidecar is not None:
            stop(sidecar)
        receiver.stop()
    a, j = median(assigned), median(joins)
    ctx.say(f"  {'start → HTTP ready':<44} {ms(median(http_ready)):>12}")
    ctx.say(compare("start → first assignment", ms(a), ms(j), ratio(a, j), ms(a - j)))
    ctx.say(f"  idle: RSS {mb(idle.rss_max)}, USS {mb(idle.uss_end)}, CPU {idle.cpu_percent:.2f} %")
    ctx.say(
        f"  bare consumer idle (poll {POLL_MS} ms): RSS {mb(bare_idle.rss_max)}, "
        f"CPU {bare_idle.cpu_percent:.2f} %"
    )
    command_p50, command_p99 = percentile(commands, 50), percentile(commands, 99)
    ctx.say(f"  POST /commit when idle: p50 {ms(command_p50)}, p99 {ms(command_p99)}")
    plain_p50, plain_p99 = percentile(unwoken_commands, 50), percentile(unwoken_commands, 99)
    ctx.say(
        f"  {NO_WAKEUP}: CPU {unwoken.cpu_percent:.2f} %, POST /commit p50 {ms(plain_p50)}, "
        f"p99 {ms(plain_p99)}"
    )
    ctx.say(
        f"  under load ({loads[0].requests_per_second:,.0f} req/s): RSS {mb(loaded.rss_max)}, "
        f"CPU {loaded.cpu_percent:.1f} %"
    )
    result.tables.append(
        Table(
            ["", "median", "runs"],
            [
                ["start → HTTP ready", ms(median(http_ready)), _runs(http_ready)],
                ["start → first assignment", ms(a), _runs(assigned)],
                ["bare consumer: create → on_assign (broker's join)", ms(j), _runs(joins)],
                ["**start → first assignment, minus the broker's join**", ms(a - j), ""],
                [
                    "for reference: `python -c 'import sidecar.daemon'`",
                    ms(median(imports)),
                    _runs(imports),
                ],
            ],
            caption="Start-up.",
        )
    )
    result.tables.append(
        Table(
            ["state", "RSS (max)", "USS", "CPU (% of one core)", "threads", "window"],
            [
                _usage("idle, stable group", idle, 2 * ctx.sizes.window),
                _usage(
                    f"bare confluent-kafka consumer, same group settings, poll {POLL_MS} ms, "
                    "idle (its own group, same topic)",
                    bare_idle,
                    2 * ctx.sizes.window,
                ),
                _usage(f"idle, {NO_WAKEUP}", unwoken, 2 * ctx.sizes.window),
                _usage(
                    f"GET /assignment load ({LOAD_CONNECTIONS} connections, "
                    f"{loads[0].requests_per_second:,.0f} req/s)",
                    loaded,
                    ctx.sizes.window,
                ),
            ],
            caption="Memory and CPU of the sidecar process.",
        )
    )
    result.targets += [
        Target("idle RSS", "≤ 80 MB", mb(idle.rss_max), idle.rss_max <= 80e6),
        Target(
            "idle CPU, commands still prompt",
            "≤ 0.5 % of a core, POST /commit p99 ≤ 30 ms",
            f"{idle.cpu_percent:.2f} %, p99 {ms(command_p99)}",
            idle.cpu_percent <= 0.5 and command_p99 <= 0.030,
        ),
    ]
    result.notes.append(
        f"Idle CPU against its floor: a bare confluent-kafka consumer (bench/bare.py) with the "
        f"sidecar's group settings, polling every {POLL_MS} ms as the sidecar's member thread "
        "does when idle (commands wake its poll: `SIDECAR_POLL_WAKEUP`), idle in a group of "
        "its own on the same topic in this run, used "
        f"{bare_idle.cpu_percent:.2f} % of a core; the sidecar {idle.cpu_percent:.2f} % "
        f"(HTTP server, event loop, statistics, journal), "
        f"{idle.cpu_percent - bare_idle.cpu_percent:+.2f} points over it."
    )
    result.notes.append(
        f"Commands when idle: {len(commands)} `POST /commit` of one owned partition at random "
        f"moments (the poll loop woken, the commit's broker round trip and HTTP): "
        f"p50 {ms(command_p50)}, p99 {ms(command_p99)}."
    )
    result.tables.append(
        Table(
            ["poll", "idle CPU (% of one core)", "POST /commit p50", "p99"],
            [
                [
                    f"woken by commands (the default), idle poll {POLL_MS} ms",
                    f"{idle.cpu_percent:.2f} %",
                    ms(command_p50),
                    ms(command_p99),
                ],
                [
                    NO_WAKEUP,
                    f"{unwoken.cpu_percent:.2f} %",
                    ms(plain_p50),
                    ms(plain_p99),
                ],
            ],
            caption="The ctypes wake-up (`sidecar/kafka/wakeup.py`) against a plain poll, "
            "same run: "
            "what keeps it on by default.",
        )
    )
    result.raw = {
        "http_ready": http_ready,
        "assigned": assigned,
        "bare_join": joins,
        "imports": imports,
        "idle": idle.__dict__,
        "bare_idle": bare_idle.__dict__,
        "commands": commands,
        "loaded": loaded.__dict__,
        "unwoken_idle": unwoken.__dict__,
        "unwoken_commands": unwoken_commands,
        "load": loads[0].__dict__,
    }
    return result


def _bare_idle(ctx: Context, topic: str) -> Usage:
    """CPU and memory of a bare consumer idle in a stable group: the floor of an idle
    sidecar. The sidecar's group settings (``SHIPPED``), its poll timeout, a group of its
    own on the same topic, in a process of its own."""
    config = {"bootstrap.servers": ctx.bootstrap, "group.id": unique("bench-idle-bare")}
    for key, value in SHIPPED.items():
        if key.startswith("SIDECAR_KAFKA_"):
            config[key.removeprefix("SIDECAR_KAFKA_").lower().replace("_", ".")] = value
    member = BareProcess(config, topic, cooperative=False, poll_seconds=POLL_MS / 1000).start()
    try:
        deadline = time.monotonic() + 60
        while not member.history():
            if time.monotonic() > deadline:
                raise RuntimeError("the bare consumer was not assigned in time")
            time.sleep(0.1)
        time.sleep(2.0)  # settle, as for the sidecar
        return observe(member.process.pid, 2 * ctx.sizes.window)
    finally:
        member.stop()


def _without_wakeups(
    ctx: Context, topic: str, root: Path, webhook: dict[str, str]
) -> tuple[Usage, list[float]]:
    """Idle CPU and ``POST /commit`` latency of the same sidecar with the wake-up off
    (``SIDECAR_POLL_WAKEUP=false``): it polls every ``SIDECAR_POLL_TIMEOUT_MS``."""
    sidecar = shipped_sidecar(
        ctx.bootstrap,
        unique("bench-footprint-plain"),
        topic,
        root / "no-wakeup",
        webhook,
        ctx.sidecar_python,
        {"SIDECAR_POLL_WAKEUP": "false"},
    )
    try:
        start_timed(sidecar)
        assert sidecar.process is not None
        time.sleep(2.0)  # settle, as for the first sidecar
        usage = observe(sidecar.process.pid, 2 * ctx.sizes.window)
        return usage, _command_latencies(sidecar, topic, ctx.sizes.idle_commands)
    finally:
        stop(sidecar)


def _command_latencies(sidecar: Sidecar, topic: str, count: int) -> list[float]:
    """``POST /commit`` of an owned partition at random phases against the poll loop."""
    owned = sidecar.assignment()["partitions"][0]
    body = {"offsets": [{"topic": topic, "partition": owned["partition"], "offset": 0}]}
    took = []
    for _ in range(count):
        time.sleep(random.uniform(0.01, 0.1))
        started = time.perf_counter()
        answer = sidecar.client.post("/commit", json=body, headers=sidecar.headers())
        took.append(time.perf_counter() - started)
        answer.raise_for_status()
    return took


def _runs(values: list[float]) -> str:
    return ", ".join(ms(v) for v in values)


def _usage(label: str, usage: Usage, window: float) -> list[str]:
    return [
        label,
        mb(usage.rss_max),
        mb(usage.uss_end),
        f"{usage.cpu_percent:.2f} %",
        str(usage.threads),
        f"{window:g} s",
    ]
