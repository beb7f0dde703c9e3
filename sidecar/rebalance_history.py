"""When this member's rebalances completed: for the metrics, ``/group`` and the page."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

HOUR_SECONDS = 3600.0


class RebalanceHistory:
    """When this member's rebalances completed (unix times), as far back as needed."""

    def __init__(self, keep_seconds: float = HOUR_SECONDS) -> None:
        self._keep = keep_seconds
        self._times: deque[float] = deque()
        self._lock = threading.Lock()

    def completed(self, at: float | None = None) -> None:
        with self._lock:
            self._times.append(time.time() if at is None else at)
            self._trim(self._times[-1])

    def _trim(self, now: float) -> None:
        while self._times and self._times[0] < now - self._keep:
            self._times.popleft()

    def since(self, start: float) -> int:
        with self._lock:
            return sum(1 for t in self._times if t >= start)

    @property
    def last(self) -> float | None:
        with self._lock:
            return self._times[-1] if self._times else None

    def summary(
        self, window_s: float, flapping_over: int, now: float | None = None
    ) -> dict[str, Any]:
        """What ``/group`` and the page show: the count in the window and whether it flaps."""
        now = time.time() if now is None else now
        count = self.since(now - window_s)
        return {
            "last_at": self.last,
            "in_window": count,
            "window_seconds": window_s,
            "flapping": count > flapping_over,
        }
