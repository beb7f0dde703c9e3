"""Take docs/img/status-page.png: the demo's status page in headless Chromium.

    python scripts/status-page-screenshot.py [--out docs/img/status-page.png]

Starts ``rebalance-sidecar demo`` on a free port, registers two webhooks (one that
answers 204, one that answers 500), waits a few rebalances for a moment when the
simulated peers hold partitions, and screenshots the page.
Needs Debian's chromium (scripts/chromium.sh).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from sidecar.testkit.sidecars import free_port

REPO = Path(__file__).resolve().parents[1]
DEMO = [sys.executable, "-m", "sidecar", "demo", "--peers", "2"]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def receiver(status: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


SETTLED_ON_THE_PAGE = """() =>
    document.querySelector("#member-state").dataset.state === "stable"
    && document.querySelectorAll("#members tbody tr").length >= 3
    && document.querySelectorAll(".cell").length > 0
    && document.querySelectorAll(".cell.unowned").length === 0
    && document.querySelectorAll("#timeline li.event").length >= 8"""


def settled(base: str) -> bool:
    group = httpx.get(f"{base}/group", timeout=5).json()
    me = httpx.get(f"{base}/assignment", timeout=5).json()
    owners = {p["owner"] for p in group.get("partitions", [])}
    # A few rebalances in, so the timeline and the webhooks have something to show.
    return (
        me["state"] == "stable"
        and me["generation_id"] >= 5
        and None not in owners
        and len(owners) >= 3
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "status-page.png")
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as data:
        demo = subprocess.Popen(
            [*DEMO, "--port", str(port), "--data-dir", data],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        good, bad = receiver(204), receiver(500)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{base}/assignment", timeout=2)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            for server, mode in ((good, "blocking"), (bad, "async")):
                url = f"http://127.0.0.1:{server.server_address[1]}/rebalance"
                httpx.post(f"{base}/webhooks", json={"url": url, "mode": mode}, timeout=5)
            deadline = time.monotonic() + 180
            while not settled(base):
                if time.monotonic() > deadline:
                    raise SystemExit("the demo's group never settled with three members")
                time.sleep(0.5)
            with (
                tempfile.TemporaryDirectory() as profile,
                sync_playwright() as p,
            ):
                context = p.chromium.launch_persistent_context(
                    profile,
                    executable_path="/usr/bin/chromium",
                    args=FLAGS,
                    headless=True,
                    viewport={"width": 1280, "height": 900},
                )
                page = context.new_page()
                page.goto(f"{base}/")
                page.wait_for_selector("#webhooks tr[data-health='failing']", timeout=60_000)
                page.wait_for_function(SETTLED_ON_THE_PAGE, timeout=180_000, polling=100)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out), full_page=True)
                context.close()
        finally:
            demo.send_signal(signal.SIGINT)
            demo.wait(60)
            good.shutdown()
            bad.shutdown()
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
