"""The webhook registry: register, list, read, delete, and each one's delivery log."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from sidecar.errors import NotFound
from sidecar.schemas import DeliveryOut, WebhookCreatedOut, WebhookIn, WebhookOut
from sidecar.web.access import MayMutate
from sidecar.web.runtime import RuntimeDep, errors

router = APIRouter(tags=["webhooks"])


@router.get("/webhooks", response_model=list[WebhookOut], responses=errors(503))
async def list_webhooks(runtime: RuntimeDep) -> list[dict[str, Any]]:
    return [sub.public() for sub in runtime.registry.list()]


@router.post(
    "/webhooks",
    status_code=201,
    response_model=WebhookCreatedOut,
    dependencies=MayMutate,
    responses=errors(401, 403, 409, 503),
)
async def create_webhook(runtime: RuntimeDep, body: WebhookIn) -> dict[str, Any]:
    """Register a webhook. The secret (generated `whsec_...` when not given) is returned
    only here."""
    sub = runtime.registry.create(
        url=body.url,
        events=body.events,
        mode=body.mode,
        secret=body.secret,
        timeout_ms=body.timeout_ms,
    )
    return {**sub.public(), "secret": sub.secret}


@router.get("/webhooks/{webhook_id}", response_model=WebhookOut, responses=errors(404, 503))
async def get_webhook(runtime: RuntimeDep, webhook_id: str) -> dict[str, Any]:
    sub = runtime.registry.get(webhook_id)
    if sub is None:
        raise NotFound(f"no webhook {webhook_id!r}")
    return sub.public()


@router.delete(
    "/webhooks/{webhook_id}",
    status_code=204,
    dependencies=MayMutate,
    responses=errors(401, 403, 404, 503),
)
async def delete_webhook(runtime: RuntimeDep, webhook_id: str) -> Response:
    if not runtime.registry.delete(webhook_id):
        raise NotFound(f"no webhook {webhook_id!r}")
    return Response(status_code=204)


@router.get(
    "/webhooks/{webhook_id}/deliveries",
    response_model=list[DeliveryOut],
    responses=errors(404, 503),
)
async def deliveries(
    runtime: RuntimeDep,
    webhook_id: str,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    """The delivery log, newest first: attempts, give-ups, barrier timeouts, commits."""
    if runtime.registry.get(webhook_id) is None:
        raise NotFound(f"no webhook {webhook_id!r}")
    return [d.as_dict() for d in runtime.journal.deliveries(webhook_id, limit)]
