"""The HTTP API's request and response bodies (they make the OpenAPI at ``/docs``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from sidecar.model import MAX_OFFSET, MAX_PARTITION, whole_number


def _whole(value: Any) -> Any:
    if isinstance(value, bool | str | bytes):
        raise ValueError("must be a JSON number, not a boolean or a string")
    if isinstance(value, float) and whole_number(value) is None and value.is_integer():
        raise ValueError(
            "a whole number this large must be written without a fraction or an exponent"
        )
    return value  # pydantic's int: 5.0 is 5, 5.5 is refused


#: A whole number as JSON writes one: ``5`` or ``5.0`` (JSON Schema's ``integer`` takes
#: both), never ``true`` or ``"5"``, which pydantic would read as 1 and 5 (an offset
#: read from ``true`` was committed as 1), nor ``1e17``, which is not exact.
WholeNumber = Annotated[int, BeforeValidator(_whole)]


class _Strict(BaseModel):
    """A request body: no field it does not know."""

    model_config = ConfigDict(extra="forbid")


class PartitionOut(BaseModel):
    topic: str
    partition: int


class AssignmentOut(BaseModel):
    group_id: str
    member_id: str | None
    group_instance_id: str | None
    generation_id: int
    protocol: Literal["eager", "cooperative"]
    state: Literal["starting", "joining", "stable", "rebalancing", "lost", "stopped"]
    partitions: list[PartitionOut]
    sequence: int
    updated_at: str
    error: str | None = None
    connected: bool


class PositionOut(BaseModel):
    topic: str
    partition: int
    committed: int | None = Field(description="Committed offset; null: none, or not read")
    high_watermark: int | None = Field(description="High watermark; null: not read")
    lag: int | None = Field(description="max(high_watermark - committed, 0), or null")


class PositionsOut(BaseModel):
    available: bool = Field(description="false: Kafka did not answer (figures null)")
    error: str | None
    read_at: str
    partitions: list[PositionOut]


class AssignmentPositionsOut(AssignmentOut):
    """``GET /assignment?offsets=true``: the assignment and its partitions' positions."""

    positions: PositionsOut | None = Field(
        default=None, description="With `?offsets=true` only (absent without it)"
    )


class ErrorOut(BaseModel):
    error: str


class EnforceIn(_Strict):
    reason: str | None = Field(default=None, max_length=255, description="KIP-800 reason")


class EnforceOut(BaseModel):
    accepted: bool
    generation_id: int
    coalesced: bool = Field(description="Joined a rebalance already under way")


class OffsetIn(_Strict):
    topic: str = Field(min_length=1, max_length=249)
    partition: WholeNumber = Field(ge=0, le=MAX_PARTITION)
    offset: WholeNumber = Field(ge=0, le=MAX_OFFSET)


# The bounds before the validator and on the number, not on the optional field: the
# OpenAPI then says them as minimum and maximum (they came out as "ge"/"le" otherwise,
# words no JSON Schema client reads).
_Generation = Annotated[int, Field(ge=-1, le=2**31 - 1), BeforeValidator(_whole)]


class CommitIn(_Strict):
    offsets: list[OffsetIn] = Field(
        min_length=1,
        max_length=10_000,
        description="One offset per partition (a partition named twice is refused: Kafka "
        "would keep whichever came last, maybe the lower one).",
    )
    generation_id: _Generation | None = Field(
        default=None,
        description="Fencing: refuse (409) unless the member is still in this generation "
        "(the `generation_id` of the `assigned` event or `/assignment` the app acted on).",
    )

    @field_validator("offsets")
    @classmethod
    def _one_offset_per_partition(cls, offsets: list[OffsetIn]) -> list[OffsetIn]:
        seen: set[tuple[str, int]] = set()
        for o in offsets:
            if (o.topic, o.partition) in seen:
                raise ValueError(f"{o.topic}[{o.partition}] is named twice: give one offset each")
            seen.add((o.topic, o.partition))
        return offsets


class CommitOut(BaseModel):
    committed: list[OffsetIn]


class WebhookIn(_Strict):
    url: str = Field(min_length=1, max_length=2048)
    events: list[str] | None = Field(default=None, min_length=1, max_length=10)
    mode: Literal["blocking", "async"] = "blocking"
    secret: str | None = Field(default=None, max_length=200)
    timeout_ms: WholeNumber = Field(default=10_000, ge=100, le=300_000)


class WebhookOut(BaseModel):
    id: str
    url: str
    events: list[str]
    mode: Literal["blocking", "async"]
    timeout_ms: int
    origin: Literal["api", "settings"]
    created_at: str
    cursor: int
    disabled: bool
    disabled_reason: str | None


class WebhookCreatedOut(WebhookOut):
    secret: str = Field(description="Shown once: keep it to verify signatures")


class DeliveryOut(BaseModel):
    sequence: int
    event_id: str
    outcome: str
    attempts: int
    status_code: int | None
    error: str | None
    at: str


class DrainOut(BaseModel):
    drained: bool
    assignment: AssignmentOut


class ProbeOut(BaseModel):
    ok: bool
    reason: str
