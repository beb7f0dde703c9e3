"""The benchmark harness still runs: every section, tiny sizes, against the real broker.

Figures are not checked (they are benchmarks, not assertions): only that each section
produced its tables and targets and that the report and the raw JSON were written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.testkit.sidecars import REPO
from tests.support.bench import bench_render

pytestmark = pytest.mark.kafka

SECTIONS = ["latency", "rebalance", "footprint", "http", "journal", "scale", "tracing"]


def test_every_section_runs_with_tiny_sizes(kafka_bootstrap: str, tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    raw = tmp_path / "benchmarks.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--bootstrap",
            kafka_bootstrap,
            "--quick",
            "--events",
            "20",
            "--repetitions",
            "1",
            "--starts",
            "1",
            "--window",
            "0.5",
            "--output",
            str(report),
            "--json",
            str(raw),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=420,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads(raw.read_text())
    assert [s["key"] for s in results["sections"]] == SECTIONS
    for section in results["sections"]:
        assert section["tables"] and all(t["rows"] for t in section["tables"]), section["key"]
    targets = [t["what"] for s in results["sections"] for t in s["targets"]]
    # latency, 2 x rebalance, RSS, CPU, HTTP; scale: 2 x rebalance at the largest group, RSS
    assert len(targets) == 9, targets
    text = report.read_text()
    assert text.startswith("# Benchmarks")
    for section in results["sections"]:
        assert f"## {section['title']}" in text
    assert "python -m bench --bootstrap" in text

    # Rendered again from the raw JSON, the report keeps the recorded run's "Run" lines
    # (when it finished, its sizes), not the time and sizes of the re-render.
    results["finished"] = "2020-01-02T03:04:00+00:00"
    raw.write_text(json.dumps(results))
    again = tmp_path / "again.md"
    redone = bench_render(raw, again)
    assert redone.returncode == 0, redone.stderr
    run_line = next(line for line in again.read_text().splitlines() if "- command:" in line)
    assert run_line.endswith(", 2020-01-02 03:04 UTC)"), run_line
    assert "latency_events=20," in again.read_text()
