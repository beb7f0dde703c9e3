"""The status page and what it reads that the API did not have: ``GET /group``.

``router(runtime)`` is everything this package adds to the app; the page itself only
ever calls the public API (``/assignment``, ``/group``, ``/events``, ``/webhooks``, ...).
"""

from __future__ import annotations

from typing import Protocol

from fastapi import APIRouter

from sidecar.handoff import Handoff
from sidecar.settings import Settings
from sidecar.web.group import GroupView, group_router
from sidecar.web.page import page_router


class WebSource(Protocol):
    settings: Settings
    handoff: Handoff


def router(runtime: WebSource) -> APIRouter:
    combined = APIRouter()
    combined.include_router(group_router(runtime))
    combined.include_router(page_router())
    return combined


__all__ = ["GroupView", "router"]
