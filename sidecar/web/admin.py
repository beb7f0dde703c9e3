"""The admin listener's drain: what the kubelet calls as the pod's ``preStop`` hook.

``GET`` because ``preStop: httpGet`` can only GET; ``POST`` for everyone else. It blocks
until the member left the group and its ``revoked`` went through the barrier (bounded by
``SIDECAR_DRAIN_TIMEOUT_MS``), so the kubelet sends SIGTERM only after the application
handled its revocation.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sidecar.schemas import DrainOut
from sidecar.web.access import MayDrain
from sidecar.web.control import DrainDeadline, drained
from sidecar.web.runtime import RuntimeDep, errors

router = APIRouter(tags=["admin"], dependencies=MayDrain)


@router.api_route(
    "/drain", methods=["GET", "POST"], response_model=DrainOut, responses=errors(401, 403, 504)
)
async def drain(runtime: RuntimeDep, deadline: DrainDeadline = None) -> dict[str, Any]:
    """Leave the group, deliver `revoked`, answer with the final assignment. `?deadline=`
    as on the control API's drain (a hook's path may carry it: `/drain?deadline=60`)."""
    return await drained(runtime, deadline)
