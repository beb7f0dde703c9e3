"""The commands as users run them: clear one-line errors with exit code 2, and --help."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.sidecars import REPO, free_port

BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
GOOD = {
    "SIDECAR_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "SIDECAR_GROUP_ID": "g",
    "SIDECAR_TOPICS": "t",
    "SIDECAR_ADMIN_PORT": "0",  # not the default 8081: tests run side by side
}


def run(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        env={**BASE_ENV, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SIDECAR_REVOKE_TIMEOUT_MS": "soon"}, "SIDECAR_REVOKE_TIMEOUT_MS"),
        ({"SIDECAR_GROUP_PROTOCOL": "gossip"}, "SIDECAR_GROUP_PROTOCOL"),
        ({"SIDECAR_API_PORT": "70000"}, "SIDECAR_API_PORT"),
        ({"SIDECAR_TOPICS": "^(unclosed"}, "SIDECAR_TOPICS"),
        ({"SIDECAR_TOPICS": "no spaces allowed"}, "SIDECAR_TOPICS"),
        ({"SIDECAR_BOOTSTRAP_SERVERS": "localhost"}, "SIDECAR_BOOTSTRAP_SERVERS"),
        ({"SIDECAR_BOOTSTRAP_SERVERS": "no-such-host.invalid:9092"}, "SIDECAR_BOOTSTRAP_SERVERS"),
        ({"SIDECAR_WEBHOOKS": "[{"}, "SIDECAR_WEBHOOKS"),
        ({"SIDECAR_WEBHOOKS": '[{"url": "http://x"}]'}, "SIDECAR_WEBHOOKS"),  # no secret
        ({"SIDECAR_REVOKE_TIMEOUT_MS": "299000"}, "max.poll.interval.ms"),
        ({"SIDECAR_API_HOST": "0.0.0.0"}, "SIDECAR_API_TOKEN"),
        ({"SIDECAR_KAFKA_ENABLE_AUTO_COMMIT": "true"}, "enable.auto.commit"),
        ({"SIDECAR_GROUP_ID": ""}, "SIDECAR_GROUP_ID"),
    ],
)
def test_bad_settings_exit_2_with_one_clear_message(env: dict[str, str], named: str) -> None:
    done = run({**GOOD, **env}, "run")
    assert done.returncode == 2, done.stderr
    assert named in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("rebalance-sidecar: ")


def test_config_file_is_read_and_the_environment_wins(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text("group_id: from-file\nrevoke_timeout_ms: bad\n")
    done = run({**GOOD, "SIDECAR_CONFIG_FILE": str(config)}, "run")
    assert done.returncode == 2
    assert "SIDECAR_REVOKE_TIMEOUT_MS" in done.stderr  # the file's value was read and refused
    # The environment overrides the file's bad value; another bad setting stops the run.
    env = {**GOOD, "SIDECAR_REVOKE_TIMEOUT_MS": "1000", "SIDECAR_GROUP_PROTOCOL": "gossip"}
    done = run(env, "run", "--config", str(config))
    assert done.returncode == 2
    assert "SIDECAR_GROUP_PROTOCOL" in done.stderr
    assert "REVOKE" not in done.stderr


def test_unreadable_config_file(tmp_path: Path) -> None:
    done = run({**GOOD, "SIDECAR_CONFIG_FILE": str(tmp_path / "missing.toml")}, "run")
    assert done.returncode == 2
    assert "cannot read" in done.stderr


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run(
            {**GOOD, "SIDECAR_API_PORT": str(port), "SIDECAR_DATA_DIR": str(tmp_path)}, "run"
        )
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


@pytest.mark.parametrize("args", [[], ["run"], ["demo"], ["journal", "export"], ["analytics"]])
def test_every_command_has_help(args: list[str]) -> None:
    done = run({}, *args, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_journal_export_refuses_a_directory_without_journal(tmp_path: Path) -> None:
    done = run({}, "journal", "export", "--data-dir", str(tmp_path))
    assert done.returncode == 2
    assert "no journal" in done.stderr


def test_demo_runs_without_java_or_kafka(tmp_path: Path) -> None:
    """The README's run command must work on a machine with neither Java nor a broker."""
    java = shutil.which("java")
    path = os.pathsep.join(
        p
        for p in BASE_ENV.get("PATH", "").split(os.pathsep)
        if not java or Path(p).resolve() != Path(java).resolve().parent
    )
    env = {**BASE_ENV, "PATH": path, "JAVA_HOME": "/nonexistent"}
    port = free_port()
    demo = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "demo", "--port", str(port), "--data-dir", str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 90
        state: dict[str, object] = {}
        while time.monotonic() < deadline:
            try:
                state = httpx.get(f"http://127.0.0.1:{port}/assignment", timeout=2).json()
                if state.get("state") == "stable" and state.get("partitions"):
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        assert state.get("state") == "stable", state
        events = httpx.get(
            f"http://127.0.0.1:{port}/events",
            params={"after": 0},
            headers={"Accept": "application/json"},
        ).json()
        assert events and events[0]["type"] == "kafka.partitions.assigned"
    finally:
        demo.send_signal(signal.SIGINT)
        output, _ = demo.communicate(timeout=60)
    assert demo.returncode == 0, output.decode()[-3000:]
    assert b"curl" in output  # the hint of what to try
