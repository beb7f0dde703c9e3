"""Trace context: W3C traceparent parsing, one trace per rebalance, nothing without export."""

from __future__ import annotations

from sidecar.model import EventDraft, EventType, PartitionOffset, encode
from sidecar.tracing import (
    RebalanceTraces,
    SpanRecord,
    TraceContext,
    Tracer,
    delivery_span,
    export_requested,
    from_environment,
    parse_traceparent,
    traceparent_of,
)

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Recording(Tracer):
    exporting = True

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []

    def record(self, span: SpanRecord) -> None:
        self.spans.append(span)


def draft(kind: EventType) -> EventDraft:
    return EventDraft(
        type=kind,
        group_id="g",
        member_id="m",
        group_instance_id=None,
        generation_id=3,
        protocol="eager",
        partitions=(PartitionOffset("t", 0, None),),
        assignment=(),
        reason=None,
    )


def test_traceparent_is_parsed_as_w3c_says() -> None:
    parsed = parse_traceparent(VALID)
    assert parsed == TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", True)
    assert parsed.traceparent == VALID
    for bad in (
        "",
        None,
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
        VALID + "-extra",  # version 00 has nothing after the flags
        VALID.upper(),
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
    ):
        assert parse_traceparent(bad) is None, bad
    assert parse_traceparent(VALID[:-2] + "00") == TraceContext(
        "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", False
    )


def test_an_events_body_carries_its_traceparent() -> None:
    stamped = RebalanceTraces(lambda: Tracer()).stamp(draft(EventType.REVOKED))
    body = encode(stamped.cloudevent(7))
    context = traceparent_of(body)
    assert context is not None and context.traceparent == stamped.traceparent
    assert not context.sampled  # nothing exports: the app need not record it either
    assert traceparent_of(encode(draft(EventType.REVOKED).cloudevent(7))) is None


def test_one_rebalance_is_one_trace_and_the_next_a_new_one() -> None:
    out = Recording()
    traces = RebalanceTraces(lambda: out)
    revoked = traces.stamp(draft(EventType.REVOKED))
    traces.journaled(revoked, revoked.time)
    assigned = traces.stamp(draft(EventType.ASSIGNED))
    traces.journaled(assigned, assigned.time)
    first, second = parse_traceparent(revoked.traceparent), parse_traceparent(assigned.traceparent)
    assert first is not None and second is not None
    assert first.trace_id == second.trace_id and first.span_id != second.span_id
    assert first.sampled
    names = [s.name for s in out.spans]
    assert names == [
        "kafka.partitions.revoked callback",
        "journal append",
        "kafka.partitions.assigned callback",
        "journal append",
        "rebalance",
    ]
    root = out.spans[-1]
    assert root.parent is None
    assert all(s.parent == root.context for s in out.spans if s.name.endswith("callback"))
    later = traces.stamp(draft(EventType.ASSIGNED))
    third = parse_traceparent(later.traceparent)
    assert third is not None and third.trace_id != first.trace_id


def test_a_delivery_is_a_child_of_its_event() -> None:
    stamped = RebalanceTraces(lambda: Tracer()).stamp(draft(EventType.ASSIGNED))
    span = delivery_span(encode(stamped.cloudevent(1)), "app", "blocking")
    event = parse_traceparent(stamped.traceparent)
    header = parse_traceparent(span.header)
    assert event is not None and header is not None
    assert header.trace_id == event.trace_id and header.span_id != event.span_id
    assert delivery_span(b"{}", "app", "blocking").header is None


def test_export_only_when_the_standard_variables_ask_for_it() -> None:
    assert not export_requested({})
    assert export_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert export_requested({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not export_requested(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    )
    assert not export_requested(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}
    )
    warnings: list[str] = []
    grpc = from_environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        "1",
        warnings.append,
    )
    assert not grpc.exporting and "http/protobuf only" in warnings[0]
    assert not from_environment({}, "1", warnings.append).exporting
