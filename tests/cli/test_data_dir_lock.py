"""Two sidecars on one data directory would interleave one journal's sequence numbers:
the second refuses to start (exit 2) naming the directory and the holder's pid, also when
it reaches the directory by another path (a volume mounted twice), and a holder killed
with SIGKILL leaves no stale lock (the kernel releases it)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.cli.processes import CLI, clean_env, started, text, wait_for
from tests.support.sidecars import REPO, free_port


def _holds(data_dir: Path, process: subprocess.Popen[bytes]) -> bool:
    lock = data_dir / "sidecar.lock"
    return lock.exists() and lock.read_text().strip() == str(process.pid)


def _refused(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )


def test_a_second_demo_on_the_directory_refuses_and_a_killed_holder_leaves_no_lock(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "dd"
    # The same directory by a second path: a volume mounted twice, as far as paths go.
    other_path = tmp_path / "mounted-again"
    other_path.symlink_to(data_dir, target_is_directory=True)
    env = clean_env()
    first_args = ["demo", "--port", str(free_port()), "--peers", "0", "--data-dir", str(data_dir)]
    with started(first_args, tmp_path / "first.log", env) as first:
        wait_for(lambda: _holds(data_dir, first), "the first demo locks its directory", first)
        for path in (data_dir, other_path):
            second = _refused(
                ["demo", "--port", str(free_port()), "--peers", "0", "--data-dir", str(path)], env
            )
            assert second.returncode == 2, second.stderr[-2000:]
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1, second.stderr
            assert str(path) in lines[0]
            assert f"pid {first.pid}" in lines[0]
            assert "in use" in lines[0]
            assert "Traceback" not in second.stderr
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    # No stale lock: the next one starts (its pid in the lock file is the proof).
    with started(first_args, tmp_path / "third.log", env) as third:
        wait_for(lambda: _holds(data_dir, third), "a demo after SIGKILL locks the directory", third)
    third_log = text(tmp_path / "third.log")
    assert "Traceback" not in third_log, third_log[-4000:]


def test_a_second_run_on_the_directory_refuses(tmp_path: Path) -> None:
    data_dir = tmp_path / "dd"
    # No broker needed: the lock is taken before Kafka is asked anything.
    env = clean_env(
        SIDECAR_BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}",
        SIDECAR_GROUP_ID="lock-test",
        SIDECAR_TOPICS="lock-test",
        SIDECAR_ADMIN_PORT="-1",
        SIDECAR_LOG_LEVEL="warning",
    )
    with started(
        ["run"],
        tmp_path / "first.log",
        {**env, "SIDECAR_DATA_DIR": str(data_dir), "SIDECAR_API_PORT": str(free_port())},
    ) as first:
        wait_for(lambda: _holds(data_dir, first), "the first run locks its directory", first)
        second = _refused(
            ["run"],
            {**env, "SIDECAR_DATA_DIR": str(data_dir), "SIDECAR_API_PORT": str(free_port())},
        )
        assert second.returncode == 2, second.stderr[-2000:]
        assert second.stderr.count("\n") == 1, second.stderr
        assert str(data_dir) in second.stderr and f"pid {first.pid}" in second.stderr
