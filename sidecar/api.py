"""The HTTP API (FastAPI): assignment, control, webhooks, events, metrics, probes.

Handlers run on the asyncio loop. They read the published ``Assignment`` snapshot and
never touch the ``Consumer``: what needs it (enforce, commit, drain) is a command
submitted through the handoff. Every error is a JSON ``{"error": ...}`` with a 4xx that
says what is wrong; mutating endpoints require the bearer token when one is configured.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sidecar.commands import (
    Commit,
    CommitFailed,
    EnforceRebalance,
    NotInGroup,
    NotOwned,
)
from sidecar.feed import Feed
from sidecar.handoff import Handoff, MemberGone
from sidecar.journal import Journal
from sidecar.model import Assignment, MemberState, PartitionOffset
from sidecar.schemas import (
    AssignmentOut,
    CommitIn,
    CommitOut,
    DeliveryOut,
    DrainOut,
    EnforceIn,
    EnforceOut,
    ErrorOut,
    ProbeOut,
    WebhookCreatedOut,
    WebhookIn,
    WebhookOut,
)
from sidecar.settings import Settings
from sidecar.subscriptions import InvalidSubscription, Registry
from sidecar.web import router as web_router

MAX_BODY_BYTES = 64 * 1024
MAX_WAIT_SECONDS = 300.0


class Runtime(Protocol):
    """What the API needs from the running sidecar (implemented by ``daemon.Sidecar``)."""

    settings: Settings
    handoff: Handoff
    registry: Registry
    journal: Journal
    feed: Feed
    metrics_registry: CollectorRegistry

    @property
    def stopping(self) -> bool: ...

    def liveness(self) -> tuple[bool, str]: ...

    async def drain(self, deadline: float) -> Assignment | None: ...


class ApiError(Exception):
    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": text}
    for code, text in (
        (400, "A body that cannot be decoded (not UTF-8)"),
        (401, "Missing or wrong bearer token"),
        (409, "Conflicts with the member's state"),
        (413, "Body too large"),
        (422, "Invalid request"),
    )
}


# -- the app --------------------------------------------------------------------------------


def create_app(runtime: Runtime) -> FastAPI:
    app = FastAPI(
        title="rebalance-sidecar",
        version="0.1.0",
        summary="Kafka consumer-group rebalances for any application, across a process boundary.",
        responses={400: _ERRORS[400], 413: _ERRORS[413], 422: _ERRORS[422]},
    )
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    _install_error_handlers(app)
    token = runtime.settings.api_token

    async def authorized(authorization: Annotated[str | None, Header()] = None) -> None:
        if token is None:
            return
        expected = f"Bearer {token.get_secret_value()}"
        if authorization is None or not secrets.compare_digest(
            authorization.encode(), expected.encode()
        ):
            raise ApiError(401, "missing or wrong bearer token (Authorization: Bearer <token>)")

    guarded = [Depends(authorized)]
    auth_errors: dict[int | str, dict[str, Any]] = {401: _ERRORS[401]}

    @app.get("/assignment", response_model=AssignmentOut, tags=["assignment"])
    async def get_assignment(
        after: Annotated[int | None, Query(ge=0, le=2**62)] = None,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0,
    ) -> dict[str, Any]:
        """This member's assignment. `?after=<sequence>&wait=<s>` long-polls until the
        sequence passes `after` (or `wait` seconds pass)."""
        snapshot = runtime.handoff.snapshot
        if after is not None and wait > 0:
            snapshot = await runtime.handoff.wait_for_change(after, wait)
        return snapshot.as_dict()

    @app.post(
        "/enforce-rebalance",
        status_code=202,
        response_model=EnforceOut | AssignmentOut,
        dependencies=guarded,
        responses={
            **auth_errors,
            409: _ERRORS[409],
            200: {"model": AssignmentOut},
            504: {"model": ErrorOut, "description": "No new generation in time"},
        },
        tags=["control"],
    )
    async def enforce_rebalance(
        body: EnforceIn | None = None,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0,
    ) -> Any:
        """Make the group rebalance (KIP-568), with a KIP-800 reason. `?wait=<s>` answers 200
        with the new assignment once a higher generation is stable, or 504."""
        if runtime.stopping:
            raise ApiError(409, "the sidecar is stopping")
        reason = (body.reason if body else None) or "enforce-rebalance requested over HTTP"
        try:
            result = await runtime.handoff.submit(EnforceRebalance(reason), timeout=30)
        except (NotInGroup, MemberGone) as exc:
            raise ApiError(409, str(exc)) from None
        if wait <= 0:
            return JSONResponse(
                {
                    "accepted": True,
                    "generation_id": result.generation_id,
                    "coalesced": not result.started,
                },
                status_code=202,
            )
        before = result.generation_id
        reached = await runtime.handoff.wait_until(
            lambda a: a.generation_id > before and a.state is MemberState.STABLE, wait
        )
        if reached is None:
            raise ApiError(
                504,
                f"no generation above {before} became stable within {wait} s",
                generation_id=before,
            )
        return JSONResponse(reached.as_dict(), status_code=200)

    @app.post(
        "/commit",
        response_model=CommitOut,
        dependencies=guarded,
        responses={
            **auth_errors,
            409: _ERRORS[409],
            503: {"model": ErrorOut, "description": "Kafka refused the commit"},
        },
        tags=["control"],
    )
    async def commit(body: CommitIn) -> dict[str, Any]:
        """Commit offsets as the group member. Refused (409) for partitions not owned."""
        offsets = tuple(PartitionOffset(o.topic, o.partition, o.offset) for o in body.offsets)
        try:
            await runtime.handoff.submit(Commit(offsets), timeout=30)
        except NotOwned as exc:
            raise ApiError(
                409,
                str(exc),
                not_owned=[{"topic": tp.topic, "partition": tp.partition} for tp in exc.foreign],
            ) from None
        except (NotInGroup, MemberGone) as exc:
            raise ApiError(409, str(exc)) from None
        except CommitFailed as exc:
            raise ApiError(503, str(exc)) from None
        return {"committed": [o.model_dump() for o in body.offsets]}

    @app.get("/webhooks", response_model=list[WebhookOut], tags=["webhooks"])
    async def list_webhooks() -> list[dict[str, Any]]:
        return [sub.public() for sub in runtime.registry.list()]

    @app.post(
        "/webhooks",
        status_code=201,
        response_model=WebhookCreatedOut,
        dependencies=guarded,
        responses=auth_errors,
        tags=["webhooks"],
    )
    async def create_webhook(body: WebhookIn) -> dict[str, Any]:
        """Register a webhook. The secret (generated `whsec_...` when not given) is returned
        only here."""
        try:
            sub = runtime.registry.create(
                url=body.url,
                events=body.events,
                mode=body.mode,
                secret=body.secret,
                timeout_ms=body.timeout_ms,
            )
        except InvalidSubscription as exc:
            raise ApiError(422, str(exc)) from None
        return {**sub.public(), "secret": sub.secret}

    @app.get(
        "/webhooks/{webhook_id}",
        response_model=WebhookOut,
        responses={404: {"model": ErrorOut, "description": "No such webhook"}},
        tags=["webhooks"],
    )
    async def get_webhook(webhook_id: str) -> dict[str, Any]:
        sub = runtime.registry.get(webhook_id)
        if sub is None:
            raise ApiError(404, f"no webhook {webhook_id!r}")
        return sub.public()

    @app.delete(
        "/webhooks/{webhook_id}",
        status_code=204,
        dependencies=guarded,
        responses={**auth_errors, 404: {"model": ErrorOut, "description": "No such webhook"}},
        tags=["webhooks"],
    )
    async def delete_webhook(webhook_id: str) -> Response:
        if not runtime.registry.delete(webhook_id):
            raise ApiError(404, f"no webhook {webhook_id!r}")
        return Response(status_code=204)

    @app.get(
        "/webhooks/{webhook_id}/deliveries",
        response_model=list[DeliveryOut],
        responses={404: {"model": ErrorOut, "description": "No such webhook"}},
        tags=["webhooks"],
    )
    async def deliveries(
        webhook_id: str, limit: Annotated[int, Query(ge=1, le=1000)] = 100
    ) -> list[dict[str, Any]]:
        """The delivery log, newest first: attempts, give-ups, barrier timeouts, commits."""
        if runtime.registry.get(webhook_id) is None:
            raise ApiError(404, f"no webhook {webhook_id!r}")
        return [d.as_dict() for d in runtime.journal.deliveries(webhook_id, limit)]

    @app.get(
        "/events",
        tags=["events"],
        responses={
            200: {
                "content": {"text/event-stream": {}, "application/json": {}},
                "description": "SSE stream, or JSON history with Accept: application/json",
            }
        },
    )
    async def events(
        request: Request,
        after: Annotated[int | None, Query(ge=0, le=2**62)] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> Response:
        """Events as SSE (`id` = sequence; resumes from `Last-Event-ID`), or the journal's
        history as JSON with `Accept: application/json` (`?after=&limit=`)."""
        start = after
        if last_event_id is not None:
            if not last_event_id.strip().isdigit():
                raise ApiError(422, "Last-Event-ID must be a sequence number")
            start = int(last_event_id)
        accept = request.headers.get("accept", "")
        if "application/json" in accept and "text/event-stream" not in accept:
            history = runtime.journal.events_after(start or 0, limit)
            return JSONResponse([e.cloudevent for e in history])
        if start is None:
            start = runtime.journal.last_sequence()
        return EventSourceResponse(_stream(runtime, start), ping=15)

    @app.post(
        "/drain",
        response_model=DrainOut,
        dependencies=guarded,
        responses={
            **auth_errors,
            504: {"model": ErrorOut, "description": "Not drained before the deadline"},
        },
        tags=["control"],
    )
    async def drain(
        deadline: Annotated[float | None, Query(gt=0, le=3600)] = None,
    ) -> dict[str, Any]:
        """Leave the group now: deliver `revoked` to the (still running) application through
        the barrier, commit what it hands back, then stay up outside the group. For the
        application container's `preStop` hook in Kubernetes."""
        seconds = deadline or runtime.settings.drain_timeout_ms / 1000
        drained = await runtime.drain(seconds)
        if drained is None:
            raise ApiError(504, f"not drained within {seconds} s")
        return {"drained": True, "assignment": drained.as_dict()}

    @app.get(
        "/metrics",
        tags=["probes"],
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
    )
    async def metrics() -> Response:
        return Response(generate_latest(runtime.metrics_registry), media_type=CONTENT_TYPE_LATEST)

    @app.get(
        "/healthz", response_model=ProbeOut, tags=["probes"], responses={503: {"model": ProbeOut}}
    )
    async def healthz() -> JSONResponse:
        """Liveness: the poll loop is alive and recent. The broker being down does not fail
        it (a restart would not help)."""
        ok, reason = runtime.liveness()
        return JSONResponse({"ok": ok, "reason": reason}, status_code=200 if ok else 503)

    @app.get(
        "/readyz", response_model=ProbeOut, tags=["probes"], responses={503: {"model": ProbeOut}}
    )
    async def readyz() -> JSONResponse:
        """Readiness: in the group, connected, with a known assignment."""
        snapshot = runtime.handoff.snapshot
        if runtime.stopping:
            ok, reason = False, "stopping"
        elif snapshot.state is not MemberState.STABLE:
            ok, reason = False, f"member state is {snapshot.state.value}"
        elif not snapshot.connected:
            ok, reason = False, f"Kafka unreachable: {snapshot.error or 'no broker up'}"
        else:
            ok, reason = True, f"stable in generation {snapshot.generation_id}"
        return JSONResponse({"ok": ok, "reason": reason}, status_code=200 if ok else 503)

    app.include_router(web_router(runtime))
    return app


