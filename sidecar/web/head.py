"""``HEAD`` wherever a route takes ``GET`` and nothing else: the ``GET`` response's status
and headers, no body.

RFC 9110 (9.1, 9.3.2) asks every general-purpose server to support ``HEAD`` where it
supports ``GET``; FastAPI's routes answer it 405, so ``curl -I`` and uptime checkers
failed. A ``HEAD`` is served as the ``GET`` of a route that takes only ``GET`` (listed as
the app includes its routers: ``sidecar.api``). A route that also takes ``POST`` may act
on a ``GET`` (the admin listener's ``GET /drain`` is the kubelet's ``preStop`` hook): its
``HEAD`` stays 405 and never drains, and so will any such route added later. Starlette's
own routes (``/docs``, ``/openapi.json``) answer ``HEAD`` themselves. The response ends
with its head: an event stream is not waited for (uvicorn sends no body bytes for a
``HEAD``; here the application is stopped once its status and headers are out); a long
poll is, as its headers come with its answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes  # the routes that take GET and nothing else

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        as_get = {**scope, "method": "GET"}  # a copy: uvicorn still sees the HEAD
        if not any(route.matches(as_get)[0] is Match.FULL for route in self.routes):
            await self.app(scope, receive, send)  # 405, or a route's own HEAD
            return

        async def head_only(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.start":
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                raise _HeadSent

        try:
            await self.app(as_get, receive, head_only)
        except _HeadSent:
            pass
        except BaseExceptionGroup as group:  # raised in a task group (an event stream's)
            rest = group.subgroup(lambda e: not isinstance(e, _HeadSent | BaseExceptionGroup))
            if rest is not None:
                raise rest from None


class _HeadSent(Exception):
    """The head is out: the rest of the ``GET`` is not wanted."""
