"""W3C trace context on every event, and the rebalance's spans over OTLP when asked for.

Every event carries the CloudEvents distributed-tracing extension's ``traceparent``
attribute (journaled with the event, so a redelivery after a restart carries the same one),
and every webhook POST a ``traceparent`` header naming that delivery attempt's span: an
application continues the trace by making its handling a child of the header's context
(both subscriber kits do). One rebalance is one trace: a ``rebalance`` root span, then per
event the callback (with the journal append as its child), each delivery attempt, the
application's answer and the commit of offsets it handed back.

Off by default, and then nothing here imports OpenTelemetry: the only cost is drawing the
ids of the ``traceparent`` (``os.urandom``) and its 69 bytes in the event. Export is on
when OpenTelemetry's standard variables ask for it (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; not with ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``) and the ``tracing`` extra is installed: spans then go to the
OpenTelemetry SDK's batch processor and OTLP/HTTP exporter, which read the rest of the
``OTEL_*`` variables themselves (headers, timeouts, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*``). The ids are drawn here, not by the SDK, so
the journaled context and the exported spans always agree.
"""

from __future__ import annotations

import atexit
import os
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.model import EventDraft, EventType

TRACEPARENT = "traceparent"
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_BODY_MARK = b'"traceparent":"'
#: A rebalance whose assignment never came (the member left) is not held open for ever.
OPEN_TRACE_SECONDS = 300.0

Attributes = dict[str, str | int | bool | list[str]]


@dataclass(frozen=True, slots=True)
class TraceContext:
    trace_id: str  # 32 lowercase hex digits
    span_id: str  # 16 lowercase hex digits
    sampled: bool

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"

    def child(self) -> TraceContext:
        """A new span of the same trace (its parent is this one)."""
        return TraceContext(self.trace_id, _span_id(), self.sampled)

    @staticmethod
    def new_trace(sampled: bool) -> TraceContext:
        return TraceContext(f"{random.getrandbits(128) or 1:032x}", _span_id(), sampled)


def _span_id() -> str:
    # As the OpenTelemetry SDK draws them (random.getrandbits): ids, not secrets.
    return f"{random.getrandbits(64) or 1:016x}"


def parse_traceparent(value: str | None) -> TraceContext | None:
    """A ``traceparent`` value per W3C Trace Context, or ``None`` for anything invalid."""
    if not value:
        return None
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or set(trace_id) == {"0"}:
        return None
    if set(span_id) == {"0"}:
        return None
    return TraceContext(trace_id, span_id, bool(int(flags, 16) & 1))


def traceparent_of(body: bytes) -> TraceContext | None:
    """The ``traceparent`` attribute of a journaled event's body, without parsing the JSON
    (the encoding is ours: compact, so the attribute is ``"traceparent":"<55 chars>"``)."""
    at = body.find(_BODY_MARK)
    if at < 0:
        return None
    start = at + len(_BODY_MARK)
    text = body[start : start + 55].decode("ascii", "replace")
    # Ours, written by ``RebalanceTraces.stamp``: the layout is enough to check.
    if len(text) != 55 or text[2] != "-" or text[35] != "-" or text[52] != "-":
        return None
    return TraceContext(text[3:35], text[36:52], text[53:55] == "01")


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """A finished span, as handed to the exporter."""

    name: str
    context: TraceContext
    parent: TraceContext | None
    start: float  # unix seconds
    end: float
    kind: str  # internal, client, producer, consumer
    attributes: Attributes
    error: str | None = None


class Tracer:
    """The default: draws trace context, records nothing."""

    exporting = False

    def record(self, span: SpanRecord) -> None:
        """Export one finished span (nothing, unless exporting)."""

    def shutdown(self) -> None:
        """Flush what is buffered."""


