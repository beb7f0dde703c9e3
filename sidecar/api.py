"""The two HTTP apps: the control API and the admin listener.

* ``create_app`` — the control API (``SIDECAR_API_HOST:SIDECAR_API_PORT``, loopback by
  default): assignment, control, webhooks, events, docs, and the probes and metrics too.
* ``create_admin_app`` — the admin listener (``SIDECAR_ADMIN_HOST:SIDECAR_ADMIN_PORT``, the
  pod IP in Kubernetes): only the probes, ``/metrics`` and the kubelet's ``/drain``.

The routers live in ``sidecar.web``; every domain error is mapped to its status here, by
``sidecar.errors``, in one handler.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match, Route

from sidecar.errors import (
    JournalUnavailable,
    SidecarError,
    StatusError,
    http_body,
    http_headers,
    http_status,
    json_safe,
)
from sidecar.journal import storage_failed
from sidecar.web import admin, assignment, control, events, probes, webhooks
from sidecar.web.group import group_router
from sidecar.web.head import HeadAsGet
from sidecar.web.limits import BodyLimit
from sidecar.web.page import page_router
from sidecar.web.runtime import COMMAND_TIMEOUT_SECONDS, Runtime, errors

MAX_BODY_BYTES = 64 * 1024
VERSION = "0.1.0"

log = structlog.get_logger("sidecar.api")


def create_app(runtime: Runtime, *, command_timeout: float = COMMAND_TIMEOUT_SECONDS) -> FastAPI:
    app = _app(
        runtime,
        command_timeout,
        (
            assignment.router,
            control.router,
            webhooks.router,
            events.router,
            probes.router,
            group_router(runtime),
            page_router(),
        ),
        title="rebalance-sidecar",
        summary="Kafka consumer-group rebalances for any application, across a process boundary.",
        responses=errors(400, 413, 422),
    )
    app.add_middleware(assignment.AssignmentFastPath, runtime=runtime)
    return app


def create_admin_app(runtime: Runtime) -> FastAPI:
    """Probes, metrics and the drain; no docs (nothing here is for people to explore)."""
    return _app(
        runtime,
        COMMAND_TIMEOUT_SECONDS,
        (probes.router, admin.router),
        title="rebalance-sidecar admin",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )


def _app(
    runtime: Runtime, command_timeout: float, routers: Sequence[APIRouter], **options: Any
) -> FastAPI:
    app = FastAPI(version=VERSION, **options)
    app.state.runtime = runtime
    app.state.command_timeout = command_timeout
    for router in routers:
        app.include_router(router)
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    app.add_middleware(HeadAsGet, routes=get_only_routes(routers))
    _install_error_handlers(app, [route for router in routers for route in router.routes])
    return app


def get_only_routes(routers: Sequence[APIRouter]) -> list[APIRoute]:
    """The routes that take GET and nothing else: they answer HEAD too (``sidecar.web.head``;
    a route that also takes POST may act on a GET)."""
    for router in routers:
        if router.prefix:  # its routes would be matched without it
            raise ValueError(
                f"a router with a prefix ({router.prefix}) needs HEAD matching of its own"
            )
    return [
        route
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and route.methods == {"GET"}
    ]


def _install_error_handlers(app: FastAPI, routes: Sequence[BaseRoute]) -> None:
    """``routes``: the app's routers' (FastAPI keeps an included router as one entry)."""

    @app.exception_handler(SidecarError)
    async def domain_error(request: Request, exc: SidecarError) -> JSONResponse:
        if http_status(exc) >= 400:
            _drain_refused(request, http_status(exc), str(exc))
        return JSONResponse(http_body(exc), status_code=http_status(exc), headers=http_headers(exc))

    @app.exception_handler(sqlite3.DatabaseError)
    async def journal_failed(request: Request, exc: sqlite3.DatabaseError) -> JSONResponse:
        # The disk under the journal (full, I/O error, read-only, locked, corrupt), not the
        # request: one line in the log, no traceback. Other SQLite errors are bugs: a 500.
        if not storage_failed(exc):
            raise exc
        log.error(
            "journal failed under a request",
            method=request.method,
            path=request.url.path,
            error=str(exc),
        )
        return await domain_error(request, JournalUnavailable(f"the journal failed: {exc}"))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # The errors echo the caller's input (and name its keys): made JSON-safe first, so
        # a lone surrogate or a NaN the JSON parser let through cannot fail the rendering.
        errors = json_safe(list(exc.errors()))
        problems = []
        for error in errors:
            where = ".".join(str(p) for p in error.get("loc", ()))
            problems.append(f"{where}: {error.get('msg')}")
        # 422 is for a body that parsed but says something invalid; a query string,
        # header or path that is not what it must be is a malformed request: 400.
        in_body = any(tuple(error.get("loc", ()))[:1] == ("body",) for error in errors)
        if any(isinstance(error.get("input"), bytes) for error in exc.errors()):
            # FastAPI reads a body as JSON only under a JSON Content-Type (or none); under
            # any other (``curl -d`` sends a form's) the JSON reached the model as bytes,
            # and "not a valid dictionary" said nothing of why.
            sent = json_safe(request.headers.get("content-type", ""))
            problems = [
                f"the body is read as JSON only with Content-Type: application/json, not {sent!r}"
            ]
        status = 422 if in_body else 400
        _drain_refused(request, status, "; ".join(problems))
        return JSONResponse(
            {"error": "invalid request: " + "; ".join(problems), "detail": errors}, status
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = getattr(exc, "headers", None)
        detail = str(exc.detail)
        if exc.status_code == 400 and detail == _FASTAPI_UNDECODABLE:
            detail = _undecodable(exc.__cause__)
        _drain_refused(request, exc.status_code, detail)
        if exc.status_code == 405 and (allowed := allowed_methods(request, routes)):
            headers = {**(headers or {}), "Allow": ", ".join(allowed)}
        return JSONResponse(
            {"error": json_safe(detail)}, status_code=exc.status_code, headers=headers
        )


def _drain_refused(request: Request, status: int, why: str) -> None:
    """A drain that failed (a bad ``?deadline=``, a wrong token or method: refused; a busy
    member or a deadline passed: not finished) may leave the member in the group, and the
    kubelet, whose ``preStop`` it was, reports nothing of an answer's status: the log must.
    On both listeners: the control API's drain is the app container's hook."""
    if request.url.path != "/drain":
        return
    log.error(
        "drain refused: the member did not leave the group"
        if status < 500
        else "drain not finished: the member may still be in the group",
        status=status,
        error=json_safe(why),
        peer=request.client.host if request.client else None,
    )


# FastAPI's whole message for a body it could not decode (``fastapi.routing``).
_FASTAPI_UNDECODABLE = "There was an error parsing the body"


def _undecodable(cause: BaseException | None) -> str:
    """Why FastAPI could not decode a body, from what it raised on the way."""
    if isinstance(cause, UnicodeDecodeError):
        return "the body cannot be decoded: it is not UTF-8"
    if isinstance(cause, RecursionError):
        return "the body cannot be decoded: JSON nested deeper than the parser allows"
    return "the body could not be read as JSON"


def allowed_methods(request: Request, routes: Sequence[BaseRoute]) -> list[str]:
    """Every method the request's path takes among the app's own routes (``/docs``...)
    and ``routes``, for a 405's ``Allow`` (RFC 9110 15.5.6).

    Starlette names the methods of the first route whose path matched, so ``DELETE
    /webhooks`` was told ``Allow: GET`` where ``POST`` is served too. A route that takes
    ``GET`` alone answers ``HEAD`` as well (``sidecar.web.head``)."""
    methods: set[str] = set()
    for route in (*request.app.router.routes, *routes):
        if not isinstance(route, Route) or route.matches(request.scope)[0] is Match.NONE:
            continue
        methods |= route.methods or set()
        if isinstance(route, APIRoute) and route.methods == {"GET"}:
            methods.add("HEAD")
    return sorted(methods)


#: The first API's one error type, ``ApiError(status, message, **extra)``: still works.
ApiError = StatusError

__all__ = ["ApiError", "Runtime", "create_admin_app", "create_app"]
