"""The journal as the commands meet it: a journal that cannot be opened or read, and
``journal export``'s arguments and output. One line and exit code 2 for each refusal,
never a traceback, and an existing output file is never left truncated."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sidecar.journal import FILE_NAME, Journal
from sidecar.model import PartitionOffset
from sidecar.testkit.events import draft
from tests.support.cli import BASE_ENV, GOOD, run
from tests.support.sidecars import REPO

KEPT = '{"kept": "the previous export"}\n'


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal (exit 2, no traceback)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("rebalance-sidecar: "), done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def journal_with(data_dir: Path, events: int) -> Path:
    journal = Journal(data_dir, durable=False)
    for partition in range(events):
        journal.append(draft(partitions=(PartitionOffset("t", partition, 0),)))
    journal.close()
    return data_dir / FILE_NAME


def _not_a_database(data_dir: Path) -> str:
    data_dir.mkdir()
    (data_dir / FILE_NAME).write_bytes(random.Random(1).randbytes(8192))
    return "file is not a database"


def _unopenable(data_dir: Path) -> str:
    (data_dir / FILE_NAME).mkdir(parents=True)  # SQLite cannot open a directory
    return "unable to open database file"


BROKEN_JOURNALS = pytest.mark.parametrize(
    "broken", [_not_a_database, _unopenable], ids=["not-a-database", "unopenable"]
)


@BROKEN_JOURNALS
def test_run_refuses_a_journal_it_cannot_open(
    tmp_path: Path, broken: Callable[[Path], str]
) -> None:
    data_dir = tmp_path / "data"
    reason = broken(data_dir)
    done = run({**GOOD, "SIDECAR_DATA_DIR": str(data_dir)}, "run")
    line = refused(done)
    assert f"SIDECAR_DATA_DIR={data_dir}: " in line  # as a data dir that is a file is told
    assert str(data_dir / FILE_NAME) in line
    assert reason in line


@BROKEN_JOURNALS
def test_export_refuses_a_journal_it_cannot_open(
    tmp_path: Path, broken: Callable[[Path], str]
) -> None:
    data_dir = tmp_path / "data"
    reason = broken(data_dir)
    output = tmp_path / "keep.jsonl"
    output.write_text(KEPT)
    done = run({}, "journal", "export", "--data-dir", str(data_dir), "--output", str(output))
    line = refused(done)
    assert line.startswith("rebalance-sidecar: --data-dir: ")
    assert str(data_dir / FILE_NAME) in line
    assert reason in line
    assert output.read_text() == KEPT


def test_a_journal_found_corrupt_while_exporting_leaves_the_old_output(tmp_path: Path) -> None:
    """Pages past the first one overwritten: SQLite finds out while reading the events
    (or on the first read when it opens the file); either way the previous export stays."""
    journal = journal_with(tmp_path / "data", 3000)
    content = bytearray(journal.read_bytes())
    garbage = random.Random(2)
    for offset in range(len(content) // 4, 3 * len(content) // 4):
        content[offset] = garbage.randrange(256)
    journal.write_bytes(bytes(content))
    output = tmp_path / "keep.jsonl"
    output.write_text(KEPT)
    done = run({}, "journal", "export", "--data-dir", str(journal.parent), "--output", str(output))
    line = refused(done)
    assert str(journal) in line
    assert "malformed" in line
    assert output.read_text() == KEPT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "keep.jsonl"]  # no temp left


@pytest.mark.parametrize(
    ("after", "said"),
    [
        ("99999999999999999999999", "must be between 0 and 9223372036854775807"),
        ("9223372036854775808", "must be between 0 and 9223372036854775807"),
        ("-1", "must be between 0 and 9223372036854775807"),
        ("seven", "not a whole number"),
    ],
)
def test_export_refuses_an_after_out_of_range_and_keeps_the_output(
    tmp_path: Path, after: str, said: str
) -> None:
    journal = journal_with(tmp_path / "data", 2)
    output = tmp_path / "keep.jsonl"
    output.write_text(KEPT)
    done = run(
        {},
        "journal",
        "export",
        "--data-dir",
        str(journal.parent),
        "--after",
        after,
        "--output",
        str(output),
    )
    line = refused(done)
    assert "--after" in line
    assert said in line
    assert output.read_text() == KEPT


def test_export_after_the_largest_sequence_is_empty(tmp_path: Path) -> None:
    journal = journal_with(tmp_path / "data", 2)
    done = run(
        {}, "journal", "export", "--data-dir", str(journal.parent), "--after", str(2**63 - 1)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "exported 0 events" in done.stderr


def test_export_refuses_an_output_it_cannot_write(tmp_path: Path) -> None:
    journal = journal_with(tmp_path / "data", 2)
    export = ("journal", "export", "--data-dir", str(journal.parent), "--output")
    line = refused(run({}, *export, str(tmp_path)))
    assert line == f"rebalance-sidecar: --output {tmp_path}: is a directory"
    missing = tmp_path / "no-such-dir" / "x.jsonl"
    line = refused(run({}, *export, str(missing)))
    assert line == f"rebalance-sidecar: --output {missing}: No such file or directory"
    line = refused(run({}, *export, str(journal)))
    assert "the journal's own file" in line
    assert Journal(journal.parent, durable=False).last_sequence() == 2


def test_export_replaces_the_output_only_once_written(tmp_path: Path) -> None:
    journal = journal_with(tmp_path / "data", 3)
    output = tmp_path / "out.jsonl"
    output.write_text(KEPT)
    output.chmod(0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(output)
    done = run({}, "journal", "export", "--data-dir", str(journal.parent), "--output", str(link))
    assert done.returncode == 0, done.stderr
    assert "exported 3 events" in done.stderr
    assert link.is_symlink()  # the link's target was replaced, not the link
    assert [json.loads(line)["type"] for line in output.read_text().splitlines()] == [
        "kafka.partitions.assigned"
    ] * 3
    assert output.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "link.jsonl", "out.jsonl"]
    done = run({}, "journal", "export", "--data-dir", str(journal.parent), "--output", os.devnull)
    assert done.returncode == 0, done.stderr  # not a regular file: written as it is
    assert Path(os.devnull).is_char_device()


@pytest.mark.parametrize("output", [[], ["--output", "/dev/stdout"]], ids=["stdout", "path"])
def test_export_into_a_closed_pipe_is_quiet(tmp_path: Path, output: list[str]) -> None:
    """``journal export | head -1``: the reader goes away; no traceback for that. Also
    with ``--output /dev/stdout`` (it said "Broken pipe" and exited 1, as a full disk)."""
    journal = journal_with(tmp_path / "data", 3000)  # far more than a pipe's buffer
    command = ["journal", "export", "--data-dir", str(journal.parent), *output]
    export = subprocess.Popen(
        [sys.executable, "-m", "sidecar", *command],
        env=BASE_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    with export:
        assert export.stdout is not None and export.stderr is not None
        assert export.stdout.readline().startswith(b"{")
        export.stdout.close()
        stderr = export.stderr.read().decode()
        assert export.wait(timeout=30) == 128 + signal.SIGPIPE, stderr
    assert stderr == ""


def _to_full_disk(*args: str) -> subprocess.CompletedProcess[str]:
    with open("/dev/full", "w") as full:  # every write fails with ENOSPC
        return subprocess.run(
            [sys.executable, "-m", "sidecar", *args],
            env=BASE_ENV,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            timeout=60,
        )


def test_export_or_settings_to_a_full_disk_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """An OSError traceback (exit 1) before: only a closed pipe was handled. Then one line
    but exit 2, the code for a command given wrong: a script could not tell "fix the
    command" from "the disk is full". A write that fails part way is exit 1."""
    journal = journal_with(tmp_path / "data", 3000)
    for args in (["journal", "export", "--data-dir", str(journal.parent)], ["settings"]):
        done = _to_full_disk(*args)
        assert done.returncode == 1, done.stderr
        assert done.stderr == "rebalance-sidecar: cannot write to stdout: No space left on device\n"
    export = ["journal", "export", "--data-dir", str(journal.parent)]
    into_full = subprocess.run(
        [sys.executable, "-m", "sidecar", *export, "--output", "/dev/full"],
        env=BASE_ENV,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert into_full.returncode == 1, into_full.stderr
    assert into_full.stderr == "rebalance-sidecar: --output /dev/full: No space left on device\n"
    # A path it cannot use at all is still the command's fault: exit 2.
    unusable = run({}, *export, "--output", "/")
    assert unusable.returncode == 2, unusable.stderr


def test_settings_into_a_closed_pipe_is_quiet() -> None:
    """``rebalance-sidecar settings | true``: a BrokenPipeError traceback before."""
    settings = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "settings"],
        env=BASE_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    with settings:
        assert settings.stdout is not None and settings.stderr is not None
        settings.stdout.close()  # before it writes: its first write finds no reader
        stderr = settings.stderr.read().decode()
        assert settings.wait(timeout=30) == 128 + signal.SIGPIPE, stderr
    assert stderr == ""


def test_export_leaves_an_empty_journal_file_as_it_was(tmp_path: Path) -> None:
    """It said "exported 0 events" (exit 0) and wrote the journal's tables into the file."""
    (tmp_path / FILE_NAME).touch()
    line = refused(run({}, "journal", "export", "--data-dir", str(tmp_path)))
    assert "is empty (0 bytes)" in line
    assert (tmp_path / FILE_NAME).stat().st_size == 0
