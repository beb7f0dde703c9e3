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
    for result in results:
        counts = result.counts
        summary = (
            f"{result.contender}: produced {counts.produced}, gaps {counts.gaps}, duplicates "
            f"{counts.duplicates}, handovers {len(counts.handovers)}, split windows "
            f"{sorted(round(w, 3) for w in counts.split_windows)}"
        )
        print(summary)
        assert counts.produced > 0, summary
        assert len(counts.handovers) > 0, summary  # the churn did move partitions
        assert counts.gaps == 0, summary
        assert counts.duplicates == 0, summary
        assert counts.state_lost == 0, summary  # every old owner flushed
        assert all(w <= 0 for w in counts.split_windows), summary
        assert result.skipped == []
