"""The HTTP/1.1 both listeners speak: uvicorn's h11 protocol, with a deadline for reading
each request.

uvicorn closes a connection that stays idle after a response (``timeout_keep_alive``),
but not one that never finishes a request: a connection opened and left silent, or a
request head or body sent a byte at a time, holds its socket and its buffers for as long
as the client likes (slowloris). The admin listener is reachable in the pod network, so
any pod could hold it open by the thousand. Here the client has
``SIDECAR_HTTP_REQUEST_TIMEOUT_MS`` from the moment the sidecar waits for a request (the
connection opened, or the previous response went out) until it has read that whole
request, head and body; past it the connection is closed. A response may take as long as
it takes (an event stream never ends): the deadline covers only what the client sends, and
not the wait of a client that sent ``Expect: 100-continue`` for the sidecar to ask for the
body. A connection idle after a response is closed by uvicorn after 5 s
(``timeout_keep_alive``), or by this deadline if it is shorter.

h11 rather than httptools, even where httptools is installed: h11 also gives up on a
request head still unfinished past 16 kB, where httptools buffered a 200 MB header.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

log = structlog.get_logger("sidecar.api")


def deadlined_h11(request_timeout: float) -> type[asyncio.Protocol]:
    """The protocol class for ``uvicorn.Config(http=...)``: h11 with this deadline."""

    class Deadlined(DeadlinedH11):
        timeout = request_timeout

    return Deadlined


class DeadlinedH11(H11Protocol):
    """h11, closing a connection that does not send a whole request within ``timeout``
    seconds of the sidecar starting to wait for one."""

    timeout: float = 10.0

    def __init__(self, config: Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        # When the awaited request must have been read (loop time), None when not waiting.
        # The timer is not moved for every request (a keep-alive client sends hundreds a
        # second): when it fires before the due time it is set again for it.
        self._due: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        # The request cycle that was current when the wait began (None: the first request):
        # a cycle other than this one, with its body read, is the awaited request.
        self._before: RequestResponseCycle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_request(None)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._check_read()

    def on_response_complete(self) -> None:
        finished = self.cycle
        super().on_response_complete()  # may start a pipelined request at once
        if not self.transport.is_closing():
            self._await_request(finished)
            self._check_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self._due = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def _await_request(self, before: RequestResponseCycle | None) -> None:
        self._before = before
        self._due = self.loop.time() + self.timeout
        if self._timer is None:
            self._timer = self.loop.call_at(self._due, self._on_timer)

    def _check_read(self) -> None:
        cycle = self.cycle
        if (
            self._due is not None
            and cycle is not None
            and cycle is not self._before
            and not cycle.more_body
        ):
            self._due = None

    def _on_timer(self) -> None:
        self._timer = None
        if self._due is None or self.transport.is_closing():
            return
        if self.loop.time() < self._due:  # a later request is awaited: wait for its due time
            self._timer = self.loop.call_at(self._due, self._on_timer)
            return
        cycle = self.cycle
        if (
            cycle is not None
            and cycle is not self._before
            and cycle.waiting_for_100_continue
            and self.conn.they_are_waiting_for_100_continue
        ):
            # ``Expect: 100-continue``: the client waits for us to ask for the body, which
            # uvicorn does only when the application reads it (a route that takes no body
            # never does, and answers all the same). Not the client's delay: look again
            # after another period, by when the body has been asked for or the answer sent.
            # (h11's flag, not only uvicorn's: a client that sends its body anyway is no
            # longer waiting, and a trickled body is its own delay.)
            self._due = self.loop.time() + self.timeout
            self._timer = self.loop.call_at(self._due, self._on_timer)
            return
        log.debug(
            "connection closed: no whole request within the deadline",
            client=f"{self.client[0]}:{self.client[1]}" if self.client else None,
            timeout_s=self.timeout,
        )
        self.transport.close()
