"""Benchmarks: what the sidecar costs, measured against a baseline in the same run.

``python -m bench`` runs every section against a real broker and writes
``docs/benchmarks.md``. One module per part:

* ``cli``            the command: options, the broker, running sections, printing, writing
* ``common``         sizes, statistics, the result model, the machine description
* ``report``         the Markdown document
* ``receiver``       a fast webhook receiver (its own process) that stamps each receipt
* ``loads``          HTTP load: ``wrk`` when installed, else a raw-asyncio generator process
* ``baseline_app``   minimal uvicorn apps serving the same ``/assignment`` body (HTTP baseline)
* ``bare``           a bare confluent-kafka member (the rebalance and start-up baseline)
* ``processes``      sidecar processes: timed start, RSS and CPU sampling
* ``latency``        section 1: callback entry to webhook receipt
* ``rebalance``      section 2: enforced rebalance, sidecars against bare consumers
* ``footprint``      section 3: memory, CPU, start-up
* ``http_api``       section 4: ``GET /assignment`` throughput and latency
* ``journal_append`` section 5: durable journal appends
"""
