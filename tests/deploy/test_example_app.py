"""The example subscriber (deploy/example-app) over real HTTP, with signed events."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

APP = Path(__file__).resolve().parents[2] / "deploy" / "example-app" / "app.py"
SECRET = "whsec_" + "ZXhhbXBsZS1hcHAtdGVzdC1zZWNyZXQ="


def load_app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_app", APP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


example_app = load_app()


class App:
    def __init__(self, state_dir: Path) -> None:
        store = example_app.PartitionStore(state_dir)
        self.server = example_app.make_server("127.0.0.1", 0, example_app.Subscriber(store, SECRET))
        port = self.server.server_address[1]
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def deliver(
        self, kind: str, partitions: list[dict[str, Any]], event_id: str | None = None
    ) -> httpx.Response:
        """POST a CloudEvent signed the way the sidecar signs it (Standard Webhooks)."""
        event_id = event_id or str(uuid.uuid4())
        event = {
            "specversion": "1.0",
            "id": event_id,
            "source": "kafka://orders/orders-worker-0",
            "type": f"kafka.partitions.{kind}",
            "time": datetime.now(UTC).isoformat(),
            "sequence": "1",
            "data": {
                "group_id": "orders",
                "member_id": "m-1",
                "group_instance_id": None,
                "generation_id": 3,
                "protocol": "eager",
                "partitions": partitions,
                "assignment": [],
                "reason": "test",
            },
        }
        body = json.dumps(event)
        now = datetime.now(UTC)
        headers = {
            "content-type": "application/cloudevents+json",
            "webhook-id": event_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(SECRET).sign(event_id, now, body),
        }
        return self.client.post("/rebalance", content=body, headers=headers)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    running = App(tmp_path / "state")
    running.thread.start()
    yield running
    running.client.close()
    running.server.shutdown()
    running.server.server_close()


def test_unsigned_or_forged_events_are_rejected(app: App) -> None:
    assert app.client.post("/rebalance", json={"type": "x"}).status_code == 401
    forged = app.client.post(
        "/rebalance",
        content=b"{}",
        headers={
            "webhook-id": "a",
            "webhook-timestamp": str(int(datetime.now(UTC).timestamp())),
            "webhook-signature": "v1,Zm9yZ2Vk",
        },
    )
    assert forged.status_code == 401


def test_revoke_flushes_state_and_hands_back_offsets(app: App, tmp_path: Path) -> None:
    assigned = app.deliver(
        "assigned",
        [{"topic": "orders", "partition": 0, "offset": 40}, {"topic": "orders", "partition": 1}],
    )
    assert assigned.status_code == 200
    assert app.client.post("/processed", json={"topic": "orders", "partition": 0, "offset": 41})
    revoked = app.deliver(
        "revoked", [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 1}]
    )
    assert revoked.status_code == 200
    # Partition 1 had no committed offset and nothing processed: nothing to commit.
    assert revoked.json() == {"offsets": [{"topic": "orders", "partition": 0, "offset": 42}]}
    saved = json.loads((tmp_path / "state" / "orders-0.json").read_text())
    assert saved["position"] == 42
    assert app.client.get("/state").json() == {"partitions": []}
    late = app.client.post("/processed", json={"topic": "orders", "partition": 0, "offset": 42})
    assert late.status_code == 409  # no longer ours


def test_assign_loads_saved_state_and_seeks_to_the_committed_offset(app: App) -> None:
    app.deliver("assigned", [{"topic": "orders", "partition": 2, "offset": 5}])
    app.client.post("/processed", json={"topic": "orders", "partition": 2, "offset": 5})
    app.deliver("revoked", [{"topic": "orders", "partition": 2}])
    # Back again: the state file is loaded, the committed offset wins over our position.
    app.deliver("assigned", [{"topic": "orders", "partition": 2, "offset": 6}])
    state = app.client.get("/state").json()["partitions"]
    assert state == [{"topic": "orders", "partition": 2, "position": 6, "records": 1}]


def test_lost_partitions_are_dropped_without_offsets(app: App) -> None:
    app.deliver("assigned", [{"topic": "orders", "partition": 3, "offset": 9}])
    lost = app.deliver("lost", [{"topic": "orders", "partition": 3}])
    assert lost.json() == {}
    assert app.client.get("/state").json() == {"partitions": []}


def test_a_redelivered_revoke_gets_the_same_answer(app: App) -> None:
    app.deliver("assigned", [{"topic": "orders", "partition": 4, "offset": 100}])
    first = app.deliver("revoked", [{"topic": "orders", "partition": 4}], event_id="evt-7")
    again = app.deliver("revoked", [{"topic": "orders", "partition": 4}], event_id="evt-7")
    assert (
        first.json()
        == again.json()
        == {"offsets": [{"topic": "orders", "partition": 4, "offset": 100}]}
    )
