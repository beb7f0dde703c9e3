"""Waking the member thread out of ``poll()`` when a command arrives.

The member thread alone calls the ``Consumer`` (the threading rule), so a command sent by
the loop waits until the current ``poll()`` returns. Without a way to end that wait the
poll timeout is both the command latency and the idle cost: 50 wake-ups a second to
answer within 20 ms.

librdkafka has the call that ends the wait: ``rd_kafka_queue_yield()`` on the consumer's
queue makes a blocked ``rd_kafka_consumer_poll()`` return at once (or the next one, when
none is blocked: the flag stays set until a poll sees it). The header documents it for use
from another thread; it only takes the queue's lock and signals its condition variable.
confluent-kafka-python does not expose it, so this module reaches it through ``ctypes``:

* the library is the one the extension module loaded (found in ``/proc/self/maps``, its
  version checked against ``confluent_kafka.libversion()``);
* the ``rd_kafka_t`` pointer is the first field after the object header of the
  extension's ``Handle`` struct (the layout of every confluent-kafka 2.x release), and it
  is trusted only when it points into writable memory (a heap) for the size of the struct
  and librdkafka then confirms it: ``rd_kafka_type()`` says consumer and
  ``rd_kafka_opaque()`` points back at the Python object (confluent-kafka sets it so).

When any check fails the member simply polls with its plain timeout
(``SIDECAR_POLL_TIMEOUT_MS``), as before. ``SIDECAR_POLL_WAKEUP=false`` turns it off.

Lifetime: the waker holds a reference to the consumer queue and must let it go *before*
``Consumer.close()``: librdkafka's close forwards that queue to its own and a yield then
would cut the close short. ``close()`` here takes the same lock as ``wake()``, so after
it returns no wake-up reaches librdkafka.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import confluent_kafka
import structlog

log = structlog.get_logger("sidecar.kafka.wakeup")

_RD_KAFKA_CONSUMER = 1
# confluent-kafka's Handle: PyObject_HEAD, then ``rd_kafka_t *rk``.
_RK_OFFSET = object.__basicsize__
# How much of an ``rd_kafka_t`` must be writable memory before librdkafka is asked about
# it: its opaque and type lie ~2.7 kB in (librdkafka 2.x).
_HANDLE_BYTES = 4096


class PollWaker(Protocol):
    def wake(self) -> None:
        """Make the member's current (or next) ``poll()`` return now. Any thread."""

    def close(self) -> None:
        """No wake-up reaches the consumer after this (call before ``close()``)."""


class _NoWakeUps:
    def wake(self) -> None:
        pass

    def close(self) -> None:
        pass


NO_WAKEUPS: PollWaker = _NoWakeUps()


class QueueYield:
    """``rd_kafka_queue_yield()`` on a consumer's queue, until closed."""

    def __init__(self, library: ctypes.CDLL, queue: int) -> None:
        self._library = library
        self._queue: int | None = queue
        self._lock = threading.Lock()

    def wake(self) -> None:
        with self._lock:
            if self._queue is not None:
                self._library.rd_kafka_queue_yield(self._queue)

    @property
    def closed(self) -> bool:
        return self._queue is None

    def close(self) -> None:
        with self._lock:
            queue, self._queue = self._queue, None
            if queue is not None:
                self._library.rd_kafka_queue_destroy(queue)


def poll_waker(consumer: Any) -> PollWaker | None:
    """A waker for ``consumer`` (called on the member thread, right after creating it),
    or None with the reason logged when this consumer cannot be woken. Never raises:
    whatever a library unlike the one checked does, the member polls on without it."""
    try:
        found = _consumer_queue(consumer)
    except Exception as exc:
        found = f"{type(exc).__name__}: {exc}"
    if isinstance(found, str):
        log.info("poll wake-ups unavailable; commands wait for the poll timeout", reason=found)
        return None
    return QueueYield(*found)


def _consumer_queue(consumer: Any) -> tuple[ctypes.CDLL, int] | str:
    """librdkafka and a new reference to ``consumer``'s queue, or why not."""
    if not isinstance(consumer, confluent_kafka.Consumer):
        return f"not a confluent_kafka.Consumer ({type(consumer).__name__})"
    release = metadata.version("confluent-kafka")
    if not release.startswith("2."):
        return f"confluent-kafka {release} (the layout read here is that of 2.x)"
    library = _librdkafka()
    if isinstance(library, str):
        return library
    rk = ctypes.c_void_p.from_address(id(consumer) + _RK_OFFSET).value
    if not rk:
        return "the consumer is closed"
    # librdkafka reads the fields it is asked for at a few kB into the handle: never let it
    # read through a pointer that is not inside writable memory (a heap's) that far.
    if not _writable(rk, _HANDLE_BYTES):
        return "the client handle is not where confluent-kafka 2.x keeps it"
    if library.rd_kafka_type(rk) != _RD_KAFKA_CONSUMER or library.rd_kafka_opaque(rk) != id(
        consumer
    ):
        return "librdkafka did not confirm the client handle"
    queue: int | None = library.rd_kafka_queue_get_consumer(rk)
    if not queue:
        return "the consumer has no group queue"
    return library, queue


def _maps() -> list[str]:
    return Path("/proc/self/maps").read_text().splitlines()


def _writable(address: int, size: int) -> bool:
    """``[address, address + size)`` lies in one readable, writable mapping."""
    for line in _maps():
        span, perms = line.split(None, 2)[:2]
        low, high = (int(end, 16) for end in span.split("-"))
        if low <= address and address + size <= high:
            return perms.startswith("rw")
    return False


@functools.cache
def _librdkafka() -> ctypes.CDLL | str:
    """The librdkafka confluent-kafka's extension runs on (the same mapping: dlopen of a
    loaded path returns it), or why it was not found."""
    try:
        maps = _maps()
    except OSError as exc:
        return f"no /proc/self/maps to find the loaded librdkafka in ({exc.strerror})"
    paths = {
        fields[5]
        for line in maps
        if "librdkafka" in line and len(fields := line.split(None, 5)) == 6
    }
    if len(paths) != 1:
        return f"librdkafka is mapped from {len(paths)} paths, not one: {sorted(paths)}"
    try:
        library = ctypes.CDLL(paths.pop())
    except OSError as exc:
        return f"the loaded librdkafka could not be opened again: {exc}"
    library.rd_kafka_version_str.restype = ctypes.c_char_p
    version = library.rd_kafka_version_str().decode()
    if version != confluent_kafka.libversion()[0]:
        return (
            f"librdkafka {version} found, confluent-kafka runs on {confluent_kafka.libversion()[0]}"
        )
    library.rd_kafka_type.argtypes = [ctypes.c_void_p]
    library.rd_kafka_type.restype = ctypes.c_int
    library.rd_kafka_opaque.argtypes = [ctypes.c_void_p]
    library.rd_kafka_opaque.restype = ctypes.c_void_p
    library.rd_kafka_queue_get_consumer.argtypes = [ctypes.c_void_p]
    library.rd_kafka_queue_get_consumer.restype = ctypes.c_void_p
    library.rd_kafka_queue_yield.argtypes = [ctypes.c_void_p]
    library.rd_kafka_queue_yield.restype = None
    library.rd_kafka_queue_destroy.argtypes = [ctypes.c_void_p]
    library.rd_kafka_queue_destroy.restype = None
    return library
