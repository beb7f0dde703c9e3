"""The commands as users run them: clear one-line errors with exit code 2, and --help."""

from __future__ import annotations

import ast
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from sidecar.cli import _EarlySignals
from sidecar.preflight import check_resolvable
from sidecar.settings import InvalidSettings
from sidecar.settings_sources import load_settings
from tests.support.cli import BASE_ENV, GOOD, run
from tests.support.sidecars import REPO, free_port


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SIDECAR_REVOKE_TIMEOUT_MS": "soon"}, "SIDECAR_REVOKE_TIMEOUT_MS"),
        ({"SIDECAR_GROUP_PROTOCOL": "gossip"}, "SIDECAR_GROUP_PROTOCOL"),
        ({"SIDECAR_API_PORT": "70000"}, "SIDECAR_API_PORT"),
        ({"SIDECAR_TOPICS": "^(unclosed"}, "SIDECAR_TOPICS"),
        ({"SIDECAR_TOPICS": "no spaces allowed"}, "SIDECAR_TOPICS"),
        ({"SIDECAR_TOPICS": "^t{99999999999}"}, "SIDECAR_TOPICS"),  # was a traceback
        ({"SIDECAR_BOOTSTRAP_SERVERS": "localhost"}, "SIDECAR_BOOTSTRAP_SERVERS"),
        ({"SIDECAR_BOOTSTRAP_SERVERS": "no-such-host.invalid:9092"}, "SIDECAR_BOOTSTRAP_SERVERS"),
        ({"SIDECAR_WEBHOOKS": "[{"}, "SIDECAR_WEBHOOKS"),
        ({"SIDECAR_WEBHOOKS": '[{"url": "http://x"}]'}, "SIDECAR_WEBHOOKS"),  # no secret
        ({"SIDECAR_REVOKE_TIMEOUT_MS": "299000"}, "max.poll.interval.ms"),
        ({"SIDECAR_API_HOST": "0.0.0.0"}, "SIDECAR_API_TOKEN"),
        ({"SIDECAR_HTTP_REQUEST_TIMEOUT_MS": "500"}, "SIDECAR_HTTP_REQUEST_TIMEOUT_MS"),
        ({"SIDECAR_EVENT_STREAMS_MAX": "0"}, "SIDECAR_EVENT_STREAMS_MAX"),
        # a host the resolver cannot encode (IDNA): a TypeError traceback at the bind
        ({"SIDECAR_ADMIN_HOST": "\u200b"}, "'\\u200b':0 (SIDECAR_ADMIN_HOST/SIDECAR_ADMIN_PORT)"),
        ({"SIDECAR_API_HOST": "pod-0\u2028", "SIDECAR_API_TOKEN": "t"}, "SIDECAR_API_HOST"),
        ({"SIDECAR_ADMIN_HOST": "pod-0\n"}, "'pod-0\\n':0"),  # the line stays one line
        ({"SIDECAR_KAFKA_ENABLE_AUTO_COMMIT": "true"}, "enable.auto.commit"),
        ({"SIDECAR_GROUP_ID": ""}, "SIDECAR_GROUP_ID"),
        # confluent-kafka's own properties take Python callables: a TypeError traceback
        ({"SIDECAR_KAFKA_ERROR__CB": "x"}, "SIDECAR_KAFKA_ERROR__CB"),
        ({"SIDECAR_KAFKA_THROTTLE__CB": "x"}, "SIDECAR_KAFKA_THROTTLE__CB"),  # a ValueError
        # The check set log_level 0 over it: the member thread died of it after start.
        ({"SIDECAR_KAFKA_LOG__LEVEL": "x"}, "SIDECAR_KAFKA_LOG__LEVEL"),
        # librdkafka's range messages end in a newline: the line was two.
        ({"SIDECAR_KAFKA_FETCH_WAIT_MAX_MS": "4000000"}, "SIDECAR_KAFKA_FETCH_WAIT_MAX_MS"),
        # Names from the environment are shown, not obeyed: a newline in one split the line.
        ({"SIDECAR_GROUPID\nX": "1", "SIDECAR_GROUP_ID": ""}, "SIDECAR_GROUPID\\nX"),
        # A path too long for the file system: an OSError traceback.
        ({"SIDECAR_CONFIG_FILE": "/tmp/" + "a" * 300 + ".yaml"}, "SIDECAR_CONFIG_FILE"),
        ({"SIDECAR_ENV_FILE": "/tmp/" + "a" * 300}, "SIDECAR_ENV_FILE"),
        # A settings file without end: read until memory ran out (a MemoryError traceback).
        ({"SIDECAR_CONFIG_FILE": "/dev/zero"}, "larger than 4 MiB"),
        # A dotenv file that is a device was skipped without a word: the sidecar started
        # without its settings (``--env-file /dev/stdin`` on a terminal).
        ({"SIDECAR_ENV_FILE": "/dev/zero"}, "SIDECAR_ENV_FILE: /dev/zero is larger than 4 MiB"),
        # An unknown key inside a webhook entry was "unknown setting 'webhooks' in the
        # settings file (did you mean webhooks?)".
        (
            {
                "SIDECAR_WEBHOOKS": '[{"url": "http://127.0.0.1:1/", "secret": "whsec_'
                + "A" * 44
                + '", "foo": 1}]'
            },
            "SIDECAR_WEBHOOKS[0][foo]: unknown key 'foo'",
        ),
        # A file name in librdkafka's message is not a property (SIDECAR_KAFKA_NONEXISTENT_SO)
        ({"SIDECAR_KAFKA_PLUGIN_LIBRARY_PATHS": "/nonexistent"}, "SIDECAR_KAFKA_*: librdkafka"),
        # Numbers the sidecar reads itself: librdkafka took "45000x" as 45000, Python's
        # int() did not (a traceback when the member started).
        ({"SIDECAR_KAFKA_SESSION_TIMEOUT_MS": "45000x"}, "SIDECAR_KAFKA_SESSION_TIMEOUT_MS"),
        ({"SIDECAR_KAFKA_MAX_POLL_INTERVAL_MS": "3e5"}, "SIDECAR_KAFKA_MAX_POLL_INTERVAL_MS"),
        ({"SIDECAR_KAFKA_SOCKET_TIMEOUT_MS": "60000ms"}, "SIDECAR_KAFKA_SOCKET_TIMEOUT_MS"),
        # librdkafka's own refusals, found before the member thread would die of them:
        ({"SIDECAR_KAFKA_BOGUS_PROP": "1"}, "SIDECAR_KAFKA_BOGUS_PROP"),
        ({"SIDECAR_KAFKA_HEARTBEAT_INTERVAL_MS": ""}, "SIDECAR_KAFKA_HEARTBEAT_INTERVAL_MS"),
        (
            {"SIDECAR_KAFKA_SESSION_TIMEOUT_MS": "6000", "SIDECAR_GROUP_PROTOCOL": "consumer"},
            "SIDECAR_KAFKA_SESSION_TIMEOUT_MS",
        ),
    ],
)
def test_bad_settings_exit_2_with_one_clear_message(env: dict[str, str], named: str) -> None:
    done = run({**GOOD, **env}, "run")
    assert done.returncode == 2, done.stderr
    assert named in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("rebalance-sidecar: ")
    assert done.stderr.count("\n") == 1 and done.stderr.endswith("\n"), done.stderr


