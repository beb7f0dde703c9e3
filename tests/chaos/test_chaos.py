"""The short chaos run of the test suite: every kind of fault, then every invariant.

A seeded, bounded run (3 members, one static, 14 faults over 75 s, its own broker):
the long soak is ``python -m tests.chaos --seed N --faults 200 --minutes 20`` (see
docs/reliability.md). ``CHAOS_SEED`` picks another schedule.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.harness import ChaosConfig, run_chaos
from tests.chaos.plan import FAULTS

SEED = int(os.environ.get("CHAOS_SEED", "3"))


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_short_chaos_run_keeps_every_promise(tmp_path: Path) -> None:
    config = ChaosConfig(
        seed=SEED,
        workdir=tmp_path / "chaos",
        members=3,
        statics=1,
        faults=14,
        seconds=75,
    )
    report = run_chaos(config)
    print(report.format())  # shown when the test fails, and with -s

    assert report.api_errors == []
    assert set(report.faults) == {kind.value for kind in FAULTS}  # every kind happened
    assert sum(report.faults.values()) >= 12
    # nothing lost; redeliveries identical; per-subscriber order
    assert report.expected_deliveries > 0
    assert report.lost == []
    assert report.mismatched == []
    assert report.out_of_order == []
    # no double ownership beyond the windows the protocol allows (counted, not failed)
    assert report.intervals > 0
    assert report.unexplained == []
    # bounded stalls and a group that recovers
    assert report.stalled == []
    # nothing crashed on its own; SIGTERM exits cleanly; liveness held; no exception logged
    assert report.crashes == []
    assert report.bad_exits == []
    assert report.health == []
    assert report.exceptions == []
    assert report.ok
