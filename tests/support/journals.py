"""Journal records the journal tests share."""

from __future__ import annotations

import time

from sidecar.model import EventType, Subscription


def subscription(sub_id: str, cursor: int) -> Subscription:
    return Subscription(
        id=sub_id,
        url="http://127.0.0.1/x",
        events=(EventType.ASSIGNED,),
        mode="blocking",
        secret="whsec_x",
        timeout_ms=1000,
        origin="api",
        created_at=time.time(),
        cursor=cursor,
    )
