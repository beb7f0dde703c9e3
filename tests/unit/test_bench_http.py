"""The HTTP section's verdict: the median of each round's own ratio, not a ratio of medians
taken over different rounds (a slow moment must fall on both sides of a ratio), with the
sidecar and the ceiling measured next to each other in every round."""

from __future__ import annotations

import math

import pytest

from bench.http_api import round_order, round_ratio
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


def test_one_round_is_its_ratio_and_no_ceiling_judges_nothing() -> None:
    assert round_ratio([_load(80)], [_load(100)]) == 0.8
    assert math.isnan(round_ratio([_load(80)], [_load(0)]))
    assert not round_ratio([_load(80)], [_load(0)]) >= 0.8  # the verdict: not met


def test_the_sidecar_and_the_ceiling_are_always_measured_back_to_back() -> None:
    orders = [round_order(number) for number in range(1, 5)]
    for order in orders:
        assert sorted(order) == ["asgi", "fastapi", "sidecar"]
        assert abs(order.index("sidecar") - order.index("asgi")) == 1
    firsts = [next(name for name in order if name in ("sidecar", "asgi")) for order in orders]
    assert firsts == ["sidecar", "asgi", "sidecar", "asgi"]
    assert [order[0] for order in orders] == ["sidecar", "fastapi", "sidecar", "fastapi"]
