"""Section 8: what tracing and lag reads cost.

Event path, in process: what the member thread and a courier do per event — stamp the
draft with its trace context, journal it (``Journal(durable=False)``: without the fsync,
whose noise would hide everything else), and build the delivery attempt's ``traceparent``
header — for three variants, interleaved in rounds: no trace context at all (the code
before tracing: the baseline), tracing off (the default: ids drawn, nothing exported), and
the OTLP exporter on (the SDK's batch processor, exporting over HTTP to a local receiver
that answers 200). Lag reads: ``/group``'s blocking read (DescribeGroups and topic
metadata) with and without the positions (OffsetFetch and ListOffsets for every
partition, by a consumer of the group that never joins), against the broker.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.common import Context, SectionResult, Table, compare, ms, percentile, ratio
from sidecar import tracing
from sidecar.journal import Journal
from sidecar.model import EventDraft, PartitionOffset, TopicPartition
from sidecar.testkit.events import draft

PARTITIONS = tuple(PartitionOffset("orders", p, 1000 + p) for p in range(0, 24, 3))
LAG_PARTITIONS = 24


def _draft() -> EventDraft:
    return draft(
        partitions=PARTITIONS,
        assignment=(TopicPartition(p.topic, p.partition) for p in PARTITIONS),
        group_id="bench-tracing",
        member_id="rdkafka-00000000-bench",
        group_instance_id=None,
        generation_id=7,
        reason=None,
    )


@contextmanager
def _receiver() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


def _event_path(journal: Journal, traces: tracing.RebalanceTraces | None) -> Callable[[], None]:
    def one() -> None:
        first = _draft()
        if traces is not None:
            first = traces.stamp(first)
        appending = time.time()
        event = journal.append(first)
        if traces is not None:
            traces.journaled(first, appending)
            span = tracing.delivery_span(event.body, "bench", "blocking")
            _ = span.header
            span.answered(204, None)

    return one


def _rounds(variants: dict[str, Callable[[], None]], window: float) -> dict[str, list[float]]:
    took: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(3):  # interleaved: drift on a shared machine hits every variant alike
        for name, one in variants.items():
            for _ in range(20):
                one()  # warm-up
            deadline = time.perf_counter() + window / 3
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                one()
                took[name].append(time.perf_counter() - started)
    return took


def _lag_reads(ctx: Context) -> dict[str, list[float]]:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from sidecar.web.group import describe_group, describe_with_positions

    topic = f"bench-lag-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": ctx.bootstrap, "log_level": 2})
    admin.create_topics([NewTopic(topic, LAG_PARTITIONS, 1)])[topic].result(60)
    group = f"bench-lag-{uuid.uuid4().hex[:8]}"
    reader = Consumer({"bootstrap.servers": ctx.bootstrap, "group.id": group, "log_level": 2})
    reads: dict[str, Callable[[], object]] = {
        "/group without positions": lambda: describe_group(admin, group, (topic,), 10),
        "/group with positions (shipped)": lambda: describe_with_positions(
            admin, reader, group, (topic,), 10
        ),
    }
    took: dict[str, list[float]] = {name: [] for name in reads}
    count = max(5, ctx.sizes.repetitions * 10)
    for read in reads.values():
        read()  # warm-up: metadata and connections
    for _ in range(count):
        for name, read in reads.items():
            started = time.perf_counter()
            read()
            took[name].append(time.perf_counter() - started)
    return took


def run(ctx: Context) -> SectionResult:
    result = SectionResult(
        key="tracing",
        title="8. Tracing and lag reads",
        method=(__doc__ or "").split("\n", 2)[2].strip(),
    )
    root: Path = ctx.work_dir / f"tracing-{uuid.uuid4().hex[:8]}"
    journals = {name: Journal(root / name, durable=False) for name in ("none", "off", "on")}
    exporter_note = ""
    with _receiver() as endpoint:
        variants: dict[str, Callable[[], None]] = {
            "no trace context (before tracing) — baseline": _event_path(journals["none"], None),
            "tracing off (default)": _event_path(
                journals["off"], tracing.RebalanceTraces(lambda: tracing.Tracer())
            ),
        }
        exporter: tracing.Tracer | None = None
        if importlib.util.find_spec("opentelemetry.sdk") is not None:
            os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
            exporter = tracing.OtlpTracer("bench")
            tracing.install(exporter)
            variants["OTLP exporter on"] = _event_path(
                journals["on"], tracing.RebalanceTraces(lambda: exporter or tracing.Tracer())
            )
        else:
            exporter_note = "The tracing extra is not installed: no 'exporter on' row."
        try:
            took = _rounds(variants, ctx.sizes.window)
        finally:
            os.environ.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
            tracing.install(tracing.Tracer())
            if exporter is not None:
                exporter.shutdown()
            for journal in journals.values():
                journal.close()
    names = list(took)
    base = took[names[0]]
    table = Table(["event path", "events/s", "p50 per event", "p99", "p50 ratio to baseline"])
    for name in names:
        rate = len(took[name]) / sum(took[name])
        table.rows.append(
            [
                name,
                f"{rate:,.0f}",
                ms(percentile(took[name], 50)),
                ms(percentile(took[name], 99)),
                ratio(percentile(took[name], 50), percentile(base, 50)),
            ]
        )
        result.raw[name] = {
            "events_per_second": rate,
            "p50": percentile(took[name], 50),
            "p99": percentile(took[name], 99),
        }
        ctx.say(
            compare(
                f"p50 per event, {name[:30]}",
                ms(percentile(took[name], 50)),
                ms(percentile(base, 50)),
                ratio(percentile(took[name], 50), percentile(base, 50)),
            )
        )
    result.tables.append(table)
    lag = _lag_reads(ctx)
    lag_table = Table(["read", "p50", "p99", "ratio"])
    lag_base = percentile(lag["/group without positions"], 50)
    for name, values in lag.items():
        lag_table.rows.append(
            [
                name,
                ms(percentile(values, 50)),
                ms(percentile(values, 99)),
                ratio(percentile(values, 50), lag_base),
            ]
        )
        result.raw[name] = {"p50": percentile(values, 50), "p99": percentile(values, 99)}
    lag_table.caption = f"{LAG_PARTITIONS} partitions; /group caches a read for 2 s."
    result.tables.append(lag_table)
    off = percentile(took[names[1]], 50) - percentile(base, 50)
    result.notes.append(
        f"Tracing off adds {off * 1e6:,.0f} µs per event at the median on this in-process "
        "path (two ids drawn, 69 bytes more per event, the POST's header built): the "
        "end-to-end figures of section 1 are milliseconds, so they do not move with it. "
        "The exporter's cost is mostly the SDK's batch thread competing for the GIL. "
        + exporter_note
    )
    return result
