"""``HEAD`` wherever ``GET`` is safe: the ``GET`` response's status and headers, no body.

RFC 9110 (9.1, 9.3.2) asks every general-purpose server to support ``HEAD`` where it
supports ``GET``; FastAPI's routes answer it 405, so ``curl -I`` and uptime checkers
failed. A ``HEAD`` is served as the ``GET`` of its path, but for the paths whose ``GET``
acts (the admin listener's ``GET /drain`` is the kubelet's ``preStop`` hook): there
``HEAD`` is left to the router (405), and never drains. The response ends with its
head: an event stream or a long poll is not waited for (uvicorn sends no body bytes for
a ``HEAD``; here the application is stopped once its status and headers are out).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    def __init__(self, app: ASGIApp, acting_gets: Iterable[str]) -> None:
        self.app = app
        self.acting_gets = frozenset(acting_gets)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        if scope["path"] in self.acting_gets:
            await self.app(scope, receive, send)  # 405
            return
        as_get = {**scope, "method": "GET"}  # a copy: uvicorn still sees the HEAD

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
