"""The broker the bench starts for itself starts empty (``kafka.sh fresh``; what that does
to the data directory is tested on the real script in test_local_kafka.py): topics of
earlier runs pile up otherwise (they are never deleted), and ~18,000 partitions outgrew
the broker's heap in the middle of a full run. A broker the bench finds running is used
as it is and kept."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from bench import cli


def _stub(tmp_path: Path, running: bool, fresh_fails: bool = False) -> Path:
    """A kafka.sh that records its commands with the data directory it was given."""
    script = tmp_path / "kafka.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$1 $KAFKA_DATA_DIR" >> "{tmp_path / "calls"}"\n'
        f'if [ "$1" = status ]; then exit {0 if running else 3}; fi\n'
        f'if [ "$1" = fresh ] && [ {int(fresh_fails)} = 1 ]; then\n'
        '  echo "cannot remove" >&2; exit 1\n'
        "fi\n"
        'if [ "$1" = fresh ]; then echo 127.0.0.1:1; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "kafka-bench"
    (directory / "log").mkdir(parents=True)
    (directory / "log" / "server.log").write_text("OutOfMemoryError\n")
    monkeypatch.setattr(cli, "BROKER_DATA", directory)
    return directory


@pytest.mark.parametrize(
    ("running", "expected"),
    [(False, ["status", "fresh", "stop"]), (True, ["status", "fresh"])],
    ids=["started-by-the-bench", "already-running"],
)
def test_the_bench_broker_starts_empty(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    data: Path,
    running: bool,
    expected: list[str],
) -> None:
    monkeypatch.setattr(cli, "KAFKA_SH", _stub(tmp_path, running))
    said: list[str] = []
    with cli._broker(None, 1, needed=True, say=said.append) as address:
        assert address == "127.0.0.1:1"
    assert _calls(tmp_path) == [f"{command} {data}" for command in expected]
    assert any("emptying" in line for line in said) == (not running)


def test_a_failed_fresh_start_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: Path
) -> None:
    monkeypatch.setattr(cli, "KAFKA_SH", _stub(tmp_path, running=False, fresh_fails=True))
    with (
        pytest.raises(SystemExit, match=r"kafka\.sh fresh failed:\ncannot remove"),
        cli._broker(None, 1, needed=True, say=lambda _: None),
    ):
        pass
    assert [call.split()[0] for call in _calls(tmp_path)] == ["status", "fresh"]


def test_a_given_broker_is_never_touched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "KAFKA_SH", _stub(tmp_path, running=False))
    with cli._broker("127.0.0.1:9", 1, needed=True, say=lambda _: None) as address:
        assert address == "127.0.0.1:9"
    assert not (tmp_path / "calls").exists()