def test_librdkafka_message_is_part_of_the_line() -> None:
    done = run({**GOOD, "SIDECAR_KAFKA_BOGUS_PROP": "1"}, "run")
    assert done.returncode == 2
    assert 'No such configuration property: "bogus.prop"' in done.stderr


def test_a_misspelt_variable_is_named_with_the_setting_it_resembles() -> None:
    env = {k: v for k, v in GOOD.items() if k != "SIDECAR_GROUP_ID"}
    done = run({**env, "SIDECAR_GROUPID": "g"}, "run")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "missing required setting(s): SIDECAR_GROUP_ID" in line
    assert "SIDECAR_GROUPID is ignored (did you mean SIDECAR_GROUP_ID?)" in line
    # When the settings are otherwise complete the typo is a logged warning, not an error;
    # here librdkafka's refusal then stops the run.
    done = run({**GOOD, "SIDECAR_REVOKE_TIMEOUT": "5", "SIDECAR_KAFKA_BOGUS_PROP": "1"}, "run")
    assert done.returncode == 2
    warning, error = done.stderr.strip().splitlines()
    assert "SIDECAR_REVOKE_TIMEOUT is ignored (did you mean SIDECAR_REVOKE_TIMEOUT_MS?)" in warning
    assert error.startswith("rebalance-sidecar: invalid setting SIDECAR_KAFKA_BOGUS_PROP")


def test_a_temporary_dns_failure_is_not_a_settings_error() -> None:
    """EAI_AGAIN (resolver unreachable) is an outage librdkafka rides out, not a typo.

    A real resolver cannot be made to fail temporarily on demand: this one is a fake.
    """
    settings = load_settings({**GOOD, "SIDECAR_BOOTSTRAP_SERVERS": "kafka.example:9092"})
    warnings: list[tuple[str, dict[str, object]]] = []

    def unreachable(host: str, port: object) -> object:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    def nonexistent(host: str, port: object) -> object:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    check_resolvable(settings, warn=lambda m, **kw: warnings.append((m, kw)), resolve=unreachable)
    assert warnings and "kafka.example: Temporary failure" in str(warnings[0][1]["errors"])
    with pytest.raises(InvalidSettings, match="SIDECAR_BOOTSTRAP_SERVERS"):
        check_resolvable(settings, warn=lambda m, **kw: None, resolve=nonexistent)


