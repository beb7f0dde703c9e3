"""The reference app (deploy/example-app) as a process: its settings and its webhook endpoint.

What it does with the events — reading its partitions, flushing on revoke, handing back offsets
— is checked on the real broker by tests/handover (no gaps, no duplicates under churn).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sidecar.delivery import sign
from tests.support.sidecars import free_port

APP = Path(__file__).resolve().parents[2] / "deploy" / "example-app" / "app.py"
SECRET = "whsec_" + "ZXhhbXBsZS1hcHAtdGVzdC1zZWNyZXQ="


def env(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "KAFKA_"))}
    return {
        **base,
        "WEBHOOK_SECRET": SECRET,
        # Never contacted here: the app reads partitions only once it is assigned some.
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "SIDECAR_URL": f"http://127.0.0.1:{free_port()}",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "STORE_DIR": str(tmp_path / "store"),
        **extra,
    }


@pytest.fixture
def app(tmp_path: Path) -> Iterator[httpx.Client]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(APP)],
        env=env(tmp_path, port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        for _ in range(100):
            try:
                if client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield client
    finally:
        client.close()
        process.terminate()
        assert process.wait(30) == 0  # SIGTERM: a clean stop


def test_settings_are_checked(tmp_path: Path) -> None:
    missing = env(tmp_path, free_port())
    del missing["WEBHOOK_SECRET"]
    done = subprocess.run([sys.executable, str(APP)], env=missing, capture_output=True, timeout=30)
    assert done.returncode == 2
    assert b"WEBHOOK_SECRET" in done.stderr


def test_unsigned_or_forged_events_are_rejected(app: httpx.Client) -> None:
    assert app.post("/rebalance", json={"type": "x"}).status_code == 401
    body = b'{"id": "a", "type": "kafka.partitions.revoked", "data": {}}'
    now = int(time.time())
    forged = app.post(
        "/rebalance",
        content=body,
        headers={
            "webhook-id": "a",
            "webhook-timestamp": str(now),
            "webhook-signature": sign("whsec_" + "b3RoZXItc2VjcmV0", "a", now, body),
        },
    )
    assert forged.status_code == 401


def test_a_signed_revoke_of_nothing_owned_hands_back_nothing(app: httpx.Client) -> None:
    event = {
        "specversion": "1.0",
        "id": "evt-1",
        "source": "kafka://orders/worker-0",
        "type": "kafka.partitions.revoked",
        "sequence": "1",
        "data": {
            "generation_id": 3,
            "partitions": [{"topic": "orders", "partition": 0}],
            "assignment": [],
        },
    }
    body = json.dumps(event).encode()
    now = int(time.time())
    headers = {
        "webhook-id": "evt-1",
        "webhook-timestamp": str(now),
        "webhook-signature": sign(SECRET, "evt-1", now, body),
    }
    answer = app.post("/rebalance", content=body, headers=headers)
    assert answer.status_code == 200
    assert answer.json() == {"offsets": []}
