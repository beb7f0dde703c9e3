"""The fleet members of the handover run, as real processes.

A member is one consumer of the group: a reference app with its rebalance-sidecar (Python or
Go app), a Java consumer with an in-process ``ConsumerRebalanceListener`` (the gold standard),
or a Dapr app with ``daprd`` (the peer sidecar). Every member writes the same record log
(``P``/``F``/``L`` lines, see ``deploy/example-app/app.py``) that :mod:`bench.handover.analysis`
counts.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from sidecar.testkit.sidecars import free_port

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools" / "bin"
KAFKA_LIBS = REPO / ".cache" / "kafka" / "libs"
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "ListenerApp.java"
DAPR_APP = Path(__file__).resolve().parent / "dapr_app.py"
PYTHON_APP = REPO / "deploy" / "example-app" / "app.py"
GO_APP = TOOLS / "handover-go-app"

# One set of protocol bounds for every contender: 6 s session, 0.5 s heartbeats (classic).
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_MS = 500
# Under KIP-848 the broker sets them: deploy/local/server.properties.template's session.
KIP848_SESSION_TIMEOUT_MS = 10000
# The Java assignor of each librdkafka strategy name (classic protocol).
JAVA_ASSIGNORS = {
    "range": "org.apache.kafka.clients.consumer.RangeAssignor",
    "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}
COMMIT_INTERVAL_MS = 1000
FLUSH_USERS = 200


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"not {what} within {timeout} s")


class Proc:
    """One child process, its log file, and signals."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.command = command
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.stdin: IO[bytes] | None = None

    def start(self, stdin: bool = False) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                cwd=REPO,
                start_new_session=True,
            )
        self.stdin = self.process.stdin
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def terminate(self, timeout: float = 60) -> None:
        if not self.running:
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


@dataclass
class Shared:
    """What every member of one fleet shares."""

    bootstrap: str
    group: str
    topic: str
    work: Path  # this fleet's directory: record logs, stores, process logs


@dataclass
class Member:
    """One consumer of the group. Subclasses say how each churn step is done."""

    shared: Shared
    name: str
    incarnation: int = 0
    unsupported: set[str] = field(default_factory=set)  # churn steps this kind cannot do
    # The group protocol and (classic) assignment strategy of the next start: a rolling
    # migration changes the protocol and restarts the member.
    protocol: str = "classic"
    strategy: str = "range"

    @property
    def app_id(self) -> str:
        return f"{self.name}#{self.incarnation}"

    @property
    def record_log(self) -> Path:
        return self.shared.work / "records" / f"{self.app_id}.log"

    def app_env(self) -> dict[str, str]:
        self.record_log.parent.mkdir(parents=True, exist_ok=True)
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")},
            "KAFKA_BOOTSTRAP_SERVERS": self.shared.bootstrap,
            "GROUP_ID": self.shared.group,
            "TOPIC": self.shared.topic,
            "APP_ID": self.app_id,
            "RECORD_LOG": str(self.record_log),
            "STORE_DIR": str(self.shared.work / "store"),
            "FLUSH_USERS": str(FLUSH_USERS),
            "COMMIT_INTERVAL_MS": str(COMMIT_INTERVAL_MS),
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
        }

    # churn steps
    def start(self) -> None:
        raise NotImplementedError

    def leave(self) -> None:
        """Graceful: drain (revoked reaches the app), then SIGTERM."""
        raise NotImplementedError

    def enforce(self) -> None:
        raise NotImplementedError

    def kill_app(self) -> None:
        raise NotImplementedError

    def kill_sidecar(self) -> None:
        raise NotImplementedError

    def restart(self) -> None:
        self.leave()
        self.start()

    def pids(self) -> dict[str, int]:
        """Process ids by role (``app``, ``sidecar``) for the footprint."""
        raise NotImplementedError

    def stop(self) -> None:
        self.leave()


