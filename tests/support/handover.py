"""What every handover test asks of a run's results: data moved, and nothing lost,
repeated or owned twice on the way."""

from __future__ import annotations

from collections.abc import Iterable

from bench.handover.run import FleetResult


def assert_clean_handovers(results: Iterable[FleetResult]) -> None:
    """Each contender: records produced and partitions moved (the churn or the restarts
    did something), 0 gaps, 0 duplicates, no state lost, no split-state window."""
    for result in results:
        counts = result.counts
        summary = (
            f"{result.contender}: produced {counts.produced}, gaps {counts.gaps}, duplicates "
            f"{counts.duplicates}, handovers {len(counts.handovers)}, split windows "
            f"{sorted(round(w, 3) for w in counts.split_windows)}"
        )
        print(summary)
        assert counts.produced > 0, summary
        assert len(counts.handovers) > 0, summary  # partitions did move
        assert counts.gaps == 0, summary
        assert counts.duplicates == 0, summary
        assert counts.state_lost == 0, summary  # every old owner flushed
        assert all(w <= 0 for w in counts.split_windows), summary
        assert result.skipped == []
