"""A real Spark standalone cluster on 127.0.0.1: one master, two workers.

Started from the installed pyspark (``spark-class ...deploy.master.Master`` and
``...deploy.worker.Worker``), each in its own process group so that stopping it also
stops what it launched (a worker forks one executor JVM per application, and the
executor its Python workers). Ports are chosen free by the OS; the web UIs get free
ports too (the master's cannot be switched off, and its JSON page is how we know both
workers registered).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from sidecar.testkit.sidecars import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
LOOPBACK = "127.0.0.1"
WORKER_CORES = 1
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"  # must fit in WORKER_MEMORY, or the application gets no executor


def cluster_env(work: Path) -> dict[str, str]:
    """Environment for the daemons and spark-submit: loopback only, this interpreter."""
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOCAL_HOSTNAME": "localhost",
            "SPARK_LOG_DIR": str(work / "logs"),
            "SPARK_WORKER_DIR": str(work / "worker"),
            "SPARK_DAEMON_MEMORY": "256m",
            # Python workers (if any) must use this interpreter and find `sidecar`.
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    return env


@dataclass
class SparkCluster:
    work: Path
    master_port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def env(self) -> Mapping[str, str]:
        return cluster_env(self.work)

    def _daemon(self, name: str, *args: str) -> None:
        log = (self.work / f"{name}.log").open("wb")
        self.processes.append(
            subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                env=dict(self.env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killpg takes its children
            )
        )
        log.close()

    def start(self, workers: int = 2, timeout: float = 120.0) -> SparkCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self._daemon(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            LOOPBACK,
            "--port",
            str(self.master_port),
            "--webui-port",
            str(self.master_ui_port),
        )
        for index in range(workers):
            self._daemon(
                f"worker-{index}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                LOOPBACK,
                "--port",
                str(free_port()),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(WORKER_CORES),
                "--memory",
                WORKER_MEMORY,
                "--work-dir",
                str(self.work / f"worker-{index}"),
                self.url,
            )
        self._wait_for_workers(workers, timeout)
        return self

    def alive_workers(self) -> int:
        url = f"http://{LOOPBACK}:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            state = json.load(response)
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _wait_for_workers(self, workers: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited early:\n{self.logs()}")
            try:
                if self.alive_workers() >= workers:
                    return
            except OSError:
                pass  # the master's UI is not up yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"{workers} workers did not register:\n{self.logs()}")
            time.sleep(0.5)

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(
            f"---- {p.name}\n{p.read_text(errors='replace')[-tail:]}"
            for p in sorted(self.work.glob("*.log"))
        )

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every daemon's process group, then SIGKILL what is left. Idempotent."""
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
            # Executors and Python workers live in the same group; take them too.
            _signal_group(process, signal.SIGKILL)
            process.wait()
        self.processes.clear()


def _signal_group(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