def test_version_comes_from_the_package_metadata() -> None:
    done = run({}, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"rebalance-sidecar {version('rebalance-sidecar')}"


def test_sigterm_during_start_up_is_a_clean_exit(tmp_path: Path) -> None:
    """As PID 1 a signal without a handler is lost; elsewhere it kills (-15). Either way the
    kubelet's SIGTERM during start-up must stop the sidecar cleanly.

    The dotenv file is a FIFO, so start-up is held, deterministically, in the middle of
    reading its settings until the signal came.
    """
    fifo = tmp_path / "sidecar.env"
    os.mkfifo(fifo)
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "run"],
        env={**BASE_ENV, **GOOD, "SIDECAR_ENV_FILE": str(fifo)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        writer = _open_when_read(fifo, sidecar)
        sidecar.send_signal(signal.SIGTERM)
        _, stderr = sidecar.communicate(timeout=30)
        os.close(writer)
    finally:
        if sidecar.poll() is None:
            sidecar.kill()
            sidecar.wait()
    assert sidecar.returncode == 0, stderr
    assert "Traceback" not in stderr


def _open_when_read(fifo: Path, process: subprocess.Popen[str]) -> int:
    """Open the FIFO for writing once the process opened it for reading (ENXIO before)."""
    while process.poll() is None:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the sidecar ended before reading its settings: {process.returncode}")


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


@pytest.mark.parametrize(
    "args", [[], ["run"], ["demo"], ["settings"], ["journal", "export"], ["analytics"]]
)
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


def test_a_signal_while_the_daemon_starts_is_handed_to_it() -> None:
    """Once start-up has started threads a signal must not unwind the stack: it is kept
    and becomes the daemon's normal stop (leave the group) as soon as the daemon handles
    signals itself. A real signal to this process, through the real handler."""
    early = _EarlySignals()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        early.defer()
        os.kill(os.getpid(), signal.SIGTERM)
        stops: list[bool] = []
        early.hand_over(lambda: stops.append(True))
        assert stops == [True]
        assert early.received == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
    quiet = _EarlySignals()
    quiet.hand_over(lambda: stops.append(False))
    assert stops == [True]  # no signal, no stop


def test_the_demo_does_not_import_the_cli() -> None:
    """cli runs the demo; the demo importing cli back was a cycle (now ``demo_cluster``)."""
    tree = ast.parse((REPO / "sidecar" / "demo.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    assert "sidecar.settings" in imported  # the walk sees the imports
    assert "sidecar.cli" not in imported


def _refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal: exit 2, no traceback."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("rebalance-sidecar: "), done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_settings_write_refuses_a_file_it_cannot_use(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "x.md"
    line = _refused(run({}, "settings", "--write", str(missing)))
    assert (
        line == f"rebalance-sidecar: --write {missing}: cannot read it: No such file or directory"
    )
    line = _refused(run({}, "settings", "--write", str(tmp_path)))
    assert f"--write {tmp_path}: cannot read it: Is a directory" in line
    latin1 = tmp_path / "latin1.md"
    latin1.write_bytes("caf\xe9 <!-- settings-table:start -->".encode("latin-1"))
    line = _refused(run({}, "settings", "--write", str(latin1)))
    assert f"--write {latin1}: not UTF-8 text" in line
    assert latin1.read_bytes() == "caf\xe9 <!-- settings-table:start -->".encode("latin-1")
    plain = tmp_path / "plain.md"
    plain.write_text("no markers here\n")
    line = _refused(run({}, "settings", "--write", str(plain)))
    assert f"--write {plain}: no settings table markers" in line  # which file, of several


def test_settings_write_changes_no_file_when_one_is_refused(tmp_path: Path) -> None:
    readme = tmp_path / "settings.md"
    stale = (
        (REPO / "docs" / "settings.md")
        .read_text()
        .replace("| `SIDECAR_GROUP_ID`", "| `SIDECAR_GONE`")
    )
    assert "`SIDECAR_GONE`" in stale
    readme.write_text(stale)
    done = run({}, "settings", "--write", str(readme), "--write", str(tmp_path / "missing.md"))
    _refused(done)
    assert readme.read_text() == stale
    done = run({}, "settings", "--write", str(readme))
    assert done.returncode == 0, done.stderr
    assert "`SIDECAR_GONE`" not in readme.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.md"]  # no temp left


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "99999"], "argument --port: must be between 0 and 65535"),
        (["--port", "-1"], "argument --port: must be between 0 and 65535"),
        (["--port", "http"], "argument --port: not a whole number"),
        (["--peers", "-1"], "argument --peers: must be between 0 and 64"),
        # unbounded, it started peer consumers until threads ran out (tracebacks)
        (["--peers", "99999999999999999999999"], "argument --peers: must be between 0 and 64"),
    ],
)
def test_demo_refuses_a_bad_argument_before_starting(args: list[str], said: str) -> None:
    line = _refused(run({}, "demo", *args))
    assert line.startswith("rebalance-sidecar: demo: ")
    assert said in line


@pytest.mark.parametrize(
    "args", [["run", "--bogus"], ["journal"], ["journal", "export"], ["no-such-command"]]
)
def test_a_usage_error_is_one_line(args: list[str]) -> None:
    _refused(run({}, *args))
