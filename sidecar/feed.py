"""Live fan-out of journaled events to SSE clients (loop-side only).

Each listener gets a bounded queue. A client too slow to keep up is cut off instead of
growing memory without bound; it reconnects with ``Last-Event-ID`` and catches up from
the journal, so it loses nothing.
"""

from __future__ import annotations

import asyncio

from sidecar.model import Event


class Listener:
    def __init__(self, maxsize: int) -> None:
        self.queue: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self.overflowed = False


class Feed:
    def __init__(self, queue_size: int = 1000) -> None:
        self._listeners: set[Listener] = set()
        self._queue_size = queue_size

    def publish(self, event: Event) -> None:
        for listener in self._listeners:
            if listener.overflowed:
                continue
            try:
                listener.queue.put_nowait(event)
            except asyncio.QueueFull:
                listener.overflowed = True

    def open(self) -> Listener:
        """A listener that gets every event published from now on, until ``close``."""
        listener = Listener(self._queue_size)
        self._listeners.add(listener)
        return listener

    def close(self, listener: Listener) -> None:
        self._listeners.discard(listener)

    def __len__(self) -> int:
        return len(self._listeners)
