"""A real TCP fault injector: a Toxiproxy server process driven over its HTTP API.

Kafka clients connect to the address a broker *advertises*, not to the one they
bootstrapped from, so a proxy in front of an ordinary broker only carries the first
metadata request. ``ProxiedBroker`` runs a private broker with a second listener,
``PROXIED``, whose advertised address is the proxy's: a client bootstrapped through the
proxy keeps talking through it (to the coordinator too), while other clients use the
plain listener directly. Cutting or slowing the proxy then cuts or slows one member's
link and nobody else's.

The broker is ``deploy/local/kafka.sh`` itself, run from a copy whose config template
has the extra listener (the jars are shared); ``scripts/toxiproxy.sh`` installs the
server binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.sidecars import REPO, free_port

SERVER = REPO / ".tools" / "bin" / "server"
INSTALL = REPO / "scripts" / "toxiproxy.sh"
TEMPLATE = REPO / "deploy" / "local" / "server.properties.template"


class Proxy:
    def __init__(self, api: httpx.Client, name: str, listen_port: int) -> None:
        self._api = api
        self.name = name
        self.port = listen_port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Close every connection and refuse new ones (a network partition)."""
        self._set(enabled=False)

    def restore(self) -> None:
        self._set(enabled=True)

    def slow(self, latency_ms: int, name: str = "slow") -> None:
        """Delay everything the broker sends back by ``latency_ms``."""
        response = self._api.post(
            f"/proxies/{self.name}/toxics",
            json={
                "name": name,
                "type": "latency",
                "stream": "downstream",
                "attributes": {"latency": latency_ms, "jitter": 0},
            },
        )
        response.raise_for_status()

    def heal(self, name: str = "slow") -> None:
        self._api.delete(f"/proxies/{self.name}/toxics/{name}").raise_for_status()

    def _set(self, **fields: Any) -> None:
        self._api.post(f"/proxies/{self.name}", json=fields).raise_for_status()


class Toxiproxy:
    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)

    def start(self) -> Toxiproxy:
        if not SERVER.exists():
            subprocess.run([str(INSTALL)], check=True, capture_output=True, timeout=600)
        with self._log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [str(SERVER), "-host", "127.0.0.1", "-port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if self.api.get("/version").status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError("toxiproxy did not answer within 30 s")

    def proxy(self, name: str, upstream: str, listen_port: int | None = None) -> Proxy:
        port = listen_port or free_port()
        response = self.api.post(
            "/proxies",
            json={"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream},
        )
        response.raise_for_status()
        return Proxy(self.api, name, port)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(10)
        self.api.close()


def with_listeners(template: str, listeners: dict[str, tuple[int, str]]) -> str:
    """``deploy/local``'s broker config with extra plaintext listeners: name -> (the port
    the broker binds, the address it advertises, i.e. a proxy's in front of that port)."""
    binds = "".join(f"{name}://127.0.0.1:{port}," for name, (port, _) in listeners.items())
    adverts = "".join(f",{name}://{address}" for name, (_, address) in listeners.items())
    protocols = "".join(f"{name}:PLAINTEXT," for name in listeners)
    patched = (
        template.replace(
            "listeners=PLAINTEXT://127.0.0.1:@PORT@,",
            f"listeners=PLAINTEXT://127.0.0.1:@PORT@,{binds}",
        )
        .replace(
            "advertised.listeners=PLAINTEXT://127.0.0.1:@PORT@",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:@PORT@{adverts}",
        )
        .replace(
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,",
            f"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,{protocols}",
        )
    )
    for name in listeners:
        assert patched.count(f"{name}:") >= 2 and f"{name}://" in patched, "template changed"
    return patched


def copy_deploy(target: Path, template: str) -> Path:
    """A copy of ``deploy/local`` (script, pom, logging) with ``template`` as its broker
    config; the jars stay shared (``KAFKA_HOME``)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("kafka.sh", "pom.xml", "log4j2.properties"):
        shutil.copy2(TEMPLATE.parent / name, target / name)
    (target / "server.properties.template").write_text(template)
    return target


class ProxiedBroker:
    """A private single-node broker; ``proxied`` is its address through Toxiproxy."""

    def __init__(self, workdir: Path, toxiproxy: Toxiproxy) -> None:
        port, proxied_port = free_port(), free_port()
        self.proxy = toxiproxy.proxy(f"kafka-{port}", f"127.0.0.1:{proxied_port}")
        template = with_listeners(
            TEMPLATE.read_text(), {"PROXIED": (proxied_port, self.proxy.address)}
        )
        self._deploy = copy_deploy(workdir / "deploy" / "local", template)
        self.env = {
            **os.environ,
            "KAFKA_PORT": str(port),
            "KAFKA_CONTROLLER_PORT": str(free_port()),
            "KAFKA_DATA_DIR": str(workdir / "data"),
            "KAFKA_HOME": str(REPO / ".cache" / "kafka"),
        }
        self.direct = f"127.0.0.1:{port}"
        self.proxied = self.proxy.address

    def run(self, command: str) -> None:
        done = subprocess.run(
            [str(self._deploy / "kafka.sh"), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr[-3000:]


@contextmanager
def proxied_broker(workdir: Path) -> Iterator[ProxiedBroker]:
    toxiproxy = Toxiproxy(workdir / "toxiproxy.log").start()
    try:
        broker = ProxiedBroker(workdir, toxiproxy)
        try:
            broker.run("start")
            yield broker
        finally:
            broker.run("stop")
    finally:
        toxiproxy.stop()
