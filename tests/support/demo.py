"""``rebalance-sidecar demo`` as a real process for HTTP tests: librdkafka's mock cluster,
no Kafka, a real sidecar answering real HTTP, its log kept to look for crashes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.support.sidecars import REPO, free_port

CRASHED = ("Traceback", "Exception in ASGI application")
DEMO = [sys.executable, "-m", "sidecar", "demo"]

# The demo takes no settings from the environment (its own are fixed); a test that needs
# other values runs the same demo with them put into its settings.
_DEMO_WITH = """
import json, sys
from pathlib import Path
from sidecar import cli, logs
from sidecar.demo import demo_cluster
port, data_dir, changes = int(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
logs.configure("info", "auto")
with demo_cluster(port=port, peers=2, data_dir=data_dir) as settings:
    sys.exit(cli.run_sidecar(settings.model_copy(update=changes)))
"""


class Demo:
    def __init__(self, client: httpx.Client, log: Path, process: subprocess.Popen[bytes]) -> None:
        self.client = client
        self.log = log
        self.process = process
        self.since = 0

    @property
    def port(self) -> int:
        port: int = self.client.base_url.port  # type: ignore[assignment]
        return port

    def crashes(self) -> list[str]:
        """Lines of the log since the test began that tell of a crash."""
        with self.log.open("rb") as log:
            log.seek(self.since)
            lines = log.read().decode(errors="replace").splitlines()
        return [line for line in lines if any(c in line for c in CRASHED)]


@contextlib.contextmanager
def running_demo(data_dir: Path, **settings: int | str) -> Iterator[Demo]:
    """``rebalance-sidecar demo`` in ``data_dir`` (none of this environment's ``SIDECAR_``
    variables), with these of its settings changed, stopped at the end."""
    log_path = data_dir / "demo.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    command = [*DEMO, "--port", str(port), "--data-dir", str(data_dir)]
    if settings:
        command = [sys.executable, "-c", _DEMO_WITH, str(port), str(data_dir), json.dumps(settings)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        wait_for_the_group(client, process)
        yield Demo(client, log_path, process)
    finally:
        client.close()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def wait_for_the_group(client: httpx.Client, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the demo exited {process.returncode}"
        try:
            if client.get("/assignment").json()["state"] == "stable":
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError("the demo's sidecar never joined its group")
