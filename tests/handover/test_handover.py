"""The promise at the data level, on the real broker: reference apps under graceful churn.

A short version of ``python -m bench --only handover``: records are produced continuously while
a fleet of reference apps, each with its rebalance-sidecar, processes the topic through an
enforced rebalance, a member joining, a member draining and leaving, and a member restarting.
Counted from what the apps record: every record's effect reached the store exactly once, and
every old owner flushed a partition's state before its new owner processed a record of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.handover.members import GO_APP
from bench.handover.run import GRACEFUL, run_handover
from tests.support.handover import assert_clean_handovers

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def contenders() -> list[str]:
    if not GO_APP.exists():
        pytest.fail(f"{GO_APP} is missing: build it with scripts/build-go-app.sh")
    return ["python", "go"]


@pytest.mark.timeout(240)
def test_graceful_churn_loses_nothing_and_counts_nothing_twice(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    results = run_handover(
        kafka_bootstrap,
        tmp_path,
        contenders(),
        steps=GRACEFUL,
        members=2,
        rate=200.0,
        step_seconds=5.0,
        footprint_seconds=1.0,
        say=print,
    )
    assert_clean_handovers(results)
