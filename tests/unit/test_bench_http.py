"""The HTTP section's verdict: the median of each round's own ratio, not a ratio of medians
taken over different rounds (a slow moment must fall on both sides of a ratio)."""

from __future__ import annotations

import pytest

from bench.http_api import round_ratio
from bench.loads import Load


def _load(rate: float) -> Load:
    return Load(requests_per_second=rate, p50=0.001, p99=0.002, requests=0, errors=0, tool="wrk")


def test_each_round_is_compared_with_its_own_ceiling() -> None:
    # Per server, the medians are 900 and 1,000 (x0.90); per round the sidecar got
    # 0.5, 0.95 and 0.95 of the ceiling measured next to it: the verdict is x0.95.
    ours = [_load(500), _load(900), _load(950)]
    ceiling = [_load(1000), _load(947.4), _load(1000)]
    assert round(round_ratio(ours, ceiling), 2) == 0.95


def test_an_even_number_of_rounds_takes_the_middle_two() -> None:
    assert round_ratio([_load(8), _load(9)], [_load(10), _load(10)]) == pytest.approx(0.85)


def test_one_round_is_its_ratio_and_a_dead_ceiling_counts_for_nothing() -> None:
    assert round_ratio([_load(80)], [_load(100)]) == 0.8
    assert round_ratio([_load(80)], [_load(0)]) == 0.0
