"""The status page at ``/``: plain HTML, JS and CSS shipped in the package (no CDN).

The page is a client of the public API only; these routes just hand out its files.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

# name -> media type; nothing else under static/ is served
FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}

_HEADERS = {
    # Everything the page loads comes from here; no inline script, no third party.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
    "Referrer-Policy": "no-referrer",
}


@cache
def _read(name: str) -> bytes:
    return resources.files("sidecar.web").joinpath("static", name).read_bytes()


def _serve(name: str) -> Response:
    return Response(_read(name), media_type=FILES[name], headers=_HEADERS)


def page_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def index() -> Response:
        return _serve("index.html")

    @router.get("/ui/{name}")
    async def asset(name: str) -> Response:
        if name not in FILES:
            raise HTTPException(404, f"no page asset {name!r}")
        return _serve(name)

    return router
