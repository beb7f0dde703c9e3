"""One rebalance followed end to end in what a real OTLP receiver got.

The OpenTelemetry Collector (built from its Go modules by scripts/otelcol.sh: the OTLP
receiver and the file exporter) receives the sidecar's spans and the reference app's
(deploy/example-app, through the Python subscriber kit). The trace of the assignment must
hold the rebalance root, the callback, the journal append, the delivery and the app's
handling, each a child of the one before, in one trace.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.sidecars import REPO, Sidecar, free_port, wait_until

pytestmark = pytest.mark.kafka

OTELCOL = REPO / ".tools" / "bin" / "otelcol"
APP = REPO / "deploy" / "example-app" / "app.py"
SECRET = "whsec_" + "dHJhY2luZy10ZXN0LXNlY3JldC0xMjM0NTY="


class Collector:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.out = workdir / "traces.jsonl"
        config = workdir / "otelcol.yaml"
        config.write_text(
            json.dumps(
                {
                    "receivers": {
                        "otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{self.port}"}}}
                    },
                    "exporters": {"file": {"path": str(self.out), "flush_interval": "100ms"}},
                    "service": {
                        "telemetry": {"metrics": {"level": "none"}},
                        "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
                    },
                }
            )
        )
        self.log = workdir / "otelcol.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(OTELCOL), "--config", f"file:{config}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        if not self.out.exists():
            return found
        for line in self.out.read_text().splitlines():
            if not line.strip():
                continue
            for resource in json.loads(line).get("resourceSpans", []):
                service = next(
                    (
                        a["value"].get("stringValue")
                        for a in resource.get("resource", {}).get("attributes", [])
                        if a["key"] == "service.name"
                    ),
                    None,
                )
                for scope in resource.get("scopeSpans", []):
                    for span in scope.get("spans", []):
                        found.append({**span, "service": service})
        return found

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Collector]:
    if not OTELCOL.exists():
        pytest.skip("no collector: run scripts/otelcol.sh (scripts/test.sh does)")
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        pytest.skip("the tracing extra is not installed (scripts/test.sh installs it)")
    running = Collector(tmp_path)
    try:
        wait_until(
            lambda: (
                "Everything is ready" in running.log.read_text(errors="replace")
                or running.process.poll() is not None
            ),
            60,
            "the collector up",
        )
        assert running.process.poll() is None, running.log.read_text()
        yield running
    finally:
        running.stop()


def test_one_rebalance_is_one_trace_from_the_callback_to_the_apps_handling(
    collector: Collector,
    kafka_bootstrap: str,
    topic_factory: Callable[[int], str],
    group_id: str,
    tmp_path: Path,
) -> None:
    topic = topic_factory(2)
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    app_port = free_port()
    sidecar = Sidecar(
        kafka_bootstrap,
        group_id,
        topic,
        tmp_path / "sidecar",
        webhooks=[{"url": f"http://127.0.0.1:{app_port}/rebalance", "secret": SECRET, "id": "app"}],
        extra_env=otel,
    )
    app_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "KAFKA_"))},
        **otel,
        "OTEL_SERVICE_NAME": "example-app",
        "WEBHOOK_SECRET": SECRET,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "GROUP_ID": group_id,
        "SIDECAR_URL": f"http://127.0.0.1:{sidecar.port}",
        "HOST": "127.0.0.1",
        "PORT": str(app_port),
        "STORE_DIR": str(tmp_path / "store"),
    }
    with (tmp_path / "app.log").open("wb") as log:
        app = subprocess.Popen(
            [sys.executable, str(APP)], env=app_env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        sidecar.start()
        sidecar.wait_stable()

        def handled() -> bool:
            return any(s["name"] == "kafka.partitions.assigned handle" for s in collector.spans())

        wait_until(handled, 90, "the app's handling of the assignment at the collector")
        event = next(e for e in sidecar.history() if e["type"] == "kafka.partitions.assigned")
    finally:
        sidecar.stop()
        app.terminate()
        app.wait(30)
    time.sleep(0.5)

    spans = collector.spans()
    by_id = {s["spanId"]: s for s in spans}
    handle = next(s for s in spans if s["name"] == "kafka.partitions.assigned handle")
    assert handle["service"] == "example-app"
    deliver = by_id[handle["parentSpanId"]]
    assert deliver["name"] == "deliver" and deliver["service"] == "rebalance-sidecar"
    callback = by_id[deliver["parentSpanId"]]
    assert callback["name"] == "kafka.partitions.assigned callback"
    root = by_id[callback["parentSpanId"]]
    assert root["name"] == "rebalance" and not root.get("parentSpanId")
    assert {handle["traceId"], deliver["traceId"], callback["traceId"], root["traceId"]} == {
        root["traceId"]
    }
    journal = [
        s
        for s in spans
        if s["name"] == "journal append" and s["parentSpanId"] == callback["spanId"]
    ]
    assert len(journal) == 1
    attributes = {a["key"]: a["value"] for a in callback["attributes"]}
    assert attributes["messaging.consumer.group.name"] == {"stringValue": group_id}
    assert attributes["cloudevents.event_type"] == {"stringValue": "kafka.partitions.assigned"}
    # The journaled event names the callback span: what the webhook and SSE carried.
    assert event["traceparent"] == f"00-{root['traceId']}-{callback['spanId']}-01"
