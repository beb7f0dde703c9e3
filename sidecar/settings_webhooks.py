"""Settings of the webhooks: those declared at deploy time, where webhooks may point, how
deliveries retry and give up, and the TLS of https webhooks.

A base class of ``sidecar.settings.Settings`` (same ``SIDECAR_`` prefix and rules): the
variable names and ``settings.webhooks`` are the same as if declared there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from sidecar.settings_values import DAY_MS as _DAY_MS
from sidecar.settings_values import WebhookSpec


class WebhookSettings(BaseModel):
    webhooks: Annotated[tuple[WebhookSpec, ...], NoDecode] = Field(
        default=(),
        description="Webhooks declared at deploy time: JSON list of "
        "`{url, secret, events?, mode?, timeout_ms?, id?}` (the secret is required here: "
        "the application must know it to verify signatures; `mode` defaults to `blocking`).",
    )
    webhook_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated hosts webhooks may target; empty allows any host.",
    )
    webhook_max_count: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="At most this many webhooks that deliver (one disabled by a 410 does not "
        "count); a POST /webhooks past it is refused (409) until one is deleted. Webhooks "
        "declared in SIDECAR_WEBHOOKS count but are never refused.",
    )
    webhook_max_attempts: int = Field(
        default=0, ge=0, description="Give up a delivery after this many attempts (0: no limit)."
    )
    webhook_max_age_ms: int = Field(
        default=3_600_000,
        ge=1_000,
        le=30 * _DAY_MS,
        description="Give up a delivery this long after the event was journaled. A blocking "
        "subscriber that is down holds its later events until then (ordering).",
    )
    webhook_backoff_initial_ms: int = Field(
        default=500,
        ge=1,
        le=_DAY_MS,
        description="First retry delay; doubles per attempt, full jitter.",
    )
    webhook_backoff_max_ms: int = Field(
        default=30_000,
        ge=1,
        le=_DAY_MS,
        description="Largest retry delay, also caps `Retry-After`.",
    )
    webhook_tls_ca_location: Path | None = Field(
        default=None,
        description="PEM file of the CA certificate(s) that https webhooks' servers are "
        "verified against, instead of the public ones (certifi's bundle); a private CA. "
        "Reloaded when the file changes.",
    )
    webhook_tls_certificate_location: Path | None = Field(
        default=None,
        description="PEM client certificate (chain) sent to https webhooks that ask for one "
        "(mutual TLS); the key may be in the same file. Reloaded when the file changes.",
    )
    webhook_tls_key_location: Path | None = Field(
        default=None,
        description="PEM private key of `SIDECAR_WEBHOOK_TLS_CERTIFICATE_LOCATION`, when not "
        "in that file. Reloaded when the file changes.",
    )
    webhook_tls_key_password: SecretStr | None = Field(
        default=None,
        description="Password of an encrypted client key (never shown).",
    )

    @field_validator("webhook_allowed_hosts", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("webhooks", mode="before")
    @classmethod
    def _parse_webhooks(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else ()
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON: {exc}") from None
            except RecursionError:
                raise ValueError("not valid JSON: nested too deeply") from None
        return value

    @field_validator("webhooks")
    @classmethod
    def _one_webhook_per_id(cls, value: tuple[WebhookSpec, ...]) -> tuple[WebhookSpec, ...]:
        seen: set[str] = set()
        for spec in value:
            if spec.subscription_id in seen:
                what = f"the id {spec.id!r}" if spec.id else f"the URL {spec.url!r} and no id"
                raise ValueError(
                    f"two webhooks share {what}: one would silently replace the other; "
                    "give each its own id"
                )
            seen.add(spec.subscription_id)
        return value
