"""A broker outage: the sidecar stays up and ready, the assignment returns.

This test stops and starts a broker, so it runs its own (not the session's shared one).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kafka import create_topic, unique
from tests.support.private_broker import PrivateBroker
from tests.support.sidecars import Sidecar, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    data_dir = tmp_path_factory.mktemp("broker")
    broker = PrivateBroker(data_dir)
    broker.run("start")
    try:
        yield broker
    finally:
        broker.run("stop")
        shutil.rmtree(data_dir, ignore_errors=True)


def back_in_the_group(sidecar: Sidecar) -> bool:
    now = sidecar.assignment()
    return bool(now["connected"] and now["state"] == "stable")


def test_broker_stopped_and_started_again(private_broker: PrivateBroker, tmp_path: Path) -> None:
    topic = create_topic(private_broker.bootstrap, 4)
    sidecar = Sidecar(private_broker.bootstrap, unique("group"), topic, tmp_path / "s").start()
    try:
        sidecar.wait_stable()
        owned = sidecar.partitions()
        assert owned == {(topic, p) for p in range(4)}
        assert sidecar.client.get("/readyz").status_code == 200

        private_broker.run("stop")
        wait_until(lambda: not sidecar.assignment()["connected"], 60, "the outage seen")
        # Ready all along: the pod must stay in its Service; /assignment shows the outage.
        assert sidecar.admin.get("/readyz").status_code == 200
        assert sidecar.admin.get("/livez").status_code == 200  # alive: no restart wanted
        assert sidecar.running

        private_broker.run("start")
        wait_until(lambda: back_in_the_group(sidecar), 90, "back in the group")
        assert sidecar.admin.get("/readyz").status_code == 200
        assert sidecar.partitions() == owned
        assert sidecar.running
    finally:
        sidecar.stop()
        print(sidecar.logs())
