"""rebalance-sidecar: Kafka consumer-group rebalances for any application.

The architecture, one module per responsibility:

* ``settings``  the frozen settings, built once from the environment and a file
* ``model``     value types: partitions, the assignment snapshot, events, subscriptions
* ``member``    the consumer thread: owns the ``Consumer``, runs the rebalance callbacks
* ``commands``  what the HTTP side may ask of the member (enforce, commit, leave)
* ``link``      what librdkafka's error and statistics callbacks say about the connection
* ``handoff``   the only place the consumer thread and the asyncio loop meet
* ``journal``   the SQLite journal: events, subscriptions, delivery state
* ``delivery``  webhook dispatch: signing, ordering, retries, the revoke barrier
* ``subscriptions`` the webhook registry
* ``feed``      live fan-out to SSE clients
* ``fleet``     events to a Kafka topic for fleet analytics
* ``errors``    every domain error, and the one mapping of them to HTTP statuses
* ``api``       the two HTTP apps (control API, admin listener); routers in ``web/``
* ``schemas``   its request and response bodies
* ``probes``    the lifecycle state and the liveness/startup/readiness probes
* ``components`` builds the wired parts (the daemon's, the tests', the benchmarks')
* ``metrics``   Prometheus collectors
* ``logs``      structlog set-up
* ``daemon``    lifecycle: start, ready, drain, stop
* ``demo``      the embedded mock-cluster demo
* ``cli``       the commands
"""

__version__ = "0.1.0"
