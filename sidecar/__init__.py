"""rebalance-sidecar: Kafka consumer-group rebalances for any application.

The architecture, one module per responsibility (docs/architecture.md has the map):

* settings: ``settings``, ``settings_sources``, ``settings_table``, ``kafka_properties``,
  ``effective_settings``
* the member thread (the only caller of the ``Consumer``): ``member``, ``listener``,
  ``membership`` (no Kafka), ``group_calls``, ``link``, ``commands``
* the boundary between that thread and the asyncio loop: ``handoff``
* values and durability: ``model``, ``journal``
* webhooks: ``delivery``, ``courier``, ``barrier``, ``retry``, ``subscriptions``
* other outputs: ``feed`` (SSE), ``fleet`` (a Kafka topic)
* HTTP: ``api``, ``web/``, ``schemas``, ``errors``, ``probes``
* the process: ``components`` (the builder), ``daemon``, ``metrics``, ``logs``, ``demo``,
  ``demo_checks``, ``cli``, ``preflight``, ``datadir``, ``output_files``
* for users and tests: ``subscriber`` (the subscriber kit), ``testkit/``
* ``analytics/``: the PySpark job
"""

__version__ = "0.1.0"
