"""The image, run by a container engine against the real broker (issue 37).

PID 1 is dumb-init with the sidecar as its only child (docs/container.md says why), as a
non-root user, on a read-only root filesystem with only the data volume writable. A stop
from the engine drains: the subscriber gets ``revoked``, the member leaves the group at once
(seen by Kafka's own ``kafka-consumer-groups --describe``), the exit code is 0. A ``kill -9``
loses nothing journaled: a new container on the same volume delivers it.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.container import DATA_DIR, Container, podman
from tests.support.kafka import create_topic, unique
from tests.support.receiver import Receiver, running
from tests.support.sidecars import REPO, wait_until

pytestmark = pytest.mark.kafka

SECRET = "whsec_" + "Y29udGFpbmVyLWNoZWNrcy13ZWJob29rLXNlY3JldC0zMmI="
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
LIBS = REPO / ".cache" / "kafka" / "libs"
JAVA = ["java", "-Xmx160m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{LIBS}/*"]

Factory = Callable[..., Container]

# Every process in the container: pid, parent, real uid, command line.
PROCESSES = """
import json, os
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        status = open(f"/proc/{pid}/status").read().splitlines()
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    found.append({
        "pid": int(pid),
        "ppid": int(fields["PPid"]),
        "uid": int(fields["Uid"].split()[0]),
        "args": [a.decode() for a in cmdline if a],
    })
print(json.dumps(found))
"""


def members(bootstrap: str, group: str) -> str:
    """``kafka-consumer-groups --describe --members`` (the broker's own tool), its output."""
    done = subprocess.run(
        [
            *JAVA,
            "-Dlog4j2.level=ERROR",
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--members",
            "--group",
            group,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def member_rows(output: str) -> list[str]:
    lines = [line for line in output.splitlines() if line.strip()]
    at = next((i for i, line in enumerate(lines) if line.startswith("GROUP ")), None)
    return [] if at is None else lines[at + 1 :]


def test_runs_as_non_root_child_of_dumb_init_on_a_read_only_root(
    containers: Factory, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_bootstrap, 3)
    container = containers(unique("group"), topic).start()
    container.wait_stable(3)

    processes = json.loads(container.exec("python", "-c", PROCESSES).stdout)
    init = next(p for p in processes if p["pid"] == 1)
    assert init["args"][:2] == ["dumb-init", "--"], init
    sidecars = [p for p in processes if p["args"][1:] == ["/opt/venv/bin/rebalance-sidecar", "run"]]
    assert len(sidecars) == 1, processes
    assert sidecars[0]["ppid"] == 1
    assert {p["uid"] for p in processes} == {10001}, processes
    assert container.exec("id", "-u").stdout.strip() == "10001"

    assert container.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true"
    for path in ("/probe", "/tmp/probe", "/opt/venv/probe", "/run/probe"):
        refused = container.exec("touch", path, check=False)
        assert refused.returncode != 0, path
        assert "Read-only file system" in refused.stderr, refused.stderr
    assert container.exec("touch", f"{DATA_DIR}/probe").returncode == 0
    assert container.exec("ls", DATA_DIR).stdout.split() != ["probe"]  # the journal is there

    version = container.exec("rebalance-sidecar", "--version").stdout.strip()
    assert version == f"rebalance-sidecar {VERSION}"

    # The image's own HEALTHCHECK (its command, as the engine runs it).
    wait_until(
        lambda: podman("healthcheck", "run", container.name, check=False).returncode == 0,
        120,
        "healthy",
    )
    assert json.loads(podman("image", "inspect", container.image).stdout)[0]["Healthcheck"]


def test_stop_drains_leaves_the_group_and_exits_zero(
    containers: Factory, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_bootstrap, 3)
    group = unique("group")
    with running(SECRET) as receiver:
        webhook = {"url": receiver.url, "secret": SECRET, "mode": "blocking"}
        # A session far longer than the wait below: only a LeaveGroup empties the group.
        container = containers(
            group,
            topic,
            webhooks=[webhook],
            env={
                "SIDECAR_KAFKA_SESSION_TIMEOUT_MS": "240000",
                "SIDECAR_KAFKA_HEARTBEAT_INTERVAL_MS": "1000",
                "SIDECAR_KAFKA_MAX_POLL_INTERVAL_MS": "240000",
            },
        ).start()
        container.wait_stable(3)
        assert receiver.wait_for(
            lambda got: any(r.type == "kafka.partitions.assigned" for r in got), 60
        )
        assert len(member_rows(members(kafka_bootstrap, group))) == 1

        stopped = podman("stop", "--time", "90", container.name, timeout=180)
        assert stopped.returncode == 0
        assert container.exit_code() == 0, container.logs()
        revoked = receiver.events("kafka.partitions.revoked")
        assert revoked, [r.type for r in receiver.events()]
        assert revoked[-1].partitions == {(topic, p) for p in range(3)}

    # Gone from the group now, not after the 240 s session timeout.
    assert member_rows(members(kafka_bootstrap, group)) == []


def test_sigterm_before_the_handler_is_not_lost(containers: Factory, kafka_bootstrap: str) -> None:
    """A SIGTERM that comes while Python starts: 143 (or 0, had the handler come first),
    never a wait for the engine's SIGKILL (137). A Python PID 1 lost it."""
    topic = create_topic(kafka_bootstrap, 1)
    container = containers(unique("group"), topic).start()
    # SIGTERM now, SIGKILL (137) if it is still running 60 s later.
    podman("stop", "--time", "60", container.name, timeout=180)
    assert container.exit_code() in (0, 143), container.logs()


def test_kill_9_then_a_restart_on_the_volume_delivers_what_was_journaled(
    containers: Factory, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_bootstrap, 2)
    group = unique("group")
    refusing = threading.Event()
    refusing.set()
    refused: list[str] = []

    def respond(event: dict[str, Any]) -> tuple[int, Any, float]:
        if refusing.is_set():
            refused.append(str(event["id"]))
            return 503, None, 0.0
        return 204, None, 0.0

    receiver: Receiver
    with running(SECRET, respond) as receiver:
        webhook = {"url": receiver.url, "secret": SECRET, "mode": "async"}
        first = containers(group, topic, webhooks=[webhook]).start()
        first.wait_stable(2)
        wait_until(lambda: bool(refused), 60, "a delivery attempt")
        journaled = refused[0]

        podman("kill", "--signal", "KILL", first.name)
        podman("wait", first.name, timeout=120)
        assert first.exit_code() == 137

        refusing.clear()
        second = containers(group, topic, volume=first.volume, webhooks=[webhook]).start()
        deadline = time.monotonic() + 120
        while journaled not in {str(r.event["id"]) for r in receiver.events()}:
            assert time.monotonic() < deadline, (journaled, second.logs())
            assert second.running, second.logs()
            time.sleep(0.5)
        second.wait_stable(2)
