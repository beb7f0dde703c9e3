"""When to try a failed webhook delivery again, and when to stop trying."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

# Not str.isdigit(): that accepts '²' and '٣', which float() then refuses or misreads.
_DELTA_SECONDS = re.compile(r"[0-9]+", re.ASCII)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded by attempts and by the event's age."""

    initial: float
    maximum: float
    max_attempts: int  # 0: unlimited
    max_age: float

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            # Floored: `Retry-After: 0` or a date in the past must not turn retries into a
            # busy loop of POSTs against a subscriber that just said it is overloaded.
            return min(max(retry_after, self.initial), self.maximum)
        # Full jitter (AWS architecture blog): spreads retries of many sidecars.
        # The exponent is capped: 2.0 ** 1024 overflows a float, and the cap is long reached.
        return random.uniform(0, min(self.maximum, self.initial * 2.0 ** min(attempt - 1, 62)))

    def exhausted(self, attempt: int, journaled_at: float, now: float) -> bool:
        if self.max_attempts and attempt >= self.max_attempts:
            return True
        return now - journaled_at >= self.max_age


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """``Retry-After`` per RFC 9110 10.2.3: delta-seconds (ASCII digits only) or an HTTP-date.

    Anything else is ignored (``None``): a subscriber's odd header must never stop delivery.
    """
    if not value:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": an HTTP-date is always GMT
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - now
