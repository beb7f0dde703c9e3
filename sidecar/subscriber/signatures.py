"""Standard Webhooks signatures: :func:`sign`, :func:`verify` and :class:`InvalidSignature`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
DEFAULT_TOLERANCE = 300.0  # seconds a webhook-timestamp may be off, as the reference libraries


class InvalidSignature(Exception):
    """The request is not signed with the webhook's secret (or is too old, or malformed)."""


def secret_key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except ValueError as exc:
        raise ValueError("the secret must be whsec_ followed by base64") from exc


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks signature (``v1,<base64 HMAC-SHA256 of id.timestamp.body>``)."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(
    secret: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> dict[str, Any]:
    """The JSON body, when ``headers`` carry a valid Standard Webhooks signature of it."""
    lowered = {k.lower(): v for k, v in headers.items()}
    message_id = lowered.get("webhook-id", "")
    stamp = lowered.get("webhook-timestamp", "")
    signatures = lowered.get("webhook-signature", "")
    if not message_id or not stamp or not signatures:
        raise InvalidSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise InvalidSignature("webhook-timestamp is not an integer") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise InvalidSignature("webhook-timestamp is outside the tolerance")
    expected = sign(secret, message_id, timestamp, body).split(",", 1)[1]
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            break
    else:
        raise InvalidSignature("no matching v1 signature")
    try:
        document = json.loads(body)
    except ValueError:
        raise InvalidSignature("the signed body is not JSON") from None
    if not isinstance(document, dict):
        raise InvalidSignature("the signed body is not a JSON object")
    return document
