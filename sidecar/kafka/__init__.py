"""Everything that leans on confluent-kafka's and librdkafka's behaviour beyond their
documented Python API, in one place, so a dependency upgrade re-checks one package:

* ``wakeup``: ``rd_kafka_queue_yield()`` reached through ``ctypes`` (the only module that
  imports it), on the pointer read out of confluent-kafka's ``Handle``;
* ``group_calls``: the member thread's ``Consumer`` calls, and the member id and generation
  parsed out of librdkafka's serialized group metadata;
* ``enforce``: the rejoin recipes behind ``/enforce-rebalance``, per protocol;
* ``properties``: ``SIDECAR_KAFKA_<NAME>`` ↔ librdkafka property names.

``tests/unit/test_library_contracts.py`` pins what they rely on to ``constraints.txt``.
"""