class OtlpTracer(Tracer):
    """Hands finished spans to the OpenTelemetry SDK's batch processor (OTLP/HTTP)."""

    exporting = True

    def __init__(self, service_version: str) -> None:
        # Imported here only: the default (no export) never loads the SDK.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self._resource = Resource.create(
            {"service.name": "rebalance-sidecar", "service.version": service_version}
        )
        if os.environ.get("OTEL_SERVICE_NAME"):
            # Resource.create reads OTEL_SERVICE_NAME itself, and it wins over ours.
            self._resource = self._resource.merge(Resource.create({}))
        self._scope = InstrumentationScope("rebalance-sidecar", service_version)
        self._processor: Any = BatchSpanProcessor(OTLPSpanExporter())
        self._lock = threading.Lock()
        self._closed = False

    def record(self, span: SpanRecord) -> None:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanKind, Status, StatusCode

        kinds = {
            "internal": SpanKind.INTERNAL,
            "client": SpanKind.CLIENT,
            "producer": SpanKind.PRODUCER,
            "consumer": SpanKind.CONSUMER,
        }
        readable = ReadableSpan(
            name=span.name,
            context=_otel_context(span.context),
            parent=None if span.parent is None else _otel_context(span.parent),
            resource=self._resource,
            attributes=dict(span.attributes),
            kind=kinds.get(span.kind, SpanKind.INTERNAL),
            status=Status(StatusCode.ERROR, span.error) if span.error else Status(StatusCode.UNSET),
            start_time=int(span.start * 1e9),
            end_time=int(max(span.end, span.start) * 1e9),
            instrumentation_scope=self._scope,
        )
        with self._lock:
            if not self._closed:
                self._processor.on_end(readable)

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._processor.shutdown()


def _otel_context(context: TraceContext) -> Any:
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(
        trace_id=int(context.trace_id, 16),
        span_id=int(context.span_id, 16),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if context.sampled else TraceFlags.DEFAULT),
    )


def export_requested(environ: Mapping[str, str]) -> bool:
    """Whether OpenTelemetry's standard variables ask for trace export over OTLP."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if "otlp" not in exporters.split(","):
        return False
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def from_environment(
    environ: Mapping[str, str], version: str, warn: Callable[[str], Any]
) -> Tracer:
    """The tracer the ``OTEL_*`` variables ask for; the no-op one (with a warning) when
    they ask for something this installation cannot do."""
    if not export_requested(environ):
        return Tracer()
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol != "http/protobuf":
        warn(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: the sidecar exports traces over "
            "http/protobuf only; traces are not exported"
        )
        return Tracer()
    try:
        return OtlpTracer(version)
    except ImportError:
        warn(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed "
            "(pip install 'rebalance-sidecar[tracing]'): traces are not exported"
        )
        return Tracer()


_tracer: Tracer = Tracer()


def install(tracer: Tracer) -> None:
    """Make ``tracer`` the process's (flushed at exit)."""
    global _tracer
    _tracer = tracer
    if tracer.exporting:
        atexit.register(tracer.shutdown)


def tracer() -> Tracer:
    return _tracer


# -- the rebalance's spans --------------------------------------------------------------------


def _event_attributes(draft: EventDraft) -> Attributes:
    return {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.consumer.group.name": draft.group_id,
        "messaging.kafka.member.id": draft.member_id or "",
        "messaging.kafka.generation.id": draft.generation_id,
        "cloudevents.event_id": draft.id,
        "cloudevents.event_source": draft.source,
        "cloudevents.event_type": draft.type.value,
        "cloudevents.event_spec_version": "1.0",
        "rebalance.protocol": draft.protocol,
        "rebalance.partitions": [f"{p.topic}[{p.partition}]" for p in draft.partitions],
    }


