"""Request bodies are bounded: over the limit (declared or streamed) is a 413 JSON error."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(send, self.limit)
            return
        seen = 0
        exceeded = False  # the streamed body went over the limit
        started = False  # a response went out (the app's, or our 413)
        replaced = False  # the app's response is being dropped for our 413

        async def limited() -> Message:
            nonlocal seen, exceeded
            if exceeded:  # asked again (say, waiting for a disconnect): it is over
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    exceeded = True
                    raise _TooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            # The app may catch _TooLarge as a body it could not read (FastAPI answers
            # 400 "There was an error parsing the body"): whatever it answers once the
            # body went over the limit, the caller gets the 413.
            nonlocal started, replaced
            if replaced:
                return
            if message["type"] == "http.response.start":
                if exceeded and not started:
                    started = replaced = True
                    await _too_large(send, self.limit)
                    return
                started = True
            await send(message)

        try:
            await self.app(scope, limited, tracking_send)
        except _TooLarge:
            if not started:
                await _too_large(send, self.limit)


class _TooLarge(Exception):
    pass


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"error": f"request body larger than {limit} bytes"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
