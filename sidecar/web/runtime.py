"""What the routers need from the running sidecar, and how a handler gets it."""

from __future__ import annotations

from typing import Annotated, Any, Protocol

from fastapi import Depends, Request
from prometheus_client import CollectorRegistry

from sidecar.feed import Feed
from sidecar.handoff import Handoff
from sidecar.journal import Journal
from sidecar.model import Assignment
from sidecar.positions import PositionsView
from sidecar.probes import Probes
from sidecar.schemas import ErrorOut
from sidecar.settings import Settings
from sidecar.subscriptions import Registry

#: How long a command (enforce, commit) may wait for the member thread to take it. The
#: thread serves commands between ``poll()`` calls, so only a callback holding it (a revoke
#: barrier) makes it late; the caller then gets 503 with ``Retry-After``.
COMMAND_TIMEOUT_SECONDS = 30.0


class Runtime(Protocol):
    """What the API needs from the running sidecar (implemented by ``daemon.Sidecar``)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def handoff(self) -> Handoff: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def feed(self) -> Feed: ...

    @property
    def metrics_registry(self) -> CollectorRegistry: ...

    @property
    def probes(self) -> Probes: ...

    @property
    def positions(self) -> PositionsView: ...

    @property
    def stopping(self) -> bool: ...

    async def drain(self, deadline: float) -> Assignment | None: ...


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def command_timeout(request: Request) -> float:
    timeout: float = request.app.state.command_timeout
    return timeout


#: Declare ``runtime: RuntimeDep`` in a handler to get the running sidecar.
RuntimeDep = Annotated[Runtime, Depends(_runtime)]


_DESCRIPTIONS = {
    400: "Undecodable body, or a header or query string that is not what it must be",
    401: "Missing or wrong credential",
    403: "Refused to this caller: a cross-site browser request, or a non-loopback drain "
    "without a drain token",
    404: "No such resource",
    409: "Conflicts with the member's state",
    413: "Body too large",
    422: "Invalid request",
    503: "The member is busy, Kafka refused, the journal failed, or too many event streams "
    "are open (retry after `Retry-After` seconds)",
    504: "Did not happen before the deadline",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for error statuses, all with the one JSON error body."""
    return {
        status: {"model": ErrorOut, "description": _DESCRIPTIONS[status]} for status in statuses
    }
