"""Moved to ``sidecar.testkit.apps``, which the benchmarks share; kept for the tests."""

from sidecar.testkit.apps import *  # noqa: F403
