"""The synthetic fleet generator: deterministic, contract-shaped, with a CLI."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from sidecar.analytics.generator import FleetSpec, format_time, generate, main, write_fleet

TYPES = {
    "kafka.partitions.assigned",
    "kafka.partitions.revoked",
    "kafka.partitions.lost",
    "kafka.rebalance.requested",
}


def lines(spec: FleetSpec) -> list[str]:
    return list(generate(spec))


def test_same_seed_same_fleet() -> None:
    spec = FleetSpec(groups=4, events=3000, seed=11)
    assert lines(spec) == lines(spec)
    assert lines(spec) != lines(FleetSpec(groups=4, events=3000, seed=12))


def test_writes_exactly_the_events_asked_for() -> None:
    out = io.StringIO()
    assert write_fleet(out, FleetSpec(groups=3, events=5000, seed=1)) == 5000
    assert out.getvalue().count("\n") == 5000


def test_events_follow_the_contract() -> None:
    events = [json.loads(line) for line in lines(FleetSpec(groups=8, events=8000, seed=5))]
    assert {e["type"] for e in events} == TYPES
    protocols = Counter(e["data"]["protocol"] for e in events)
    assert set(protocols) == {"eager", "cooperative"}
    statics = {e["data"]["group_instance_id"] is not None for e in events}
    assert statics == {True, False}
    for event in events:
        data = event["data"]
        assert event["specversion"] == "1.0"
        identity = data["group_instance_id"] or data["member_id"]
        assert event["source"] == f"kafka://{data['group_id']}/{identity}"
        assert re.fullmatch(r"\d+", event["sequence"])
        assert datetime.fromisoformat(event["time"]).tzinfo is not None
        assert isinstance(data["generation_id"], int)
        assert data["generation_id"] >= 1
        for part in data["partitions"] + data["assignment"]:
            assert isinstance(part["topic"], str)
            assert isinstance(part["partition"], int)
    # Redeliveries: some ids appear twice with identical content.
    ids = Counter(e["id"] for e in events)
    assert 0 < sum(n - 1 for n in ids.values()) < len(events) * 0.05
    # Crashes, losses and deploys all happen.
    assert any(e["type"] == "kafka.partitions.lost" for e in events)


def test_time_format() -> None:
    assert format_time(1_704_067_200_000_250) == "2024-01-01T00:00:00.000250Z"


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--events" in capsys.readouterr().out
    target = tmp_path / "fleet.jsonl"
    assert main(["--events", "1200", "--groups", "3", "--seed", "2", "--out", str(target)]) == 0
    assert len(target.read_text().splitlines()) == 1200
    assert "wrote 1200 events" in capsys.readouterr().err
