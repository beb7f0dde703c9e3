"""The demo (librdkafka's mock cluster, no Kafka): ``/group`` falls back to the demo's roster
of simulated peers, and the status page and its assets are served from the package."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.demo import running_demo


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[httpx.Client]:
    with running_demo(tmp_path) as process:
        yield process.client


def test_group_in_the_demo_is_the_roster_of_simulated_peers(demo: httpx.Client) -> None:
    group: dict[str, Any] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            response = demo.get("/group")
        except httpx.TransportError:
            time.sleep(0.5)
            continue
        assert response.status_code == 200, response.text
        group = response.json()
        owners = {p["owner"] for p in group["partitions"]}
        peers = [m for m in group["members"] if m["client_id"].startswith("peer-")]
        if peers and None not in owners and any(m["assignment"] for m in peers):
            break
        time.sleep(0.5)
    assert group["source"] == "demo"
    assert group["group_id"] == "demo-group"
    members = {m["member_id"]: m for m in group["members"]}
    assert [m["client_id"] for m in members.values() if m["this_member"]] == ["rebalance-sidecar"]
    assert any(m["client_id"].startswith("peer-") and m["assignment"] for m in members.values())
    assert {p["topic"] for p in group["partitions"]} == {"orders", "payments"}
    for p in group["partitions"]:  # every partition's owner lists it
        owned = members[p["owner"]]["assignment"]
        assert {"topic": p["topic"], "partition": p["partition"]} in owned


def test_the_page_and_its_assets_are_served(demo: httpx.Client) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            page = demo.get("/")
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the demo never answered"
            time.sleep(0.5)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script src="/ui/app.js"' in page.text
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from elsewhere
    script = demo.get("/ui/app.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "EventSource" in script.text
    assert demo.get("/ui/style.css").headers["content-type"].startswith("text/css")
    missing = demo.get("/ui/secrets.txt")
    assert missing.status_code == 404
    assert "no page asset" in missing.json()["error"]
    assert demo.get("/ui/..%2Fgroup.py").status_code == 404
    spec = demo.get("/openapi.json").json()
    assert "/" not in spec["paths"]  # the page is not part of the API
