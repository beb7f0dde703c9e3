"""`python -m bench --render JSON`: a file that is not a bench run's raw JSON is a one-line
error with exit 2, never a traceback, and no report is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.bench import bench_render


@pytest.mark.parametrize(
    "content",
    [None, "{", "[]", '{"sections": [{"x": 1}]}', '{"sections": [], "sizes": {}}', "[" * 100_000],
    ids=["missing", "not-json", "a-list", "bad-section", "no-machine", "too-deep"],
)
def test_render_refuses_what_is_not_a_run(tmp_path: Path, content: str | None) -> None:
    raw = tmp_path / "run.json"
    if content is not None:
        raw.write_text(content)
    report = tmp_path / "report.md"
    done = bench_render(raw, report)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("--render: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not report.exists()


def _rendered(tmp_path: Path, run: dict[str, object]) -> str:
    raw = tmp_path / "run.json"
    raw.write_text(json.dumps(run))
    report = tmp_path / "out" / "report.md"  # a directory that does not exist yet
    done = bench_render(raw, report)
    assert done.returncode == 0, done.stderr
    return report.read_text()


def _run(key: str, **extra: object) -> dict[str, object]:
    section = {"key": key, "title": f"## {key}", "method": "m", "tables": [], "targets": []}
    return {
        "machine": {"nproc": "2"},
        "command": "python -m bench",
        "sizes": {"latency_events": 5, "group_sizes": [3, 30]},
        "load_tool": "wrk",
        "seconds": 12.0,
        "sections": [section],
        **extra,
    }


def test_render_keeps_the_recorded_run_line(tmp_path: Path) -> None:
    text = _rendered(tmp_path, _run("latency", finished="2020-01-02T05:04:00+02:00"))
    run_line = next(line for line in text.splitlines() if line.startswith("- command:"))
    assert run_line == "- command: `python -m bench` (12 s, 2020-01-02 03:04 UTC)"
    # The sizes as recorded: no field added since, shown with today's default.
    assert "- sizes: latency_events=5, group_sizes=(3, 30)\n" in text
    assert "## Findings" in text


def test_render_of_an_older_file_uses_its_mtime(tmp_path: Path) -> None:
    raw = tmp_path / "run.json"
    raw.write_text(json.dumps(_run("latency")))
    os.utime(raw, (1_577_934_240, 1_577_934_240))  # 2020-01-02 03:04 UTC
    report = tmp_path / "report.md"
    done = bench_render(raw, report)
    assert done.returncode == 0, done.stderr
    assert "(12 s, 2020-01-02 03:04 UTC)" in report.read_text()


def test_render_of_a_handover_run_leaves_the_findings_out(tmp_path: Path) -> None:
    text = _rendered(tmp_path, _run("handover"))
    assert "## Findings" not in text and "Handover at the data level" not in text
