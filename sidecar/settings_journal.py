"""Settings of the journal: where it lives, how much of it is kept, and the fleet topic
every event is also produced to.

A base class of ``sidecar.settings.Settings`` (same ``SIDECAR_`` prefix and rules): the
variable names and ``settings.data_dir`` are the same as if declared there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from sidecar.settings_values import MIB as _MIB
from sidecar.settings_values import TOPIC_NAME as _TOPIC_NAME


class JournalSettings(BaseModel):
    data_dir: Path = Field(
        default=Path(".rebalance-sidecar"),
        description="Directory of the journal (SQLite, WAL mode).",
    )
    events_topic: str | None = Field(
        default=None,
        description="Also produce every event to this Kafka topic (the fleet journal), keyed "
        "by group id, with an idempotent producer (a topic name, checked at start; empty: "
        "off).",
    )
    journal_retention_events: int = Field(
        default=100_000,
        ge=100,
        le=1_000_000_000,
        description="Keep at most this many delivered events (an event a webhook or the fleet "
        "topic has not taken yet is kept whatever this says).",
    )
    journal_retention_hours: float = Field(
        default=168.0,
        gt=0,
        le=87_600,
        description="Drop delivered events older than this; the fleet producer gives up an "
        "event it could not produce for this long.",
    )
    journal_max_bytes: int = Field(
        default=0,
        ge=0,
        le=2**50,
        description="Retention by size, after count and age: when the journal database "
        "uses more bytes than this (events, indexes, delivery log; not the WAL, which stays "
        "near 4 MiB), the oldest delivered events are dropped down to 80 % of it; the file "
        "then stops growing. 0: no limit; else at least 1048576 (1 MiB). Events a webhook or "
        "the fleet topic has not taken yet are kept even past it. Keep it well under the "
        "volume's size (an emptyDir over its `sizeLimit` gets the pod evicted): the Helm "
        "chart sets half of it.",
    )

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_named(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            # Path("") is the working directory: a journal where nobody looks for it.
            raise ValueError("is empty; leave it unset for the default (.rebalance-sidecar)")
        return value

    @field_validator("journal_max_bytes", mode="before")
    @classmethod
    def _journal_budget_in_bytes(cls, value: Any) -> Any:
        # "128Mi" is what a Kubernetes manifest next to it says; this one takes bytes.
        if isinstance(value, str) and not re.fullmatch(r"\s*[0-9]+\s*", value):
            raise ValueError(
                f"{value!r} is not a whole number of bytes (128Mi is 134217728; 0: no limit)"
            )
        return value

    @field_validator("journal_max_bytes")
    @classmethod
    def _journal_budget_sane(cls, value: int) -> int:
        # A budget of a few pages would cut every delivered event at every prune: the
        # history API and SSE resumption would have nothing to give. 0 means no limit.
        if 0 < value < _MIB:
            raise ValueError(
                f"{value} bytes is below 1 MiB ({_MIB}); give at least that, or 0 for no limit"
            )
        return value

    @field_validator("events_topic")
    @classmethod
    def _check_events_topic(cls, value: str | None) -> str | None:
        # The broker refuses a bad name ("Invalid topic") for every event: the producer
        # retried every 2 s, a warning each time, holding the journal for the retention.
        if value and not _TOPIC_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid topic name (letters, digits, '.', '_' and '-', "
                "at most 249)"
            )
        return value
