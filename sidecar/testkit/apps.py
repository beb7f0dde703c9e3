"""An application (a real receiver) with a sidecar that delivers to it."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sidecar.subscriber.signatures import SECRET_PREFIX
from sidecar.testkit.receiver import Receiver, Responder, accept, running
from sidecar.testkit.sidecars import Sidecar


def new_secret() -> str:
    """A Standard Webhooks secret, as the sidecar makes one (``whsec_`` + 32 random bytes)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


@contextmanager
def app_with_sidecar(
    sidecar_factory: Callable[..., Sidecar],
    group: str,
    topic: str,
    responder: Responder = accept,
    mode: str = "blocking",
    **options: Any,
) -> Iterator[tuple[Receiver, Sidecar]]:
    """Yield a running receiver and a stable sidecar with it as its one webhook.

    The sidecar stops first, while its subscriber still answers, as an application's
    sidecar does: stopped after it, the sidecar's last revoke waited out its whole revoke
    timeout on a subscriber that was gone (about 10 s of every such test's teardown)."""
    secret = new_secret()
    with running(secret, responder) as app:
        webhooks = [{"url": app.url, "secret": secret, "mode": mode}]
        sidecar = sidecar_factory(group, topic, webhooks=webhooks, **options)
        try:
            sidecar.wait_stable()
            yield app, sidecar
        finally:
            sidecar.stop()
