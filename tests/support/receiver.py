"""Moved to ``sidecar.testkit.receiver``, which the benchmarks share; kept for the tests."""

from sidecar.testkit.receiver import *  # noqa: F403