async def _stream(runtime: Runtime, start: int) -> AsyncIterator[dict[str, str]]:
    with runtime.feed.listen() as listener:
        last = start
        while True:  # history first, from the journal
            batch = runtime.journal.events_after(last, 500)
            if not batch:
                break
            for event in batch:
                yield {
                    "id": str(event.sequence),
                    "event": event.type.value,
                    "data": event.body.decode(),
                }
            last = batch[-1].sequence
        while not listener.overflowed:
            try:
                event = await asyncio.wait_for(listener.queue.get(), 5.0)
            except TimeoutError:
                if runtime.stopping:
                    return
                continue
            if event.sequence <= last:
                continue
            if event.sequence > last + 1:  # a gap (events before we listened): read them
                for missed in runtime.journal.events_after(last, event.sequence - last - 1):
                    yield {
                        "id": str(missed.sequence),
                        "event": missed.type.value,
                        "data": missed.body.decode(),
                    }
            yield {
                "id": str(event.sequence),
                "event": event.type.value,
                "data": event.body.decode(),
            }
            last = event.sequence


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(
            {"error": exc.message, **exc.extra}, status_code=exc.status, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error.get("loc", ()))
            problems.append(f"{where}: {error.get('msg')}")
        return JSONResponse(
            {
                "error": "invalid request: " + "; ".join(problems),
                "detail": jsonable_encoder(exc.errors(), custom_encoder={Exception: str}),
            },
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            {"error": str(exc.detail)},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(send, self.limit)
            return
        seen = 0
        started = False

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited, tracking_send)
        except _TooLarge:
            if not started:
                await _too_large(send, self.limit)


class _TooLarge(Exception):
    pass


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"error": f"request body larger than {limit} bytes"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = ["ApiError", "Runtime", "create_app"]
