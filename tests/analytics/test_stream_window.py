"""``--window-seconds``: a stream's tables cover the last stretch of event time only.

The micro-batches are handed to the product's ``foreachBatch`` function as Kafka's
source would (``value`` bytes, ``timestamp``), without a broker: what is under test is
which events the tables are built from, not the Kafka source (``test_streaming``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from sidecar.analytics.events import read_normalized
from sidecar.analytics.generator import FleetSpec, write_fleet_file
from sidecar.analytics.streaming import EVENTS_DIR, StreamOptions, TableRefresher, within_window
from sidecar.analytics.tables import TABLE_NAMES
from tests.support.analytics import canonical, collect_tables, written_rows

pytestmark = [pytest.mark.spark]


def kafka_batch(spark: SparkSession, events: list[dict[str, Any]]) -> DataFrame:
    arrived = datetime.now(UTC)
    rows = [(json.dumps(e).encode(), arrived) for e in events]
    return spark.createDataFrame(rows, "value binary, timestamp timestamp")


def event_time(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["time"]))


def fleet_events(tmp_path: Path, groups: int, events: int, seed: int) -> list[dict[str, Any]]:
    fleet = tmp_path / "fleet.jsonl"
    write_fleet_file(fleet, FleetSpec(groups=groups, events=events, seed=seed))
    return [json.loads(line) for line in fleet.read_text().splitlines()]


def windowed(spark: SparkSession, output: Path, window: float) -> TableRefresher:
    options = StreamOptions(inputs=(), output=output, report=False, window_seconds=window)
    return TableRefresher(spark, options)


def assert_tables_of(
    spark: SparkSession, output: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The tables in ``output`` are the batch job's tables of ``events``."""
    expected_file = tmp_path / "expected.jsonl"
    expected_file.write_text("".join(json.dumps(e) + "\n" for e in events))
    expected = collect_tables(spark, expected_file)
    for name in TABLE_NAMES:
        assert canonical(written_rows(spark, output, name)) == canonical(expected[name]), name


def test_windowed_tables_are_the_tables_of_the_events_in_the_window(
    spark: SparkSession, tmp_path: Path
) -> None:
    events = fleet_events(tmp_path, groups=4, events=2000, seed=9)
    times = sorted(event_time(e) for e in events)
    # About the last third of the fleet's span, ending exactly on an event: the edge is
    # measured from the newest event (not the clock), and an event on it is inside.
    edge = times[len(times) * 2 // 3]
    window = (times[-1] - edge).total_seconds()
    output = tmp_path / "out"
    refresher = windowed(spark, output, window)
    refresher(kafka_batch(spark, events), 0)
    assert refresher.batches == 1

    inside = [e for e in events if event_time(e) >= edge]
    assert 0 < len(inside) < len(events) * 0.6
    assert sum(1 for e in events if event_time(e) == edge) >= 1
    assert_tables_of(spark, output, inside, tmp_path)
    # Everything read is still kept: a window is a view, not a retention.
    assert spark.read.parquet(str(output / EVENTS_DIR)).count() == len(events)


def test_an_event_older_than_the_window_changes_no_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A late event from before the window (a sidecar's backlog) is kept, not counted."""
    events = fleet_events(tmp_path, groups=2, events=400, seed=3)
    newest = max(event_time(e) for e in events)
    output = tmp_path / "out"
    refresher = windowed(spark, output, 3600)
    refresher(kafka_batch(spark, events), 0)
    before = {name: canonical(written_rows(spark, output, name)) for name in TABLE_NAMES}
    late = dict(events[0])
    late["id"] = "late-event-from-before-the-window"
    late["time"] = (newest - timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    refresher(kafka_batch(spark, [late]), 1)
    assert refresher.batches == 2
    for name in TABLE_NAMES:
        assert canonical(written_rows(spark, output, name)) == before[name], name
    assert spark.read.parquet(str(output / EVENTS_DIR)).count() == len(events) + 1


def test_an_event_from_a_clock_years_ahead_does_not_empty_the_tables(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The edge is measured from the newest event: one from a host whose clock is ten
    years ahead moved it past every other event, and the tables were empty for good."""
    events = fleet_events(tmp_path, groups=2, events=400, seed=3)
    newest = max(event_time(e) for e in events)
    ahead = dict(events[-1])
    ahead["id"] = "from-a-clock-ten-years-ahead"
    ahead["time"] = rfc3339(datetime.now(UTC) + timedelta(days=3653))
    window = 3600.0
    output = tmp_path / "out"
    refresher = windowed(spark, output, window)
    refresher(kafka_batch(spark, [*events, ahead]), 0)
    rows = written_rows(spark, output, "ownership")
    assert rows, "the tables were emptied"
    # The window still ends at the newest believable event; the one from 2036 is past
    # the edge, so it counts like any other event in the window.
    start = newest - timedelta(seconds=window)
    inside = [e for e in events if event_time(e) >= start] + [ahead]
    assert_tables_of(spark, output, inside, tmp_path)


def test_a_window_that_is_not_a_positive_number_is_refused() -> None:
    for bad in (0.0, -5.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="window_seconds must be a positive"):
            StreamOptions(inputs=(), output="out", window_seconds=bad)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_a_host_a_little_ahead_does_not_empty_a_short_window(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A live fleet, one host 40 minutes ahead, a 30-minute window: the edge was placed
    from that host's events and every other event fell out of the tables. It is placed
    no later than the clock (``now``)."""
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    events = fleet_events(tmp_path, groups=2, events=400, seed=3)
    # The fleet moved so that its newest event is a minute before the clock.
    shift = now - timedelta(minutes=1) - max(event_time(e) for e in events)
    for e in events:
        e["time"] = rfc3339(event_time(e) + shift)
    ahead = dict(events[-1])
    ahead["id"] = "from-a-clock-40-minutes-ahead"
    ahead["time"] = rfc3339(now + timedelta(minutes=40))
    source = tmp_path / "live.jsonl"
    source.write_text("".join(json.dumps(e) + "\n" for e in [*events, ahead]))
    window = 1800.0
    inside = within_window(read_normalized(spark, [str(source)]), window, now=now)
    got = {r["event_id"] for r in inside.select("event_id").collect()}
    expected = {e["id"] for e in events if event_time(e) >= now - timedelta(seconds=window)}
    assert len(expected) > 1, "no event of the fleet in its last 30 minutes: proves nothing"
    assert got == expected | {ahead["id"]}
