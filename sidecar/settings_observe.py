"""Settings of what the sidecar shows about its group: flapping, links to traces.

A base class of ``sidecar.settings.Settings`` (same ``SIDECAR_`` prefix and rules), kept
apart so that module does not grow. Trace export itself is configured by OpenTelemetry's
standard ``OTEL_*`` variables (``sidecar.tracing``), not here.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

_DAY_MS = 86_400_000


class ObservabilitySettings(BaseModel):
    flapping_rebalances: int = Field(
        default=5,
        ge=1,
        le=1_000_000,
        description="The status page marks the group as flapping when this member saw more "
        "than this many rebalances within `SIDECAR_FLAPPING_WINDOW_MS`.",
    )
    flapping_window_ms: int = Field(
        default=600_000,
        ge=1_000,
        le=_DAY_MS,
        description="The window of `SIDECAR_FLAPPING_REBALANCES` (default 10 minutes).",
    )
    trace_url_template: str | None = Field(
        default=None,
        max_length=2048,
        description="A link to a trace in your tracing UI, with `{trace_id}` where the trace "
        "id goes (e.g. `http://jaeger:16686/trace/{trace_id}`): the status page links each "
        "rebalance of its timeline to its trace. Unset: no links.",
    )
