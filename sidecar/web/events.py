"""``GET /events``: the journal's events as SSE (resumable), or as JSON history."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator
from typing import Annotated

import structlog
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

from sidecar.errors import BadRequest, ResumeAhead, TooManyStreams
from sidecar.feed import Feed, Listener
from sidecar.model import Event
from sidecar.web.assignment import MAX_SEQUENCE
from sidecar.web.runtime import Runtime, RuntimeDep, errors

log = structlog.get_logger("sidecar.api")

_DECIMAL = re.compile(r"[0-9]{1,19}")  # ASCII only: str.isdigit() also accepts "²"
_PING_SECONDS = 15
_HISTORY_BATCH = 500  # journal events read at a time for a stream's history

router = APIRouter(tags=["events"])


def sse_frame(event: Event) -> dict[str, str]:
    """The one SSE encoding of an event: ``id`` = sequence, ``event`` = its type."""
    return {"id": str(event.sequence), "event": event.type.value, "data": event.body.decode()}


def parse_last_event_id(value: str) -> int:
    text = value.strip()
    if not _DECIMAL.fullmatch(text) or int(text) > MAX_SEQUENCE:
        raise BadRequest(
            f"Last-Event-ID must be an event sequence, a decimal from 0 to {MAX_SEQUENCE}"
        )
    return int(text)


@router.get(
    "/events",
    responses={
        200: {
            "content": {"text/event-stream": {}, "application/json": {}},
            "description": "SSE stream, or JSON history with Accept: application/json",
        },
        **errors(400, 409, 503),
    },
)
async def events(
    request: Request,
    runtime: RuntimeDep,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQUENCE)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """Events as SSE (`id` = sequence; resumes from `Last-Event-ID`), or the journal's
    history as JSON with `Accept: application/json` (`?after=&limit=`).

    A `Last-Event-ID` or `after` past the newest event is `409`: the journal was replaced
    and its numbering restarted (start again without it). One older than what retention kept resumes
    at the oldest event kept: the gap shows in the `id`s. With `SIDECAR_EVENT_STREAMS_MAX`
    streams open, one more is `503` with `Retry-After`."""
    start, given = after, "after"
    if last_event_id is not None:
        start, given = parse_last_event_id(last_event_id), "Last-Event-ID"
    if start is not None:
        newest = runtime.journal.last_sequence()
        if start > newest:
            raise ResumeAhead(
                f"{given} {start} is past the newest event ({newest}): this journal was "
                f"replaced since (its numbering restarted); start again without {given}"
            )
    accept = request.headers.get("accept", "").lower()  # media types ignore case
    if "application/json" in accept and "text/event-stream" not in accept:
        history = runtime.journal.events_after(start or 0, limit)
        return JSONResponse([e.cloudevent for e in history])
    streams = runtime.settings.event_streams_max
    if len(runtime.feed) >= streams:
        raise TooManyStreams(
            f"{streams} event streams are open (SIDECAR_EVENT_STREAMS_MAX): retry when one "
            "ends, or read the history with Accept: application/json"
        )
    if start is None:
        start = runtime.journal.last_sequence()
    # Read before answering: a journal that fails now is a 503, not an empty stream.
    first = runtime.journal.events_after(start, _HISTORY_BATCH)
    # Counted from here (no await since the check above), for as long as the response runs.
    listener = runtime.feed.open()
    return _EventStream(runtime.feed, listener, _stream(runtime, start, first, listener))


class _EventStream(EventSourceResponse):
    """An event stream holding its listener from the request on: released when the
    response ends, however it ends (also when it never got to stream)."""

    def __init__(
        self, feed: Feed, listener: Listener, frames: AsyncIterator[dict[str, str]]
    ) -> None:
        super().__init__(frames, ping=_PING_SECONDS)
        self._feed = feed
        self._listener = listener

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._feed.close(self._listener)


async def _stream(
    runtime: Runtime, start: int, first: list[Event], listener: Listener
) -> AsyncIterator[dict[str, str]]:
    """The SSE frames; a journal that fails mid-stream ends it (the response has started:
    no status can say so any more), with one log line; the client resumes from its
    ``Last-Event-ID``."""
    try:
        async for frame in _frames(runtime, start, first, listener):
            yield frame
    except sqlite3.Error as exc:
        log.error("journal failed under an event stream: stream ended", error=str(exc))


async def _frames(
    runtime: Runtime, start: int, first: list[Event], listener: Listener
) -> AsyncIterator[dict[str, str]]:
    last = start
    batch = first
    while True:  # history first, from the journal (read once more while listening)
        for event in batch:
            yield sse_frame(event)
        if batch:
            last = batch[-1].sequence
        batch = runtime.journal.events_after(last, _HISTORY_BATCH)
        if not batch:
            break
    while not listener.overflowed:
        try:
            event = await asyncio.wait_for(listener.queue.get(), 5.0)
        except TimeoutError:
            if runtime.stopping:
                return
            continue
        if event.sequence <= last:
            continue
        if event.sequence > last + 1:  # a gap (events before we listened): read them
            for missed in runtime.journal.events_after(last, event.sequence - last - 1):
                yield sse_frame(missed)
        yield sse_frame(event)
        last = event.sequence
