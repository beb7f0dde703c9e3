"""``SIDECAR_<X>_FILE`` refusals through the real command: one line, exit 2, no secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.security import Run

SECRET = "pw-from-a-file-4d5e6f7a8b"


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_a_secret_both_in_the_environment_and_in_a_file_is_refused(
    run_command: Run, tmp_path: Path
) -> None:
    (tmp_path / "password").write_text(SECRET)
    done = run_command(
        {
            "SIDECAR_KAFKA_SASL_PASSWORD": SECRET,
            "SIDECAR_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "password"),
        }
    )
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "SIDECAR_KAFKA_SASL_PASSWORD and SIDECAR_KAFKA_SASL_PASSWORD_FILE" in line
    assert SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize("what", ["missing", "unreadable directory"])
def test_an_unreadable_secret_file_is_refused_naming_the_variable(
    run_command: Run, tmp_path: Path, what: str
) -> None:
    path = tmp_path / "client-secret"
    if what == "unreadable directory":
        path.mkdir()
    done = run_command({"SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE": str(path)})
    assert done.returncode == 2
    assert one_line(done.stderr).startswith(
        "rebalance-sidecar: SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE: "
    )


def test_a_secret_from_a_file_reaches_librdkafka(run_command: Run, tmp_path: Path) -> None:
    """The file's content becomes the property's value and librdkafka judges the whole
    configuration: a key that does not exist is refused naming the property, never showing
    the key password read from the file."""
    (tmp_path / "key-password").write_text(SECRET + "\n")
    done = run_command(
        {
            "SIDECAR_KAFKA_SECURITY_PROTOCOL": "SSL",
            "SIDECAR_KAFKA_SSL_KEY_LOCATION": str(tmp_path / "no-such.key"),
            "SIDECAR_KAFKA_SSL_KEY_PASSWORD_FILE": str(tmp_path / "key-password"),
        }
    )
    assert done.returncode == 2
    assert "ssl.key.location" in one_line(done.stderr)
    assert SECRET not in done.stdout + done.stderr
