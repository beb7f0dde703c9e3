"""Baselines for ``GET /assignment``: the same JSON body from minimal apps on the same server.

Served exactly as the daemon serves its API (uvicorn ``Server.serve`` on a bound socket,
inside ``asyncio.run``, so the stdlib loop; h11; no access log, lifespan off), one worker:

* ``fastapi``: a one-route FastAPI app returning the body's dict (what any FastAPI
  service pays: routing, serialisation);
* ``asgi``: a raw ASGI callable sending the pre-encoded bytes (the server's ceiling).

``python -m bench.baseline_app --kind fastapi --body FILE`` prints its port.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import uvicorn

from bench.common import REPO


def _fastapi(document: dict[str, Any]) -> Any:
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/assignment")
    async def assignment() -> dict[str, Any]:
        return document

    return app


def _asgi(body: bytes) -> Any:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="GET /assignment baseline apps")
    parser.add_argument("--kind", choices=["fastapi", "asgi"], required=True)
    parser.add_argument("--body", type=Path, required=True, help="JSON document to serve")
    args = parser.parse_args()
    body = args.body.read_bytes()
    app = _fastapi(json.loads(body)) if args.kind == "fastapi" else _asgi(body)
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP
    # (base_events._set_nodelay); with proto 0 every response split into two writes waits
    # for the client's delayed ACK (~40 ms).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(
        uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", http="h11")
    )
    asyncio.run(server.serve(sockets=[sock]))


class BaselineProcess:
    def __init__(self, kind: str, body: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.baseline_app", "--kind", kind, "--body", str(body)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.isdigit():
            self.process.kill()
            raise RuntimeError(f"baseline app did not start: {line!r}")
        self.port = int(line)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


if __name__ == "__main__":
    main()
