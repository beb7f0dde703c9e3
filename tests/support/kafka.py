"""Moved to ``sidecar.testkit.kafka``, which the benchmarks share; kept for the tests."""

from sidecar.testkit.kafka import *  # noqa: F403
