"""Acting as the group member: enforce a rebalance, commit offsets, drain (bearer token)."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from sidecar.commands import Commit, EnforceRebalance
from sidecar.errors import DeadlinePassed, MemberBusy, Stopping
from sidecar.handoff import Command
from sidecar.model import MemberState, PartitionOffset
from sidecar.schemas import AssignmentOut, CommitIn, CommitOut, DrainOut, EnforceIn, EnforceOut
from sidecar.web.access import MayMutate
from sidecar.web.assignment import MAX_WAIT_SECONDS
from sidecar.web.runtime import Runtime, RuntimeDep, command_timeout, errors

T = TypeVar("T")

router = APIRouter(tags=["control"], dependencies=MayMutate)

TimeoutDep = Annotated[float, Depends(command_timeout)]


async def submit(runtime: Runtime, command: Command[T], timeout: float) -> T:
    """Run a command on the member thread. Not taken in time: withdrawn, never run
    (``MemberBusy``, 503). Taken but unfinished: it runs on, so the caller is told its outcome
    is unknown (504), never that it failed."""
    try:
        return await runtime.handoff.submit(command, timeout=timeout)
    except MemberBusy:
        raise MemberBusy(
            f"the group member did not take the command within {timeout:g} s "
            "(a rebalance callback holds it); it was not run"
        ) from None
    except TimeoutError:
        raise DeadlinePassed(
            f"the group member took the command but it is still running after {timeout:g} s; "
            "its outcome is unknown (check /assignment, or the committed offsets)"
        ) from None


@router.post(
    "/enforce-rebalance",
    status_code=202,
    response_model=EnforceOut | AssignmentOut,
    responses={
        **errors(401, 403, 409, 503),
        200: {"model": AssignmentOut},
        **errors(504),
    },
)
async def enforce_rebalance(
    runtime: RuntimeDep,
    timeout: TimeoutDep,
    body: EnforceIn | None = None,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False)] = 0,
) -> Any:
    """Make the group rebalance (KIP-568), with a KIP-800 reason. `?wait=<s>` answers 200
    with the new assignment once a higher generation is stable, or 504."""
    if runtime.stopping:
        raise Stopping("the sidecar is stopping")
    reason = (body.reason if body else None) or "enforce-rebalance requested over HTTP"
    result = await submit(runtime, EnforceRebalance(reason), timeout)
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
        raise DeadlinePassed(
            f"no generation above {before} became stable within {wait} s",
            generation_id=before,
        )
    return JSONResponse(reached.as_dict(), status_code=200)


@router.post("/commit", response_model=CommitOut, responses=errors(401, 403, 409, 503, 504))
async def commit(runtime: RuntimeDep, timeout: TimeoutDep, body: CommitIn) -> dict[str, Any]:
    """Commit offsets as the group member. Refused (409) for partitions not owned, and,
    with `generation_id`, when the member has moved on to another generation. `503` when
    Kafka refused, or did not answer within `SIDECAR_COMMIT_TIMEOUT_MS` or before a
    rebalance began (the outcome is unknown: commit again), or an earlier commit of the
    same partitions is still unanswered (not committed: one at a time per partition)."""
    offsets = tuple(PartitionOffset(o.topic, o.partition, o.offset) for o in body.offsets)
    await submit(runtime, Commit(offsets, generation_id=body.generation_id), timeout)
    return {"committed": [o.model_dump() for o in body.offsets]}


#: ``?deadline=``: how long a drain may take, in seconds (both listeners' drains).
DrainDeadline = Annotated[
    float | None,
    Query(
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="Seconds the drain may take (default `SIDECAR_DRAIN_TIMEOUT_MS`)",
    ),
]


@router.post("/drain", response_model=DrainOut, responses=errors(401, 403, 504))
async def drain(runtime: RuntimeDep, deadline: DrainDeadline = None) -> dict[str, Any]:
    """Leave the group now: deliver `revoked` to the (still running) application through
    the barrier, commit what it hands back, then stay up outside the group. For the
    application container's `preStop` hook (the admin listener has the kubelet's)."""
    return await drained(runtime, deadline)


async def drained(runtime: Runtime, deadline: float | None) -> dict[str, Any]:
    seconds = deadline or runtime.settings.drain_timeout_ms / 1000
    left = await runtime.drain(seconds)
    if left is None:
        raise DeadlinePassed(f"not drained within {seconds:g} s")
    return {"drained": True, "assignment": left.as_dict()}
