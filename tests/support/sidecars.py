"""Moved to ``sidecar.testkit.sidecars``, which the benchmarks share; kept for the tests."""

from sidecar.testkit.sidecars import *  # noqa: F403