class SidecarMember(Member):
    """A reference app (Python or Go) and a rebalance-sidecar beside it."""

    def __init__(self, shared: Shared, name: str, language: str) -> None:
        super().__init__(shared, name)
        self.language = language
        self.secret = new_secret()
        self.app_port = free_port()
        self.sidecar_port = free_port()
        self.data_dir = shared.work / "sidecars" / name
        self.app: Proc | None = None
        self.sidecar: Proc | None = None
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.sidecar_port}", timeout=60)

    def _app_proc(self) -> Proc:
        env = {
            **self.app_env(),
            "WEBHOOK_SECRET": self.secret,
            "SIDECAR_URL": f"http://127.0.0.1:{self.sidecar_port}",
            "HOST": "127.0.0.1",
            "PORT": str(self.app_port),
        }
        command = [sys.executable, str(PYTHON_APP)] if self.language == "python" else [str(GO_APP)]
        return Proc(
            f"{self.name}-app", command, env, self.shared.work / "logs" / f"{self.app_id}.log"
        )

    def _sidecar_proc(self) -> Proc:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
        env.update(
            {
                "SIDECAR_BOOTSTRAP_SERVERS": self.shared.bootstrap,
                "SIDECAR_GROUP_ID": self.shared.group,
                "SIDECAR_TOPICS": self.shared.topic,
                "SIDECAR_API_PORT": str(self.sidecar_port),
                "SIDECAR_ADMIN_PORT": "-1",
                "SIDECAR_DATA_DIR": str(self.data_dir),
                "SIDECAR_REVOKE_TIMEOUT_MS": "10000",
                "SIDECAR_SHUTDOWN_TIMEOUT_MS": "30000",
                "SIDECAR_LOG_FORMAT": "json",
                "SIDECAR_KAFKA_MAX_POLL_INTERVAL_MS": "30000",
                "SIDECAR_WEBHOOKS": json.dumps(
                    [
                        {
                            "id": "app",
                            "url": f"http://127.0.0.1:{self.app_port}/rebalance",
                            "mode": "blocking",
                            "secret": self.secret,
                        }
                    ]
                ),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.protocol == "consumer":
            env["SIDECAR_GROUP_PROTOCOL"] = "consumer"
            env["SIDECAR_GROUP_SESSION_TIMEOUT_MS"] = str(KIP848_SESSION_TIMEOUT_MS)
        else:
            env["SIDECAR_ASSIGNMENT_STRATEGY"] = self.strategy
            env["SIDECAR_KAFKA_SESSION_TIMEOUT_MS"] = str(SESSION_TIMEOUT_MS)
            env["SIDECAR_KAFKA_HEARTBEAT_INTERVAL_MS"] = str(HEARTBEAT_MS)
        return Proc(
            f"{self.name}-sidecar",
            [sys.executable, "-m", "sidecar", "run"],
            env,
            self.shared.work / "logs" / f"{self.name}-sidecar.log",
        )

    def _start_app(self) -> None:
        self.app = self._app_proc().start()
        port = self.app_port
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200,
            30,
            f"{self.name} app up",
        )

    def _start_sidecar(self) -> None:
        self.sidecar = self._sidecar_proc().start()
        wait_until(
            lambda: self.client.get("/healthz", timeout=1).status_code in (200, 503),
            30,
            f"{self.name} sidecar up",
        )

    def start(self) -> None:
        self.incarnation += 1
        self._start_app()
        self._start_sidecar()

    def assignment(self) -> dict[str, Any]:
        body: dict[str, Any] = self.client.get("/assignment").json()
        return body

    def leave(self) -> None:
        if self.sidecar is not None and self.sidecar.running:
            with contextlib.suppress(httpx.HTTPError):
                self.client.post("/drain", params={"deadline": 30}, timeout=60)
        if self.app is not None:
            self.app.terminate()
        if self.sidecar is not None:
            self.sidecar.terminate()

    def enforce(self) -> None:
        self.client.post("/enforce-rebalance", json={"reason": "handover benchmark"})

    def kill_app(self) -> None:
        assert self.app is not None
        self.app.kill()
        time.sleep(1.0)  # the orchestrator notices and restarts the container
        self.incarnation += 1
        self._start_app()

    def kill_sidecar(self) -> None:
        assert self.sidecar is not None
        self.sidecar.kill()
        time.sleep(1.0)
        self._start_sidecar()

    def pids(self) -> dict[str, int]:
        found = {}
        if self.app is not None and self.app.running:
            found["app"] = self.app.pid
        if self.sidecar is not None and self.sidecar.running:
            found["sidecar"] = self.sidecar.pid
        return found

    def stop(self) -> None:
        self.leave()
        self.client.close()


def java_classes(work: Path) -> Path:
    """Compile the Java listener app against the broker's kafka-clients jar (once per run)."""
    out = work / "java-classes"
    stamp = out / "ListenerApp.class"
    if stamp.exists() and stamp.stat().st_mtime >= JAVA_SOURCE.stat().st_mtime:
        return out
    out.mkdir(parents=True, exist_ok=True)
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is required for the Java listener (JDK 17+)")
    subprocess.run(
        [javac, "-d", str(out), "-cp", f"{KAFKA_LIBS}/*", str(JAVA_SOURCE)],
        check=True,
        capture_output=True,
    )
    return out


class JavaMember(Member):
    """The gold standard: a Java consumer with an in-process ConsumerRebalanceListener."""

    def __init__(self, shared: Shared, name: str, classes: Path) -> None:
        super().__init__(shared, name, unsupported={"kill_sidecar"})
        self.classes = classes
        self.proc: Proc | None = None

    def start(self) -> None:
        self.incarnation += 1
        env = {
            **self.app_env(),
            "SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
            "HEARTBEAT_MS": str(HEARTBEAT_MS),
            "GROUP_PROTOCOL": self.protocol,
            "ASSIGNOR": JAVA_ASSIGNORS[self.strategy],
        }
        command = [
            "java",
            "-Xms32m",
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{self.classes}:{KAFKA_LIBS}/*",
            "ListenerApp",
        ]
        self.proc = Proc(self.name, command, env, self.shared.work / "logs" / f"{self.app_id}.log")
        self.proc.start(stdin=True)
        ready = self.record_log.with_suffix(".ready")
        wait_until(ready.exists, 60, f"{self.name} (java) started")

    def leave(self) -> None:
        if self.proc is not None:
            self.proc.terminate()

    def enforce(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(b"enforce\n")
        self.proc.stdin.flush()

    def kill_app(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        time.sleep(1.0)
        self.start()

    def kill_sidecar(self) -> None:
        return None  # there is none

    def pids(self) -> dict[str, int]:
        return {"app": self.proc.pid} if self.proc is not None and self.proc.running else {}


COMPONENT = """\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: kafka
spec:
  type: pubsub.kafka
  version: v1
  metadata:
  - name: brokers
    value: "{bootstrap}"
  - name: consumerGroup
    value: "{group}"
  - name: authType
    value: "none"
  - name: initialOffset
    value: "oldest"
  - name: sessionTimeout
    value: "{session}ms"
  - name: heartbeatInterval
    value: "{heartbeat}ms"
  - name: disableTls
    value: "true"
"""


class DaprMember(Member):
    """The peer sidecar: daprd (pubsub.kafka) pushing records to an app over HTTP."""

    def __init__(self, shared: Shared, name: str) -> None:
        super().__init__(shared, name, unsupported={"enforce"})
        self.app_port = free_port()
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        self.components = shared.work / "dapr-components"
        self.app: Proc | None = None
        self.daprd: Proc | None = None

    def _write_component(self) -> None:
        self.components.mkdir(parents=True, exist_ok=True)
        (self.components / "kafka.yaml").write_text(
            COMPONENT.format(
                bootstrap=self.shared.bootstrap,
                group=self.shared.group,
                session=SESSION_TIMEOUT_MS,
                heartbeat=HEARTBEAT_MS,
            )
        )

    def _start_app(self) -> None:
        env = {**self.app_env(), "PORT": str(self.app_port)}
        self.app = Proc(
            f"{self.name}-app",
            [sys.executable, str(DAPR_APP)],
            env,
            self.shared.work / "logs" / f"{self.app_id}.log",
        ).start()
        port = self.app_port
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200,
            30,
            f"{self.name} dapr app up",
        )

    def _start_daprd(self) -> None:
        self._write_component()
        command = [
            str(TOOLS / "daprd"),
            "--app-id",
            f"{self.shared.group}-{self.name}",
            "--app-port",
            str(self.app_port),
            "--app-protocol",
            "http",
            "--dapr-http-port",
            str(self.http_port),
            "--dapr-grpc-port",
            str(self.grpc_port),
            "--metrics-port",
            str(self.metrics_port),
            "--dapr-internal-grpc-port",
            str(free_port()),
            "--resources-path",
            str(self.components),
            "--log-level",
            "warn",
            "--mode",
            "standalone",
            "--placement-host-address",
            "",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
        self.daprd = Proc(
            f"{self.name}-daprd", command, env, self.shared.work / "logs" / f"{self.name}-daprd.log"
        ).start()
        port = self.http_port
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port}/v1.0/healthz", timeout=1).status_code < 300,
            60,
            f"{self.name} daprd up",
        )

    def start(self) -> None:
        self.incarnation += 1
        self._start_app()
        self._start_daprd()

    def leave(self) -> None:
        # Nothing tells the app: daprd leaves the group, then the app stops (and flushes).
        if self.daprd is not None:
            self.daprd.terminate()
        if self.app is not None:
            self.app.terminate()

    def enforce(self) -> None:
        return None  # Dapr has no way to ask for a rebalance

    def kill_app(self) -> None:
        assert self.app is not None
        self.app.kill()
        time.sleep(1.0)
        self.incarnation += 1
        self._start_app()

    def kill_sidecar(self) -> None:
        assert self.daprd is not None
        self.daprd.kill()
        time.sleep(1.0)
        self._start_daprd()

    def pids(self) -> dict[str, int]:
        found = {}
        if self.app is not None and self.app.running:
            found["app"] = self.app.pid
        if self.daprd is not None and self.daprd.running:
            found["sidecar"] = self.daprd.pid
        return found
