"""A fast webhook receiver in its own process, so it neither shares a GIL nor bottlenecks.

Raw asyncio HTTP/1.1 with keep-alive (uvloop when installed). Each POST is stamped with
``time.time()`` as soon as its body has been read, answered ``204`` at once, then parsed
and its Standard Webhooks signature verified (after the answer: the receiver's own work
is not what we measure). ``GET /records`` hands over and clears what arrived since the
last call. ``GET /assigned?prefix=P&after=G&count=N`` answers once N of the paths that start
with P received an ``assigned`` event of a generation above G (or after 60 s, ``408``): the
harness waits for a rebalance there, where its receipt is stamped, instead of polling the
sidecar it measures. Start it with ``python -m bench.receiver --secret whsec_...``: it prints its
port on the first line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from bench.common import REPO

_NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"
_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class Record:
    path: str
    id: str
    at: float
    type: str
    generation: int
    assignment: int  # partitions in data.assignment
    event_time: float = 0.0  # the event's own ``time`` (stamped in the sidecar's callback)


class _Server:
    def __init__(self, secret: str | None) -> None:
        self.records: list[dict[str, Any]] = []
        self.verified = 0
        self.rejected = 0
        self._webhook: Any = None
        # The newest generation each path received an ``assigned`` of, and who waits.
        self._assigned: dict[str, int] = {}
        self._waiters: list[tuple[str, int, int, asyncio.Future[None]]] = []
        if secret:
            from standardwebhooks import Webhook

            self._webhook = Webhook(secret)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                at = time.time()
                if method == "GET" and path.startswith("/records"):
                    self._answer_records(writer)
                    continue
                if method == "GET" and path.startswith("/assigned"):
                    await self._answer_assigned(writer, path)
                    continue
                writer.write(_NO_CONTENT)
                self._record(path, headers, body, at)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    def _record(self, path: str, headers: dict[str, str], body: bytes, at: float) -> None:
        event: dict[str, Any] = {}
        try:
            event = json.loads(body)
            data = event.get("data") or {}
            generation = int(data.get("generation_id", -1))
            assignment = len(data.get("assignment") or ())
            event_time = datetime.fromisoformat(str(event.get("time"))).timestamp()
        except (ValueError, TypeError, AttributeError):
            generation, assignment, event_time = -1, 0, 0.0
        if self._webhook is not None:
            try:
                self._webhook.verify(body, headers)
                self.verified += 1
            except Exception:
                self.rejected += 1
        if str(event.get("type", "")).endswith(".assigned"):
            self._assigned[path] = max(generation, self._assigned.get(path, -1))
            self._wake_waiters()
        self.records.append(
            {
                "path": path,
                "id": headers.get("webhook-id", ""),
                "at": at,
                "type": str(event.get("type", "")),
                "generation": generation,
                "assignment": assignment,
                "event_time": event_time,
            }
        )

    def _reached(self, prefix: str, after: int, count: int) -> bool:
        found = sum(1 for p, g in self._assigned.items() if p.startswith(prefix) and g > after)
        return found >= count

    def _wake_waiters(self) -> None:
        for waiter in list(self._waiters):
            prefix, after, count, future = waiter
            if self._reached(prefix, after, count):
                self._waiters.remove(waiter)
                if not future.done():
                    future.set_result(None)

    async def _answer_assigned(self, writer: asyncio.StreamWriter, path: str) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        prefix = query["prefix"][0]
        after, count = int(query["after"][0]), int(query["count"][0])
        status = b"204 No Content"
        if not self._reached(prefix, after, count):
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            waiter = (prefix, after, count, future)
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(future, _WAIT_SECONDS)
            except TimeoutError:
                status = b"408 Request Timeout"
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\n\r\n")

    def _answer_records(self, writer: asyncio.StreamWriter) -> None:
        payload = json.dumps(
            {"records": self.records, "verified": self.verified, "rejected": self.rejected}
        ).encode()
        self.records = []
        self.verified = self.rejected = 0
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(payload)).encode()
            + b"\r\n\r\n"
            + payload
        )


async def _main(secret: str | None) -> None:
    server = _Server(secret)
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0, backlog=512)
    port = listener.sockets[0].getsockname()[1]
    print(port, flush=True)
    async with listener:
        await listener.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark webhook receiver")
    parser.add_argument("--secret", default=None, help="verify signatures with this secret")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.run(_main(args.secret))
    except ImportError:
        asyncio.run(_main(args.secret))


class ReceiverProcess:
    """The harness's handle on a receiver process."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.receiver", "--secret", secret],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.isdigit():
            self.process.kill()
            raise RuntimeError(f"receiver did not start: {line!r}")
        self.port = int(line)
        self.verified = 0
        self.rejected = 0
        self._client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/hook/{name}"

    def wait_assigned(self, prefix: str, after: int, count: int) -> None:
        """Until ``count`` paths under ``/hook/<prefix>`` received an ``assigned`` of a
        generation above ``after``; raises after a minute."""
        answer = self._client.get(
            "/assigned",
            params={"prefix": f"/hook/{prefix}", "after": after, "count": count},
            timeout=_WAIT_SECONDS + 10,
        )
        if answer.status_code != 204:
            raise RuntimeError(f"no assigned of a generation above {after} under {prefix}")

    def take(self) -> list[Record]:
        """What arrived since the last call."""
        found = self._client.get("/records").json()
        self.verified += int(found["verified"])
        self.rejected += int(found["rejected"])
        return [Record(**r) for r in found["records"]]

    def stop(self) -> None:
        self._client.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


if __name__ == "__main__":
    main()
