"""Moved to ``sidecar.testkit.kafka``, which the benchmarks share; kept for the tests."""

from sidecar.testkit.kafka import *  # noqa: F403
from tests.support.sidecars import REPO

KAFKA_SH = REPO / "deploy" / "local" / "kafka.sh"  # the local broker (start|fresh|stop|...)
