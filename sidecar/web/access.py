"""Who may do what: the bearer token, the drain token, and cross-site browser requests.

* Mutating endpoints of the control API need ``Authorization: Bearer <SIDECAR_API_TOKEN>``
  when a token is configured.
* Without a token (loopback only, enforced at start-up), a cross-site request from a
  browser on the same machine could still reach them: a page can POST a form to
  ``http://127.0.0.1:8080/commit`` without any preflight. So token-less mutations refuse
  what only browsers send — ``Sec-Fetch-Site`` other than ``same-origin``/``none``, an
  ``Origin`` that is not this host, and the CORS "simple" content types (form encodings,
  ``text/plain``). Clients that are not browsers (curl, SDKs) send none of these; JSON
  bodies go with ``Content-Type: application/json``, which a cross-site page cannot send
  without a preflight the sidecar never grants. And the ``Host`` must name loopback
  (``127.0.0.1``, ``[::1]``, ``localhost``): a page whose own name was rebound to 127.0.0.1
  (DNS rebinding) is same-origin to itself, but its requests carry its own name as ``Host``.
* The admin listener's drain needs ``X-Drain-Token: <SIDECAR_DRAIN_TOKEN>``; without a
  configured drain token only loopback peers may drain, and the same browser rules apply.
"""

from __future__ import annotations

import secrets
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from sidecar.errors import Forbidden, Unauthorized
from sidecar.loopback import is_loopback
from sidecar.web.runtime import RuntimeDep

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="`SIDECAR_API_TOKEN`, required by POST and DELETE when configured.",
)
drain_key = APIKeyHeader(
    name="X-Drain-Token",
    auto_error=False,
    scheme_name="drainToken",
    description="`SIDECAR_DRAIN_TOKEN`; without one configured, only loopback may drain.",
)

_SIMPLE_CONTENT_TYPES = frozenset(
    {"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"}
)


def _matches(given: str, expected: str) -> bool:
    return secrets.compare_digest(given.encode(), expected.encode())


def names_loopback(host_header: str | None) -> bool:
    """Is this ``Host`` header loopback: ``127.0.0.1:8080``, ``[::1]``, ``localhost``?"""
    if not host_header:
        return False
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return is_loopback(host)


def refuse_cross_site(request: Request) -> None:
    """Raise ``Forbidden`` for what only a browser sends on someone else's behalf."""
    host = request.headers.get("host")
    if not names_loopback(host):
        raise Forbidden(
            f"Host {host!r} refused: without a token only loopback names are served "
            "(a rebound DNS name could otherwise reach the sidecar from a web page)"
        )
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        raise Forbidden(f"cross-site browser request refused (Sec-Fetch-Site: {site})")
    origin = request.headers.get("origin")
    if origin is not None:
        try:
            origin_host = urlsplit(origin).netloc.lower()
        except ValueError:  # "http://[" and the like
            raise Forbidden("cross-site browser request refused (malformed Origin)") from None
        if origin_host != (host or "").lower():
            raise Forbidden("cross-site browser request refused (Origin is not this sidecar)")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in _SIMPLE_CONTENT_TYPES:
        raise Forbidden(
            f"Content-Type {content_type} refused: send JSON with "
            "Content-Type: application/json (form posts could come from any web page)"
        )


async def may_mutate(
    request: Request,
    runtime: RuntimeDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    token = runtime.settings.api_token
    if token is None:
        refuse_cross_site(request)
        return
    if credentials is None or not _matches(credentials.credentials, token.get_secret_value()):
        raise Unauthorized("missing or wrong bearer token (Authorization: Bearer <token>)")


async def may_drain(
    request: Request,
    runtime: RuntimeDep,
    given: Annotated[str | None, Depends(drain_key)],
) -> None:
    token = runtime.settings.drain_token
    if token is not None:
        if given is None or not _matches(given, token.get_secret_value()):
            raise Unauthorized("missing or wrong X-Drain-Token", challenge="X-Drain-Token")
        return
    peer = request.client.host if request.client else None
    if not is_loopback(peer):
        raise Forbidden(
            f"no SIDECAR_DRAIN_TOKEN configured: only loopback callers may drain (not {peer})"
        )
    refuse_cross_site(request)


MayMutate = [Depends(may_mutate)]
MayDrain = [Depends(may_drain)]
