"""Offsets a subscriber hands back on ``revoked`` are committed in the demo too.

librdkafka's mock cluster answers a commit with ``REBALANCE_IN_PROGRESS`` while its classic
group is Joining, where an eager member's revoke comes (a real broker accepts it): the
demo's group is cooperative, whose revokes come once the group is Stable again."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path
from typing import Any

from sidecar.testkit.receiver import running
from tests.support.demo import running_demo

SECRET = "whsec_" + base64.b64encode(b"demo-hand-back-test-secret-32byt").decode()


def _hand_back(event: dict[str, Any]) -> tuple[int, Any, float]:
    if not event["type"].endswith("revoked"):
        return 204, None, 0.0
    offsets = [
        {"topic": p["topic"], "partition": p["partition"], "offset": 0}
        for p in event["data"]["partitions"]
    ]
    return 200, {"offsets": offsets}, 0.0


def _revoke_commits(metrics: str) -> dict[str, float]:
    found = re.findall(
        r'^rebalance_sidecar_commits_total\{outcome="(\w+)",source="revoke"\} (\S+)$', metrics, re.M
    )
    return {outcome: float(value) for outcome, value in found}


def test_offsets_handed_back_in_the_demo_are_committed(tmp_path: Path) -> None:
    with running(SECRET, _hand_back) as receiver, running_demo(tmp_path) as demo:
        registered = demo.client.post(
            "/webhooks",
            json={"url": receiver.url, "mode": "blocking", "secret": SECRET},
        )
        assert registered.status_code == 201, registered.text
        # Peers come and go every 8 s: some come for partitions this member holds.
        assert receiver.wait_for(
            lambda got: any(r.type.endswith("revoked") and r.partitions for r in got), 240
        ), "no revoke with partitions in 240 s"
        deadline = time.monotonic() + 120
        counts: dict[str, float] = {}
        while time.monotonic() < deadline:
            counts = _revoke_commits(demo.client.get("/metrics").text)
            if counts.get("committed", 0) + counts.get("failed", 0) >= 1:
                break
            time.sleep(0.5)
        told = [
            line
            for line in demo.log.read_text(errors="replace").splitlines()
            if "offsets" in line or "commit" in line
        ]
        assert counts.get("committed", 0) >= 1, (counts, told[-20:])
        assert counts.get("failed", 0) == 0, (counts, told[-20:])
        assert demo.crashes() == []
    logged = [line for line in demo.log.read_text(errors="replace").splitlines() if "{" in line]
    assert not [line for line in logged if "REBALANCE_IN_PROGRESS" in line]
