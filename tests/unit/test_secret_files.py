"""SIDECAR_<X>_FILE (sidecar.secret_files), refused credentials (sidecar.credentials) and
renewed TLS files (sidecar.rotation): the pure parts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from sidecar.credentials import Refusals, classify
from sidecar.logs import RepeatedLines
from sidecar.rotation import changed, fingerprint, watched_files
from sidecar.secret_files import SecretFileError, is_secret_variable, resolve
from sidecar.settings import InvalidSettings, Settings
from sidecar.settings_sources import load_settings, with_secret_files

SCRAM = {"sasl.mechanism": "SCRAM-SHA-512"}


def test_a_secret_file_becomes_the_setting(tmp_path: Path) -> None:
    (tmp_path / "password").write_text("s3cret-value\n")
    (tmp_path / "token").write_text("tok-0123456789abcdef")
    environ = {
        "SIDECAR_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "password"),
        "SIDECAR_API_TOKEN_FILE": str(tmp_path / "token"),
        "SIDECAR_CONFIG_FILE": "",  # a setting of its own, not the convention
        "OTHER_FILE": "x",
    }
    resolved = resolve(environ)
    assert resolved["SIDECAR_KAFKA_SASL_PASSWORD"] == "s3cret-value"  # one line break less
    assert resolved["SIDECAR_API_TOKEN"] == "tok-0123456789abcdef"
    assert "SIDECAR_KAFKA_SASL_PASSWORD_FILE" not in resolved
    assert resolved["OTHER_FILE"] == "x"
    settings = load_settings(
        {**with_secret_files(environ), "SIDECAR_BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    )
    assert settings.kafka["sasl.password"] == "s3cret-value"
    assert settings.api_token is not None
    assert settings.api_token.get_secret_value() == "tok-0123456789abcdef"


@pytest.mark.parametrize(
    ("variable", "secret"),
    [
        ("SIDECAR_KAFKA_SASL_PASSWORD", True),
        ("SIDECAR_KAFKA_SSL_KEY_PASSWORD", True),
        ("SIDECAR_KAFKA_SSL_KEYSTORE_PASSWORD", True),
        ("SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET", True),
        ("SIDECAR_KAFKA_SSL_KEY_PEM", True),
        ("SIDECAR_WEBHOOKS", True),
        ("SIDECAR_DRAIN_TOKEN", True),
        ("SIDECAR_KAFKA_SASL_USERNAME", False),
        ("SIDECAR_GROUP_ID", False),
    ],
)
def test_which_settings_are_secrets(variable: str, secret: bool) -> None:
    assert is_secret_variable(variable) is secret


def test_every_secret_setting_may_come_from_a_file() -> None:
    """Each setting that holds a secret (``SecretStr``) takes the ``_FILE`` convention: the
    chart mounts every secret as a file."""
    secrets = [
        f"SIDECAR_{name.upper()}"
        for name, field in Settings.model_fields.items()
        if "SecretStr" in str(field.annotation)
    ]
    assert "SIDECAR_WEBHOOK_TLS_KEY_PASSWORD" in secrets
    assert [v for v in secrets if not is_secret_variable(v)] == []


def test_both_set_is_one_line_naming_both(tmp_path: Path) -> None:
    (tmp_path / "p").write_text("from-the-file")
    with pytest.raises(InvalidSettings) as refused:
        with_secret_files(
            {
                "SIDECAR_KAFKA_SASL_PASSWORD": "from-the-env",
                "SIDECAR_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "p"),
            }
        )
    message = str(refused.value)
    assert "SIDECAR_KAFKA_SASL_PASSWORD and SIDECAR_KAFKA_SASL_PASSWORD_FILE" in message
    assert "from-the" not in message and "\n" not in message


@pytest.mark.parametrize("what", ["missing", "directory", "empty", "not text"])
def test_an_unusable_file_names_the_variable(tmp_path: Path, what: str) -> None:
    path = tmp_path / "secret"
    if what == "directory":
        path.mkdir()
    elif what == "empty":
        path.write_text("\n")
    elif what == "not text":
        path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SecretFileError, match=r"^SIDECAR_KAFKA_SASL_PASSWORD_FILE: "):
        resolve({"SIDECAR_KAFKA_SASL_PASSWORD_FILE": str(path)})


def test_a_file_for_a_setting_that_is_no_secret_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SecretFileError, match=r"SIDECAR_GROUP_ID_FILE: .* not a secret"):
        resolve({"SIDECAR_GROUP_ID_FILE": str(tmp_path)})


def test_refusals_are_classified_with_the_settings_they_concern() -> None:
    sasl = classify(
        KafkaError._AUTHENTICATION,
        "SASL authentication error: Authentication failed during authentication due to "
        "invalid credentials with SASL mechanism SCRAM-SHA-512",
        SCRAM,
    )
    assert sasl is not None and "SIDECAR_KAFKA_SASL_PASSWORD" in sasl
    token = classify(
        KafkaError._AUTHENTICATION,
        'Failed to acquire SASL OAUTHBEARER token: {"error": "invalid_client"}',
        {"sasl.mechanism": "OAUTHBEARER"},
    )
    assert token is not None and "SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET" in token
    ca = classify(
        KafkaError._SSL,
        "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed",
        {},
    )
    assert ca is not None and "SIDECAR_KAFKA_SSL_CA_LOCATION" in ca
    expired = classify(
        KafkaError._TRANSPORT,
        "Receive failed: error:0A000416:SSL routines::ssl/tls alert certificate unknown",
        {},
    )
    assert expired is not None and "SIDECAR_KAFKA_SSL_CERTIFICATE_LOCATION" in expired
    assert classify(KafkaError._TRANSPORT, "Connection refused", {}) is None
    assert classify(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down", {}) is None
    oauth = classify(
        KafkaError._AUTHENTICATION, "SASL authentication error", {"sasl.mechanisms": "OAUTHBEARER"}
    )
    assert oauth is not None and "SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET" in oauth


def test_a_verdict_only_after_refusals_lasted_long_enough() -> None:
    refusals = Refusals()
    error = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: failed")
    assert refusals.verdict(0.0) is None
    refusals.observe(error, SCRAM, now=100.0)
    assert refusals.reason is not None and refusals.since == 100.0
    assert refusals.verdict(101.0, after=30) is None
    for at in (108.0, 118.0, 128.0):  # librdkafka tries again, refused each time
        refusals.observe(error, SCRAM, now=at)
    assert refusals.since == 100.0
    assert refusals.verdict(130.0, after=30) == refusals.reason
    refusals.clear()
    assert refusals.verdict(1e12, after=30) is None


def test_one_early_refusal_then_quiet_is_no_verdict() -> None:
    """A refusal at start (a SCRAM user not yet created), then a long join with working
    credentials: no exit. A later run of refusals counts from its own start."""
    refusals = Refusals()
    error = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: failed")
    refusals.observe(error, SCRAM, now=100.0)
    assert refusals.verdict(131.0, after=30) is None  # nothing refused for 31 s
    refusals.observe(error, SCRAM, now=200.0)
    assert refusals.since == 200.0
    assert refusals.verdict(201.0, after=30) is None


def test_repeated_librdkafka_lines_collapse() -> None:
    collapse = RepeatedLines(window=3600)

    def record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
        return logging.LogRecord("librdkafka.member", level, __file__, 1, message, None, None)

    shown = [
        collapse.filter(record(f"FAIL [rdkafka#consumer-1] refused (after {ms}ms in state AUTH)"))
        for ms in (3, 14, 250, 7)
    ]
    assert shown == [True, False, False, False]
    assert collapse.filter(record("another message"))
    assert collapse.filter(record("debug 1", logging.DEBUG))
    assert collapse.filter(record("debug 1", logging.DEBUG))


def test_renewed_files_are_seen_by_content(tmp_path: Path) -> None:
    certificate, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    certificate.write_text("one")
    key.write_text("key")
    files = watched_files(
        {"ssl.certificate.location": str(certificate), "ssl.key.location": str(key)},
        {"SIDECAR_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "password")},
    )
    assert set(files) == {
        "SIDECAR_KAFKA_SSL_CERTIFICATE_LOCATION",
        "SIDECAR_KAFKA_SSL_KEY_LOCATION",
        "SIDECAR_KAFKA_SASL_PASSWORD_FILE",
    }
    known = {variable: fingerprint(path) for variable, path in files.items()}
    assert changed(files, known) == {}
    certificate.write_text("two")
    assert set(changed(files, known)) == {"SIDECAR_KAFKA_SSL_CERTIFICATE_LOCATION"}
