"""``GET /assignment``: the published snapshot, optionally long-polled.

Two ways in, one answer. The FastAPI route below is the documented one (``/docs``) and
serves the long-poll (``?after=&wait=``). A plain ``GET /assignment`` — no query string,
no body, the request every poller makes — is answered by ``AssignmentFastPath`` before
FastAPI's routing, parameter solving and response-model serialisation: what costs most
per request, for a document that only changes when the snapshot does. It sends the bytes
the route would send, encoded once per snapshot (``tests/component/test_api.py`` compares
them). The route needs no credential (reads never do), so neither does the fast path.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from sidecar.model import Assignment
from sidecar.schemas import AssignmentOut, AssignmentPositionsOut
from sidecar.web.runtime import Runtime, RuntimeDep

MAX_WAIT_SECONDS = 300.0
#: Sequences are SQLite INTEGERs (signed 64 bit); anything larger cannot name an event.
MAX_SEQUENCE = 2**63 - 1
PATH = "/assignment"

router = APIRouter(tags=["assignment"])


@router.get(
    PATH,
    response_model=AssignmentOut,
    responses={200: {"model": AssignmentPositionsOut, "description": "With `?offsets=true`"}},
)
async def get_assignment(
    runtime: RuntimeDep,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQUENCE)] = None,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False)] = 0,
    offsets: Annotated[bool, Query()] = False,
) -> Any:
    """This member's assignment. `?after=<sequence>&wait=<s>` long-polls until the
    sequence passes `after` (or `wait` seconds pass). `?offsets=true` adds `positions`:
    each owned partition's committed offset, high watermark and lag, read by a consumer
    of the group that never joins, and cached for a couple of seconds (`available: false`
    when Kafka did not answer: never an error)."""
    snapshot = runtime.handoff.snapshot
    if after is not None and wait > 0:
        snapshot = await runtime.handoff.wait_for_change(after, wait)
    if not offsets:
        return snapshot.as_dict()
    positions = await runtime.positions.read()
    body = AssignmentPositionsOut.model_validate(
        {**snapshot.as_dict(), "positions": positions.as_dict()}
    )
    return JSONResponse(body.model_dump(mode="json"))


# The route's serialisation: FastAPI validates the handler's dict against the response
# model and dumps it with pydantic's ``dump_json``. Doing the same here is what makes the
# fast path's bytes the route's bytes, escaping and all.
_DOCUMENT = TypeAdapter(AssignmentOut)
# A request with either header has a body; those go through the route, so ``BodyLimit``
# still answers an oversized declared body with 413 exactly as before.
_BODY_HEADERS = (b"content-length", b"transfer-encoding")


def encode_assignment(snapshot: Assignment) -> bytes:
    """``GET /assignment``'s body for ``snapshot``, as the documented route sends it."""
    return _DOCUMENT.dump_json(_DOCUMENT.validate_python(snapshot.as_dict()))


class _Encoded:
    """One snapshot and its response, built once: snapshots are replaced, never mutated,
    so the snapshot's identity is the cache key (and holding it keeps the id unique)."""

    __slots__ = ("body", "headers", "snapshot")

    def __init__(self, snapshot: Assignment) -> None:
        self.snapshot = snapshot
        self.body = encode_assignment(snapshot)
        # Starlette's ``Response`` order: content-length, then content-type.
        self.headers = (
            (b"content-length", str(len(self.body)).encode()),
            (b"content-type", b"application/json"),
        )


class AssignmentFastPath:
    """ASGI middleware: plain ``GET /assignment`` from the snapshot's cached encoding;
    everything else (query string, body, other paths and methods) to ``app``."""

    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime
        self._encoded: _Encoded | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            scope["type"] == "http"
            and scope["path"] == PATH
            and scope["method"] == "GET"
            and not scope["query_string"]
            # Under a root path the router matches the path without it; leave that to it.
            and not scope.get("root_path")
            and not any(name in _BODY_HEADERS for name, _ in scope["headers"])
        ):
            await self.app(scope, receive, send)
            return
        # Read on every request: the consumer thread replaces the snapshot at any moment,
        # and a client must see the new one at once.
        snapshot = self.runtime.handoff.snapshot
        encoded = self._encoded
        if encoded is None or encoded.snapshot is not snapshot:
            try:
                encoded = self._encoded = _Encoded(snapshot)
            except ValidationError:
                # A snapshot the schema refuses: the route reports it as it always did.
                await self.app(scope, receive, send)
                return
        # Fresh messages per request: a middleware outside this one may edit them.
        await send({"type": "http.response.start", "status": 200, "headers": list(encoded.headers)})
        await send({"type": "http.response.body", "body": encoded.body})
