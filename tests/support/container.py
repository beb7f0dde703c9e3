"""The container checks' fixtures: podman, the image, containers and their volumes.

A real container of the real image (``scripts/image.sh build``), run by podman with the
project's containers.conf, on the host's network so that it reaches the real broker and the
tests' webhook receivers on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.kafka import unique
from tests.support.sidecars import FAST_GROUP, REPO, free_port

IMAGE = os.environ.get("IMAGE", "rebalance-sidecar:dev")
IMAGE_SH = REPO / "scripts" / "image.sh"
CONTAINERS_CONF = REPO / ".cache" / "image" / "containers.conf"
DATA_DIR = "/var/lib/rebalance-sidecar"
PODMAN = shutil.which("podman")


def podman(
    *args: str, timeout: float = 180, check: bool = True
) -> subprocess.CompletedProcess[str]:
    assert PODMAN is not None
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    done = subprocess.run(
        [PODMAN, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check:
        assert done.returncode == 0, f"podman {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done


@pytest.fixture(scope="session")
def image() -> str:
    """The image, built (cached) when missing. Skipped only without podman outside CI."""
    if PODMAN is None:
        if os.environ.get("CI"):
            pytest.fail("podman is missing in CI: scripts/image.sh installs it (apt-get)")
        pytest.skip("podman is not installed (scripts/image.sh build installs it); CI runs these")
    if (
        podman("image", "exists", IMAGE, check=False).returncode != 0
        or not CONTAINERS_CONF.exists()
    ):
        built = subprocess.run(
            [str(IMAGE_SH), "build"],
            capture_output=True,
            text=True,
            timeout=3600,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert built.returncode == 0, built.stderr[-6000:]
    return IMAGE


class Container:
    """One ``podman run -d`` of the image: read-only root, only the data volume writable."""

    def __init__(self, image: str, volume: str, env: dict[str, str]) -> None:
        self.image = image
        self.volume = volume
        self.name = unique("sidecar")
        self.api_port = free_port()
        self.admin_port = free_port()
        self.env = {
            **env,
            "SIDECAR_API_PORT": str(self.api_port),
            "SIDECAR_ADMIN_HOST": "127.0.0.1",
            "SIDECAR_ADMIN_PORT": str(self.admin_port),
        }
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.api_port}", timeout=10)
        self.started = False

    def start(self, *command: str) -> Container:
        args = ["run", "--detach", "--name", self.name, "--network", "host"]
        # --read-only-tmpfs=false: no tmpfs on /tmp, /run, /var/tmp either; only the volume.
        args += ["--read-only", "--read-only-tmpfs=false", "--volume", f"{self.volume}:{DATA_DIR}"]
        for key, value in self.env.items():
            args += ["--env", f"{key}={value}"]
        podman(*args, self.image, *command)
        self.started = True
        return self

    def exec(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *command, check=check)

    def inspect(self, template: str) -> str:
        return podman("inspect", "--format", template, self.name).stdout.strip()

    @property
    def running(self) -> bool:
        return self.inspect("{{.State.Running}}") == "true"

    def exit_code(self) -> int:
        return int(self.inspect("{{.State.ExitCode}}"))

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return (done.stdout + done.stderr)[-8000:]

    def wait_for(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if not self.running:
                raise AssertionError(f"{self.name} exited while waiting for {what}:\n{self.logs()}")
            time.sleep(0.5)
        raise AssertionError(f"{self.name}: not {what} within {timeout} s\n{self.logs()}")

    def assignment(self) -> dict[str, Any]:
        try:
            response = self.api.get("/assignment")
        except httpx.TransportError:
            return {}
        body: dict[str, Any] = response.json() if response.status_code == 200 else {}
        return body

    def wait_stable(self, partitions: int, timeout: float = 120) -> None:
        def stable() -> bool:
            found = self.assignment()
            return found.get("state") == "stable" and len(found.get("partitions", [])) == partitions

        self.wait_for(stable, timeout, f"stable with {partitions} partitions")

    def remove(self) -> None:
        self.api.close()
        if self.started:
            podman("rm", "--force", "--time", "0", self.name, check=False)


@pytest.fixture
def containers(image: str, kafka_bootstrap: str) -> Iterator[Callable[..., Container]]:
    """Containers of the image joined to ``group`` on ``topics``; every one is removed at the
    end, with its volume. ``volume``: reuse a data volume (a restart)."""
    made: list[Container] = []
    volumes: list[str] = []

    def make(
        group: str,
        topics: str,
        *,
        volume: str | None = None,
        webhooks: list[dict[str, Any]] | None = None,
        env: dict[str, str] | None = None,
    ) -> Container:
        if volume is None:
            volume = unique("sidecar-data")
            podman("volume", "create", volume)
            volumes.append(volume)
        settings = {
            **FAST_GROUP,
            "SIDECAR_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SIDECAR_GROUP_ID": group,
            "SIDECAR_TOPICS": topics,
            "SIDECAR_ASSIGNMENT_STRATEGY": "range",
            "SIDECAR_REVOKE_TIMEOUT_MS": "20000",
            "SIDECAR_SHUTDOWN_TIMEOUT_MS": "40000",
            "SIDECAR_LOG_FORMAT": "json",
        }
        if webhooks:
            settings["SIDECAR_WEBHOOKS"] = json.dumps(webhooks)
        settings.update(env or {})
        container = Container(image, volume, settings)
        made.append(container)
        return container

    yield make
    for container in made:
        if container.started:
            # Shown by pytest only when the test failed.
            print(f"---- {container.name} ----\n{container.logs()[-4000:]}")
        container.remove()
    for volume in volumes:
        podman("volume", "rm", "--force", volume, check=False)
