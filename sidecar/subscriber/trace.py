"""Continue the sidecar's trace: the application's handling of an event is a child span of
the delivery (the ``traceparent`` header of the webhook POST).

Uses the OpenTelemetry API when it is importable (a no-op tracer unless the application
configured an SDK); without it, nothing happens. ``export_from_environment`` configures the
SDK's OTLP/HTTP export from the standard ``OTEL_*`` variables, for applications (like the
reference app) that have no tracing set-up of their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any


@contextlib.contextmanager
def handling(headers: Mapping[str, str], event: Mapping[str, Any]) -> Iterator[None]:
    """A span around the application's handling of ``event``, a child of the delivery."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        yield
        return
    carrier = {k.lower(): v for k, v in headers.items()}
    parent = TraceContextTextMapPropagator().extract(carrier)
    raw = event.get("data")
    data: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    attributes = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.consumer.group.name": str(data.get("group_id", "")),
        "cloudevents.event_id": str(event.get("id", "")),
        "cloudevents.event_type": str(event.get("type", "")),
        "cloudevents.event_source": str(event.get("source", "")),
    }
    tracer = trace.get_tracer("rebalance-sidecar.subscriber")
    with tracer.start_as_current_span(
        f"{event.get('type', 'event')} handle",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
    ):
        yield


def export_from_environment(env: Mapping[str, str], service_name: str) -> bool:
    """Set up OTLP/HTTP export when ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` is set and the
    SDK is installed; ``True`` when it did."""
    if not (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True
