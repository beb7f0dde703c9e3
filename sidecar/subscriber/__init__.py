"""Subscriber kit: the application's side of rebalance-sidecar, a standard-library package.

An application next to a sidecar gets its partitions from ``assigned`` events, hands offsets
back on ``revoked`` and drops state on ``lost`` — the ``ConsumerRebalanceListener`` pattern over
HTTP. This package does the parts every such application needs:

* :class:`Subscriber` verifies the Standard Webhooks signature of each request, deduplicates on
  the event id (a redelivery gets the first answer again), calls the application's
  :class:`Listener` (``on_assigned`` / ``on_revoked`` / ``on_lost``), tracks the assignment and
  its generation, and turns ``on_revoked``'s return value into the ``{"offsets": [...]}`` answer
  the sidecar commits before the group moves on;
* :class:`SidecarClient` talks to the sidecar's API: ``GET /assignment`` and ``POST /commit``
  with generation fencing (:class:`Fenced` on ``409``: the member moved on);
* :class:`Watchdog` long-polls the sidecar: when it becomes unreachable (killed, restarting) the
  application is told its partitions are ``lost`` *before* the group's session timeout hands them
  to someone else, and it re-synchronises from ``GET /assignment`` when the sidecar is back;
* :func:`serve` runs the webhook endpoint on a ``ThreadingHTTPServer``.

``assigned`` partitions carry ``offset`` (the committed offset, ``None`` when none) and, from
sidecars that know it, ``offset_status``: ``committed``, ``none`` or ``unknown``. ``unknown``
(the sidecar could not read the offsets in time, or the kit learnt the assignment from
``GET /assignment`` rather than an event) means *do not start this partition from a default*:
read the committed offset yourself (any client with the group id can, without joining) or wait.

The package, one responsibility per module: ``events`` (the values, the :class:`Listener`
protocol, parsing), ``signatures`` (:func:`sign`, :func:`verify`), ``handler``
(:class:`Subscriber`, :func:`serve`) and ``client`` (:class:`SidecarClient`, :class:`Watchdog`).

Only the standard library, and only relative imports between its modules: copy the
``subscriber/`` directory into an application that does not want the sidecar package installed.
"""

from __future__ import annotations

from .client import CommitFailed, Fenced, SidecarClient, Watchdog
from .events import ASSIGNED as ASSIGNED
from .events import LOST as LOST
from .events import REVOKED as REVOKED
from .events import Assigned, EventInfo, Listener, Offset, Partition
from .events import OffsetStatus as OffsetStatus
from .handler import MAX_BODY_BYTES as MAX_BODY_BYTES
from .handler import Subscriber, serve
from .signatures import DEFAULT_TOLERANCE as DEFAULT_TOLERANCE
from .signatures import SECRET_PREFIX as SECRET_PREFIX
from .signatures import InvalidSignature
from .signatures import sign as sign
from .signatures import verify as verify

__all__ = [
    "Assigned",
    "CommitFailed",
    "EventInfo",
    "Fenced",
    "InvalidSignature",
    "Listener",
    "Offset",
    "Partition",
    "SidecarClient",
    "Subscriber",
    "Watchdog",
    "serve",
]
