"""Where webhooks may go: redirects are not followed, the host allowlist holds."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sidecar.subscriptions import new_secret
from tests.support.receiver import running
from tests.support.security import Run
from tests.support.sidecars import Sidecar, wait_until

ALL_TYPES = [
    "kafka.partitions.assigned",
    "kafka.partitions.revoked",
    "kafka.partitions.lost",
    "kafka.rebalance.requested",
]
REDIRECTS = (301, 302, 303, 307, 308)


class Redirector:
    """Answers every POST with a redirect to ``location``; counts what it was sent."""

    def __init__(self, status: int, location: str) -> None:
        self.status = status
        self.attempts = 0
        redirector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                redirector.attempts += 1
                self.send_response(redirector.status)
                self.send_header("Location", location)
                self.send_header("content-length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.mark.kafka
def test_webhook_redirects_are_not_followed(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    secret = new_secret()
    with running(secret) as elsewhere:
        redirectors = {status: Redirector(status, elsewhere.url) for status in REDIRECTS}
        try:
            sidecar = sidecar_factory(
                group_id,
                topic_factory(2),
                webhooks=[
                    {
                        "url": r.url,
                        "secret": secret,
                        "mode": "async",
                        "events": ALL_TYPES,
                        "id": f"redirect-{status}",
                    }
                    for status, r in redirectors.items()
                ],
                extra_env={
                    "SIDECAR_WEBHOOK_MAX_ATTEMPTS": "3",
                    "SIDECAR_WEBHOOK_BACKOFF_INITIAL_MS": "50",
                    "SIDECAR_WEBHOOK_BACKOFF_MAX_MS": "200",
                },
            )
            sidecar.wait_stable()

            def given_up(status: int) -> bool:
                log = sidecar.client.get(f"/webhooks/redirect-{status}/deliveries").json()
                return any(d["outcome"] == "gave_up" for d in log)

            wait_until(lambda: all(given_up(s) for s in REDIRECTS), 60, "every delivery given up")
            for status, redirector in redirectors.items():
                log = sidecar.client.get(f"/webhooks/redirect-{status}/deliveries").json()
                failed = [d for d in log if d["outcome"] == "failed"]
                assert len(failed) >= 3
                assert {d["status_code"] for d in failed} == {status}
                assert redirector.attempts >= 3
        finally:
            for redirector in redirectors.values():
                redirector.stop()
        assert elsewhere.attempts == 0  # nobody followed a Location header


# -- the host allowlist -------------------------------------------------------------------


@pytest.fixture(scope="module")
def allowlisted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """A sidecar whose webhooks may only target 127.0.0.1 and hooks.internal.

    Registration needs no group, so no broker: the bootstrap address is never reached.
    """
    sidecar = Sidecar(
        "127.0.0.1:9",
        "allowlist",
        "allowlist",
        tmp_path_factory.mktemp("allowlist"),
        token="t",
        name="allowlist",
        extra_env={"SIDECAR_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1, hooks.internal"},
    ).start()
    yield sidecar
    sidecar.stop()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://localhost:9/x", "SIDECAR_WEBHOOK_ALLOWED_HOSTS"),
        ("http://evil.example/x", "SIDECAR_WEBHOOK_ALLOWED_HOSTS"),
        ("http://127.0.0.1.evil.example/x", "SIDECAR_WEBHOOK_ALLOWED_HOSTS"),
        ("http://hooks.internal.evil.example/x", "SIDECAR_WEBHOOK_ALLOWED_HOSTS"),
        ("http://[::ffff:127.0.0.1]:9/x", "SIDECAR_WEBHOOK_ALLOWED_HOSTS"),
        ("http://2130706433/x", "SIDECAR_WEBHOOK_ALLOWED_HOSTS"),
        ("http://127.1:9/x", "SIDECAR_WEBHOOK_ALLOWED_HOSTS"),
        ("http://127.0.0.1@evil.example/x", "credentials"),
        ("http://evil.example\\@127.0.0.1/x", "credentials"),
        ("http://evil.example#@127.0.0.1/x", "fragment"),
        ("http://127.0.0.1:9/x#frag", "fragment"),
        ("file:///etc/passwd", "scheme"),
        ("gopher://127.0.0.1:9/x", "scheme"),
    ],
)
def test_the_allowlist_refuses_other_hosts_at_registration(
    url: str, problem: str, allowlisted: Sidecar
) -> None:
    response = allowlisted.client.post(
        "/webhooks", headers=allowlisted.headers(), json={"url": url, "mode": "async"}
    )
    assert response.status_code == 422, response.text
    assert problem in response.json()["error"]
    assert url not in {w["url"] for w in allowlisted.client.get("/webhooks").json()}


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9/x", "https://hooks.internal/x", "HTTP://HOOKS.Internal:8443/x?a=b"],
)
def test_the_allowlist_admits_its_hosts(url: str, allowlisted: Sidecar) -> None:
    response = allowlisted.client.post(
        "/webhooks", headers=allowlisted.headers(), json={"url": url, "mode": "async"}
    )
    assert response.status_code == 201, response.text
    deleted = allowlisted.client.delete(
        f"/webhooks/{response.json()['id']}", headers=allowlisted.headers()
    )
    assert deleted.status_code == 204


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/\tx", "http://127.0.0.1:9/x\r\nX: y"])
def test_urls_the_http_client_cannot_send_to_are_refused(url: str, allowlisted: Sidecar) -> None:
    response = allowlisted.client.post(
        "/webhooks", headers=allowlisted.headers(), json={"url": url, "mode": "async"}
    )
    if response.status_code == 201:  # keep the module's sidecar clean for the other tests
        allowlisted.client.delete(
            f"/webhooks/{response.json()['id']}", headers=allowlisted.headers()
        )
    assert response.status_code == 422, response.text


def declared(url: str, secret: str | None = None) -> dict[str, str]:
    return {
        "SIDECAR_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
        "SIDECAR_WEBHOOKS": json.dumps([{"url": url, "secret": secret or new_secret()}]),
    }


def test_a_declared_webhook_inside_the_allowlist_starts(tmp_path: Path) -> None:
    """The control for the test below: the same settings with an allowed host start."""
    sidecar = Sidecar(
        "127.0.0.1:9",
        "allowlist",
        "allowlist",
        tmp_path,
        name="declared",
        extra_env=declared("http://127.0.0.1:9/x"),
    ).start()
    try:
        listed = sidecar.client.get("/webhooks").json()
        assert [(w["url"], w["origin"]) for w in listed] == [("http://127.0.0.1:9/x", "settings")]
    finally:
        sidecar.stop()


@pytest.mark.parametrize(
    ("hook", "problem"),
    [
        (declared("http://evil.example/x"), "SIDECAR_WEBHOOK_ALLOWED_HOSTS"),
        (declared("ftp://127.0.0.1/x"), "scheme"),
        (declared("http://127.0.0.1:9/x", secret="whsec_short"), "secret"),
    ],
    ids=["outside-allowlist", "bad-scheme", "bad-secret"],
)
def test_a_bad_declared_webhook_is_a_clean_settings_error(
    hook: dict[str, str], problem: str, run_command: Run
) -> None:
    done = run_command(hook)
    assert "Traceback" not in done.stderr, done.stderr[-1500:]
    assert done.returncode == 2
    assert "SIDECAR_WEBHOOKS" in done.stderr and problem in done.stderr