class RebalanceTraces:
    """The member thread's side: one trace per rebalance, one callback span per event.

    A ``revoked``, ``lost`` or ``rebalance.requested`` opens the rebalance's trace (unless
    one is open); the ``assigned`` that follows joins it and closes it. ``stamp`` gives a
    draft its ``traceparent`` (the callback span's context); ``journaled`` records the
    callback and journal-append spans once the event is in the journal.
    """

    def __init__(self, source: Callable[[], Tracer] = tracer) -> None:
        self._tracer = source
        self._root: TraceContext | None = None
        self._root_started = 0.0
        self._root_attributes: Attributes = {}

    def stamp(self, draft: EventDraft) -> EventDraft:
        exporting = self._tracer().exporting
        now = time.time()
        if self._root is not None and now - self._root_started > OPEN_TRACE_SECONDS:
            self._close(now)
        if self._root is None:
            self._root = TraceContext.new_trace(exporting)
            self._root_started = draft.time
            self._root_attributes = {
                "messaging.system": "kafka",
                "messaging.consumer.group.name": draft.group_id,
                "messaging.kafka.member.id": draft.member_id or "",
            }
        callback = self._root.child()
        # The draft was just made by the member thread and no one else holds it yet: set
        # the field in place (``dataclasses.replace`` cost more than the rest of this).
        object.__setattr__(draft, "traceparent", callback.traceparent)
        return draft

    def journaled(self, draft: EventDraft, append_started: float) -> None:
        """After the append of a stamped draft: its callback and journal-append spans."""
        out = self._tracer()
        root = self._root
        now = time.time()
        context = parse_traceparent(draft.traceparent) if out.exporting else None
        if context is not None and root is not None:
            attributes = _event_attributes(draft)
            out.record(
                SpanRecord(
                    f"{draft.type.value} callback", context, root, draft.time, now,
                    "producer", attributes,
                )
            )  # fmt: skip
            out.record(
                SpanRecord(
                    "journal append", context.child(), context, append_started, now,
                    "internal", {"db.system.name": "sqlite", "cloudevents.event_id": draft.id},
                )
            )  # fmt: skip
        if draft.type is EventType.ASSIGNED:
            self._root_attributes["messaging.kafka.generation.id"] = draft.generation_id
            self._close(now)

    def _close(self, now: float) -> None:
        root, self._root = self._root, None
        out = self._tracer()
        if root is not None and out.exporting:
            out.record(
                SpanRecord(
                    "rebalance", root, None, self._root_started, now, "internal",
                    self._root_attributes,
                )
            )  # fmt: skip


# -- the delivery's spans (loop side) ---------------------------------------------------------


@dataclass(slots=True)
class DeliverySpan:
    """One webhook delivery attempt: its context goes out in the ``traceparent`` header."""

    event: TraceContext | None
    context: TraceContext | None
    started: float
    subscription: str
    mode: str

    @property
    def header(self) -> str | None:
        return None if self.context is None else self.context.traceparent

    def answered(self, status: int | None, error: str | None) -> None:
        """The attempt is over: record it, and the application's answer as its child."""
        out = tracer()
        if self.context is None or not out.exporting:
            return
        now = time.time()
        attributes: Attributes = {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "rebalance.webhook.id": self.subscription,
            "rebalance.webhook.mode": self.mode,
            "rebalance.outcome": "acknowledged" if error is None else "failed",
        }
        if status is not None:
            attributes["http.response.status_code"] = status
        out.record(
            SpanRecord("deliver", self.context, self.event, self.started, now, "client",
                       attributes, error)
        )  # fmt: skip
        if status is not None:
            out.record(
                SpanRecord(
                    "application answer", self.context.child(), self.context, now, time.time(),
                    "internal", {"http.response.status_code": status}, error,
                )
            )  # fmt: skip


def commit_span(body: bytes, started: float, partitions: int, error: str | None) -> None:
    """The commit of offsets the application handed back on a revoke: a child of the
    event's callback span (the member commits once every blocking subscriber answered)."""
    out = tracer()
    event = traceparent_of(body) if out.exporting else None
    if event is None:
        return
    out.record(
        SpanRecord(
            "commit handed-back offsets", event.child(), event, started, time.time(), "client",
            {"messaging.system": "kafka", "messaging.operation.type": "settle",
             "messaging.batch.message_count": partitions},
            error,
        )
    )  # fmt: skip


def delivery_span(body: bytes, subscription: str, mode: str) -> DeliverySpan:
    """The span of one delivery attempt of the event in ``body``."""
    event = traceparent_of(body)
    child = None if event is None else event.child()
    return DeliverySpan(event, child, time.time(), subscription, mode)
