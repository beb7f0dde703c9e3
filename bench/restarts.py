"""How long a pod restart leaves its partitions unowned, per group protocol (issue 41).

    python -m bench.restarts --bootstrap 127.0.0.1:39292 [--runs 2] [--retry 1.0]

Two "pods" (plain librdkafka consumers, each in its own process) share a topic of 6
partitions; pod b is stopped (SIGTERM: a graceful close; or kill -9) and started again at
once. Measured: from the stop until every partition is owned again (by either pod), and
until the restarted pod owns partitions again. A pod does what the sidecar does after a
fatal error (KIP-848's ``UNRELEASED_INSTANCE_ID``): a new consumer after ``--retry``
seconds. One JSON line per run; figures and their reading in docs/kip848.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

PARTITIONS = 6
CLASSIC_SESSION_MS = 10000  # the local broker's KIP-848 session, for a fair comparison


def pod(
    bootstrap: str, group: str, topic: str, name: str, protocol: str, static: bool, retry: float
) -> None:
    """One pod: prints assign/revoke/lost/fatal lines with wall-clock times."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    def out(kind: str, parts: list[int] | None = None, **extra: Any) -> None:
        line = {"t": time.time(), "pod": name, "kind": kind, "parts": sorted(parts or []), **extra}
        print(json.dumps(line), flush=True)

    while not stopping.is_set():
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
        }
        if protocol == "consumer":
            config["group.protocol"] = "consumer"
        else:
            config["partition.assignment.strategy"] = "cooperative-sticky"
            config["session.timeout.ms"] = CLASSIC_SESSION_MS
        if static:
            config["group.instance.id"] = name
        consumer = Consumer(config)
        consumer.subscribe(
            [topic],
            on_assign=lambda c, ps: out("assign", [p.partition for p in ps]),
            on_revoke=lambda c, ps: out("revoke", [p.partition for p in ps]),
            on_lost=lambda c, ps: out("lost", [p.partition for p in ps]),
        )
        fatal: KafkaError | None = None
        while not stopping.is_set() and fatal is None:
            message = consumer.poll(0.1)
            error = message.error() if message is not None else None
            if error is not None and (error.fatal() or error.code() == KafkaError._FATAL):  # noqa: SLF001
                fatal = error
        consumer.close()
        if fatal is not None:
            out("fatal", error=fatal.str())
            stopping.wait(retry)


class Run:
    def __init__(self, bootstrap: str, protocol: str, static: bool, retry: float) -> None:
        self.bootstrap, self.protocol, self.static, self.retry = bootstrap, protocol, static, retry
        self.topic = f"restarts-{uuid.uuid4().hex[:8]}"
        self.group = f"restarts-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(self.topic, PARTITIONS, 1)])[self.topic].result(30)
        self.owned: dict[int, str] = {}
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def start(self, name: str) -> subprocess.Popen[str]:
        command = [
            sys.executable,
            "-m",
            "bench.restarts",
            "--pod",
            name,
            "--bootstrap",
            self.bootstrap,
            "--group",
            self.group,
            "--topic",
            self.topic,
            "--protocol",
            self.protocol,
            "--retry",
            str(self.retry),
        ]
        if self.static:
            command.append("--static")
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        threading.Thread(target=self._read, args=(process,), daemon=True).start()
        return process

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            event = json.loads(line)
            with self.lock:
                self.log.append(event)
                if event["kind"] == "assign":
                    self.owned.update(dict.fromkeys(event["parts"], event["pod"]))
                elif event["kind"] in ("revoke", "lost"):
                    for p in event["parts"]:
                        if self.owned.get(p) == event["pod"]:
                            del self.owned[p]

    def _wait(self, check: Any, timeout: float) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                if check():
                    return True
            time.sleep(0.02)
        return False

    def measure(self, how: str) -> dict[str, Any]:
        a, b = self.start("a"), self.start("b")
        try:
            if not self._wait(
                lambda: len(self.owned) == PARTITIONS and len(set(self.owned.values())) == 2, 90
            ):
                raise RuntimeError("the two pods never shared the partitions")
            time.sleep(3)
            stopped = time.time()
            if how == "kill":
                b.kill()
                b.wait()
                with self.lock:  # the pod is gone: nobody processes its partitions
                    self.owned = {p: o for p, o in self.owned.items() if o != "b"}
            else:
                b.terminate()
                b.wait()
            b = self.start("b")
            complete = self._wait(lambda: len(self.owned) == PARTITIONS, 120)
            unowned = time.time() - stopped
            self._wait(lambda: "b" in self.owned.values(), 120)
            back = [
                e["t"]
                for e in self.log
                if e["pod"] == "b" and e["kind"] == "assign" and e["parts"] and e["t"] >= stopped
            ]
            return {
                "protocol": self.protocol,
                "membership": "static" if self.static else "dynamic",
                "restart": "SIGTERM" if how == "term" else "kill -9",
                "retry_s": self.retry,
                "unowned_s": round(unowned, 2),
                "complete": complete,
                "restarted_owns_after_s": round(min(back) - stopped, 2) if back else None,
                "fatal_retries": sum(
                    1 for e in self.log if e["kind"] == "fatal" and e["t"] >= stopped
                ),
            }
        finally:
            for process in (a, b):
                process.terminate()
            for process in (a, b):
                process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.restarts", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument(
        "--retry", type=float, default=1.0, help="seconds before a new consumer after a fatal error"
    )
    parser.add_argument("--pod", help=argparse.SUPPRESS)
    parser.add_argument("--group", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--protocol", default="classic", help=argparse.SUPPRESS)
    parser.add_argument("--static", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pod:
        pod(
            args.bootstrap, args.group, args.topic, args.pod, args.protocol, args.static, args.retry
        )
        return
    for protocol in ("classic", "consumer"):
        for static in (True, False):
            for how in ("term", "kill"):
                for _ in range(args.runs):
                    result = Run(args.bootstrap, protocol, static, args.retry).measure(how)
                    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
