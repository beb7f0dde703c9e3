"""An application (a real receiver) with a sidecar that delivers to it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sidecar.subscriptions import new_secret
from sidecar.testkit.receiver import Receiver, Responder, accept, running
from sidecar.testkit.sidecars import Sidecar


@contextmanager
def app_with_sidecar(
    sidecar_factory: Callable[..., Sidecar],
    group: str,
    topic: str,
    responder: Responder = accept,
    mode: str = "blocking",
    **options: Any,
) -> Iterator[tuple[Receiver, Sidecar]]:
    """Yield a running receiver and a stable sidecar with it as its one webhook."""
    secret = new_secret()
    with running(secret, responder) as app:
        webhooks = [{"url": app.url, "secret": secret, "mode": mode}]
        sidecar = sidecar_factory(group, topic, webhooks=webhooks, **options)
        sidecar.wait_stable()
        yield app, sidecar
