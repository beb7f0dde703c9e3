"""The Dapr contender's application: the same tally per user, fed by daprd (pubsub.kafka).

daprd holds the consumer group and POSTs each record to ``/records``; it commits a record's
offset once the app answered 2xx. Dapr never tells the app about rebalances, so the app can
flush its tallies only when they grow, on its periodic flush, and when it stops: a partition
that moved keeps its old owner's unflushed state until then (the split-state window), and a
killed app loses effects whose offsets daprd already committed (gaps).

Same record log as the reference apps. Settings (environment): ``PORT``, ``TOPIC``, ``APP_ID``,
``RECORD_LOG``, ``STORE_DIR``, ``FLUSH_USERS``, ``COMMIT_INTERVAL_MS``.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any


def now_us() -> int:
    return time.time_ns() // 1000


class Tallies:
    def __init__(self, app_id: str, record_log: str, store_dir: Path, flush_users: int) -> None:
        self.app_id = app_id
        self.lock = threading.Lock()
        self.records = open(record_log, "a", encoding="utf-8")  # noqa: SIM115
        store_dir.mkdir(parents=True, exist_ok=True)
        self.store = (store_dir / f"tallies-{app_id}.jsonl").open("a", encoding="utf-8")
        self.flush_users = flush_users
        self.tallies: dict[tuple[str, int], dict[str, int]] = {}
        self.positions: dict[tuple[str, int], int] = {}

    def process(self, topic: str, partition: int, offset: int, user: str, amount: int) -> None:
        with self.lock:
            key = (topic, partition)
            tallies = self.tallies.setdefault(key, {})
            tallies[user] = tallies.get(user, 0) + amount
            self.positions[key] = max(self.positions.get(key, 0), offset + 1)
            self.records.write(f"P\t{topic}\t{partition}\t{offset}\t{self.app_id}\t{now_us()}\n")
            self.records.flush()
            if len(tallies) >= self.flush_users:
                self._flush(key, "size")

    def _flush(self, key: tuple[str, int], reason: str) -> None:
        tallies = self.tallies.pop(key, {})
        position = self.positions[key]
        self.store.write(json.dumps({"partition": key[1], "position": position, "n": len(tallies)}))
        self.store.write("\n")
        self.store.flush()
        self.records.write(
            f"F\t{key[0]}\t{key[1]}\t{self.app_id}\t{now_us()}\t{reason}\t{position}\n"
        )
        self.records.flush()

    def flush_all(self, reason: str) -> None:
        with self.lock:
            for key in list(self.tallies):
                self._flush(key, reason)


def main() -> int:
    env = os.environ
    topic = env["TOPIC"]
    tallies = Tallies(
        env.get("APP_ID", "dapr-app"),
        env["RECORD_LOG"],
        Path(env.get("STORE_DIR", "/tmp/dapr-app")),
        int(env.get("FLUSH_USERS", "1000")),
    )
    interval = int(env.get("COMMIT_INTERVAL_MS", "2000")) / 1000
    stop = threading.Event()

    def periodic() -> None:
        while not stop.wait(interval):
            tallies.flush_all("commit")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/dapr/subscribe":
                # rawPayload: the records are plain Kafka values, not CloudEvents.
                subscription = {
                    "pubsubname": "kafka",
                    "topic": topic,
                    "route": "/records",
                    "metadata": {"rawPayload": "true"},
                }
                self._reply(200, [subscription])
            elif self.path == "/healthz":
                self._reply(200, {"status": "ok"})
            else:
                self._reply(404, {})

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                event = json.loads(body)
                partition = int(headers["__partition"])
                offset = int(headers["__offset"])
                user = headers.get("__key", "")
                raw = event.get("data_base64")
                data = base64.b64decode(raw).decode() if raw is not None else event.get("data")
                amount = int(data) if isinstance(data, int | str) else 1
            except (KeyError, ValueError) as exc:
                print(f"cannot read the record: {exc}; headers {headers}", flush=True)
                self._reply(500, {"status": "RETRY"})
                return
            tallies.process(topic, partition, offset, user, amount)
            self._reply(200, {"status": "SUCCESS"})

    server = ThreadingHTTPServer(("127.0.0.1", int(env.get("PORT", "3000"))), Handler)
    server.daemon_threads = True

    def on_term(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    threading.Thread(target=periodic, daemon=True).start()
    server.serve_forever()
    stop.set()
    tallies.flush_all("shutdown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
