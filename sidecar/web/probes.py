"""Probes and metrics, served on both listeners (see ``sidecar.probes`` for why)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sidecar.probes import Probe
from sidecar.schemas import ProbeOut
from sidecar.web.runtime import RuntimeDep

router = APIRouter(tags=["probes"])
_PROBE = {"response_model": ProbeOut, "responses": {503: {"model": ProbeOut}}}


def _answer(probe: Probe) -> JSONResponse:
    return JSONResponse({"ok": probe.ok, "reason": probe.reason}, status_code=probe.status)


@router.get("/livez", **_PROBE)  # type: ignore[arg-type]
async def livez(runtime: RuntimeDep) -> JSONResponse:
    """Liveness: the member thread and its poll loop are alive. A Kafka outage never
    fails it (a restart would not bring the broker back)."""
    return _answer(runtime.probes.liveness())


@router.get("/healthz", **_PROBE)  # type: ignore[arg-type]
async def healthz(runtime: RuntimeDep) -> JSONResponse:
    """Alias of `/livez`."""
    return _answer(runtime.probes.liveness())


@router.get("/startupz", **_PROBE)  # type: ignore[arg-type]
async def startupz(runtime: RuntimeDep) -> JSONResponse:
    """Startup: the journal is open and the API serves. Never depends on Kafka."""
    return _answer(runtime.probes.startup())


@router.get("/readyz", **_PROBE)  # type: ignore[arg-type]
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    """Readiness: started and joined the group once (or `ready_without_group`); stays
    ready through rebalances and broker outages; not ready while stopping or drained."""
    return _answer(runtime.probes.readiness())


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
async def metrics(runtime: RuntimeDep) -> Response:
    """Prometheus text format."""
    return Response(generate_latest(runtime.metrics_registry), media_type=CONTENT_TYPE_LATEST)
