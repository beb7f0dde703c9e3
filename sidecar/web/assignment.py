"""``GET /assignment``: the published snapshot, optionally long-polled."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from sidecar.schemas import AssignmentOut
from sidecar.web.runtime import RuntimeDep

MAX_WAIT_SECONDS = 300.0
#: Sequences are SQLite INTEGERs (signed 64 bit); anything larger cannot name an event.
MAX_SEQUENCE = 2**63 - 1

router = APIRouter(tags=["assignment"])


@router.get("/assignment", response_model=AssignmentOut)
async def get_assignment(
    runtime: RuntimeDep,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQUENCE)] = None,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0,
) -> dict[str, Any]:
    """This member's assignment. `?after=<sequence>&wait=<s>` long-polls until the
    sequence passes `after` (or `wait` seconds pass)."""
    snapshot = runtime.handoff.snapshot
    if after is not None and wait > 0:
        snapshot = await runtime.handoff.wait_for_change(after, wait)
    return snapshot.as_dict()
