"""The HTTP side: one router per area, assembled into two apps by ``sidecar.api``.

* ``assignment`` — ``GET /assignment`` (long-poll);
* ``control`` — ``POST /enforce-rebalance``, ``POST /commit``, ``POST /drain`` (bearer);
* ``webhooks`` — the webhook registry and its delivery logs;
* ``events`` — ``GET /events``: SSE, or JSON history from the journal;
* ``group`` — ``GET /group``: the whole group as the coordinator describes it (an
  ``AdminClient``, never the member's ``Consumer``), cached briefly;
* ``page`` — the status page at ``/`` (static files; it calls only the public API);
* ``probes`` — ``/livez`` (``/healthz``), ``/startupz``, ``/readyz``, ``/metrics``;
* ``admin`` — the admin listener's ``/drain`` for the kubelet's ``preStop`` hook.

Handlers run on the asyncio loop; they read the published snapshot and never touch the
``Consumer`` (what needs it is a command submitted through the handoff). They raise the
domain errors of ``sidecar.errors``; ``sidecar.api`` maps them to statuses in one place.
"""
