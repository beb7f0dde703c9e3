"""Settings of the two HTTP listeners: the API (the application's) and the admin one
(probes, metrics, the kubelet's drain hook), their credentials and their bounds.

A base class of ``sidecar.settings.Settings`` (same ``SIDECAR_`` prefix and rules): the
variable names and ``settings.api_port`` are the same as if declared there. What combines
with other groups (a non-loopback API needs a token) is checked in ``Settings``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, SecretStr, field_validator

from sidecar.settings_values import is_ipv6 as _is_ipv6


class HttpSettings(BaseModel):
    api_host: str = Field(
        default="127.0.0.1",
        description="HTTP listener address (an IPv6 one with or without brackets). "
        "Non-loopback requires `SIDECAR_API_TOKEN`.",
    )
    api_port: int = Field(default=8080, ge=0, le=65535, description="HTTP listener port.")
    api_token: SecretStr | None = Field(
        default=None,
        description="Bearer token required by mutating endpoints (POST, DELETE); printable "
        "ASCII only (it travels in a header).",
    )
    admin_host: str = Field(
        default="0.0.0.0",  # noqa: S104 - the kubelet and Prometheus reach the pod IP
        description="Admin listener address: probes, metrics and the kubelet's drain hook "
        "(read-only but for the drain, which needs `SIDECAR_DRAIN_TOKEN` or loopback).",
    )
    admin_port: int = Field(
        default=8081,
        ge=-1,
        le=65535,
        description="Admin listener port (0: any free port; -1: no admin listener).",
    )
    drain_token: SecretStr | None = Field(
        default=None,
        description="Credential of the admin listener's drain path (header `X-Drain-Token`, "
        "printable ASCII only); without it only loopback callers may drain through the admin "
        "listener.",
    )
    http_request_timeout_ms: int = Field(
        default=10_000,
        ge=1_000,
        le=600_000,
        description="Both listeners: a client must send a whole request (head and body) "
        "within this long of the connection opening or of the previous response, or the "
        "connection is closed (a silent connection or a request sent a byte at a time "
        "would otherwise hold a socket for ever). Responses are not bounded: an event "
        "stream lasts as long as its client.",
    )
    event_streams_max: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="Event streams (`GET /events` as SSE) served at once; one more is "
        "`503` with `Retry-After` until one ends.",
    )
    ready_without_group: bool = Field(
        default=False,
        description="Report ready before the member first joined the group (readiness "
        "otherwise waits for the first assignment, then never depends on Kafka again).",
    )

    @field_validator("api_host", "admin_host")
    @classmethod
    def _unbracketed(cls, value: str) -> str:
        # ``[::1]``, as IPv6 addresses are written in URLs: the socket takes ``::1``.
        inner = value[1:-1] if value.startswith("[") and value.endswith("]") else None
        if inner is not None and _is_ipv6(inner):
            return inner
        return value

    @field_validator("api_token", "drain_token")
    @classmethod
    def _check_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return value
        token = value.get_secret_value()
        if not token.strip():
            raise ValueError("is blank; leave it unset for no token, or set a real one")
        if not re.fullmatch(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?", token):
            # It travels in an HTTP header, compared as ASCII, and a header value's
            # surrounding spaces are not part of it: anything else could never match
            # (every authenticated request answered 500), most likely a copy-paste accident.
            raise ValueError(
                "may hold only printable ASCII characters, without leading or trailing spaces"
            )
        return value
