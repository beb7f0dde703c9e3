"""Shared fixtures: the real local broker (started once per session) and sidecar factories."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import KAFKA_SH, create_topic, unique
from tests.support.sidecars import Sidecar


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A real Apache Kafka 4.x broker on 127.0.0.1 (or ``KAFKA_BOOTSTRAP_SERVERS``)."""
    given = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if given:
        yield given
        return
    was_running = subprocess.run([str(KAFKA_SH), "status"], capture_output=True).returncode == 0
    started = subprocess.run(  # empty unless running: topics are never deleted
        [str(KAFKA_SH), "fresh"],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if started.returncode != 0:
        pytest.fail(f"kafka.sh start failed:\n{started.stderr[-4000:]}")
    yield started.stdout.strip().splitlines()[-1]
    if not was_running and not os.environ.get("KEEP_KAFKA"):
        subprocess.run([str(KAFKA_SH), "stop"], capture_output=True, timeout=120)


@pytest.fixture
def topic_factory(kafka_bootstrap: str) -> Callable[[int], str]:
    def make(partitions: int) -> str:
        return create_topic(kafka_bootstrap, partitions)

    return make


@pytest.fixture
def sidecar_factory(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., Sidecar]]:
    """Start sidecars as subprocesses; every one is stopped at the end of the test."""
    started: list[Sidecar] = []
    count = 0

    def make(group: str, topics: str, **options: Any) -> Sidecar:
        nonlocal count
        count += 1
        name = options.pop("name", f"sidecar-{count}")
        data_dir = options.pop("data_dir", tmp_path / name)
        sidecar = Sidecar(kafka_bootstrap, group, topics, data_dir, name=name, **options)
        started.append(sidecar)
        return sidecar.start()

    yield make
    for sidecar in started:
        sidecar.stop()
        # Shown by pytest only when the test failed.
        print(f"---- {sidecar.name} (port {sidecar.port}) ----\n{sidecar.logs()[-4000:]}")


@pytest.fixture
def group_id() -> str:
    return unique("group")
