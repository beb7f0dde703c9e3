"""Webhooks over HTTPS with a private CA and mutual TLS (``SIDECAR_WEBHOOK_TLS_*``): the
daemon's own wiring (``build_components``, a real SQLite journal) delivering to a real
HTTPS receiver on 127.0.0.1, with certificates made by openssl in the test; and the
start-up check of the files through the CLI."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sidecar.components import Components, build_components
from sidecar.delivery import RetryPolicy
from sidecar.errors import StartupError
from sidecar.model import EventType, PartitionOffset, TopicPartition
from sidecar.settings import InvalidSettings, Settings
from sidecar.subscriptions import new_secret
from sidecar.testkit.events import draft
from sidecar.webhook_tls import TLSFiles, build_context
from tests.support.receiver import Receiver, running
from tests.support.tls import Authority, authority

FAST = RetryPolicy(initial=0.05, maximum=0.2, max_attempts=0, max_age=300)
PATIENCE = 60.0  # seconds: the CI machine is loaded


def settings(data_dir: Path, **tls: Any) -> Settings:
    return Settings(
        bootstrap_servers="127.0.0.1:9", group_id="g", topics=("t",), data_dir=data_dir, **tls
    )


def deliver_one(parts: Components, receiver: Receiver) -> Callable[[], Coroutine[Any, Any, str]]:
    """Register ``receiver`` and journal one event; the returned coroutine function waits
    for it to arrive and gives the subscription id."""

    async def delivered() -> str:
        sub = parts.registry.create(
            url=receiver.url, events=None, mode="async", secret=receiver.secret, timeout_ms=5000
        )
        event = parts.journal.append(
            draft(
                EventType.ASSIGNED,
                (PartitionOffset("t", 0, 5),),
                assignment=(TopicPartition("t", 0),),
            )
        )
        parts.dispatcher.announced(event)
        await until(lambda: len(receiver.events()) == 1)
        return sub.id

    return delivered


async def until(check: Callable[[], bool], timeout: float = PATIENCE) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def run(config: Settings, scenario: Callable[[Components], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        parts = build_components(config, retry=FAST)
        parts.start()
        try:
            await scenario(parts)
        finally:
            await parts.close()

    asyncio.run(main())


@pytest.fixture(scope="module")
def cas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Authority]:
    directory = tmp_path_factory.mktemp("cas")
    return {name: authority(directory, name) for name in ("private", "clients", "stranger")}


def test_a_server_of_the_private_ca_is_trusted(cas: dict[str, Authority], tmp_path: Path) -> None:
    secret = new_secret()
    config = settings(tmp_path, webhook_tls_ca_location=cas["private"].cert)

    async def scenario(parts: Components) -> None:
        with running(secret, tls=cas["private"].server_context()) as receiver:
            await deliver_one(parts, receiver)()
            assert receiver.peer_certificates == [None]  # no client certificate asked, none sent

    run(config, scenario)


def test_mutual_tls_sends_the_client_certificate_the_receiver_requires(
    cas: dict[str, Authority], tmp_path: Path
) -> None:
    secret = new_secret()
    cert, key = cas["clients"].issue("sidecar", server=False, password="s3cret-pass")
    config = settings(
        tmp_path,
        webhook_tls_ca_location=cas["private"].cert,
        webhook_tls_certificate_location=cert,
        webhook_tls_key_location=key,
        webhook_tls_key_password="s3cret-pass",
    )
    served = cas["private"].server_context(client_ca=cas["clients"])

    async def scenario(parts: Components) -> None:
        with running(secret, tls=served) as receiver:
            await deliver_one(parts, receiver)()
            (peer,) = receiver.peer_certificates
            assert dict(field[0] for field in peer["subject"]) == {"commonName": "sidecar"}

    run(config, scenario)


def test_without_a_client_certificate_a_receiver_requiring_one_gets_nothing(
    cas: dict[str, Authority], tmp_path: Path
) -> None:
    secret = new_secret()
    config = settings(tmp_path, webhook_tls_ca_location=cas["private"].cert)
    served = cas["private"].server_context(client_ca=cas["clients"])

    async def scenario(parts: Components) -> None:
        with running(secret, tls=served) as receiver, capture_logs() as logs:
            sub = parts.registry.create(
                url=receiver.url, events=None, mode="async", secret=secret, timeout_ms=5000
            )
            parts.dispatcher.announced(parts.journal.append(draft()))
            await until(lambda: len(parts.journal.deliveries(sub.id, 10)) >= 2)
            assert receiver.events() == []
            failed = [e for e in logs if e["event"] == "webhook delivery failed, retrying"]
            assert failed and all("exc_info" not in e for e in logs)

    run(config, scenario)


def test_an_unknown_ca_is_refused_retried_logged_without_traceback_then_reloaded(
    cas: dict[str, Authority], tmp_path: Path
) -> None:
    """The receiver's CA is not the one configured: every attempt fails at the handshake,
    is retried and logged in one line. Then the mounted CA file is replaced (as a Secret
    volume swaps it): the next connection reads it and the event arrives."""
    secret = new_secret()
    mounted = tmp_path / "ca.crt"
    shutil.copy(cas["stranger"].cert, mounted)
    config = settings(tmp_path / "data", webhook_tls_ca_location=mounted)

    async def scenario(parts: Components) -> None:
        with running(secret, tls=cas["private"].server_context()) as receiver:
            with capture_logs() as logs:
                sub = parts.registry.create(
                    url=receiver.url, events=None, mode="async", secret=secret, timeout_ms=5000
                )
                parts.dispatcher.announced(parts.journal.append(draft()))
                await until(lambda: len(parts.journal.deliveries(sub.id, 10)) >= 3)
            assert receiver.events() == []
            failed = [e for e in logs if e["event"] == "webhook delivery failed, retrying"]
            assert len(failed) >= 3
            assert all("CERTIFICATE_VERIFY_FAILED" in e["error"] for e in failed)
            assert all("\n" not in e["error"] for e in failed)
            assert all("exc_info" not in e and e["log_level"] != "error" for e in logs)
            records = parts.journal.deliveries(sub.id, 10)
            assert {d.outcome for d in records} == {"failed"}
            assert all(d.error and d.error.startswith("TLSError") for d in records)

            replacement = tmp_path / "ca.crt.new"
            shutil.copy(cas["private"].cert, replacement)
            with capture_logs() as logs:
                os.replace(replacement, mounted)
                await until(lambda: len(receiver.events()) == 1)
            assert any(e["event"] == "webhook TLS files changed; reloaded them" for e in logs)

    run(config, scenario)


def test_a_half_rotated_pair_keeps_the_previous_context(
    cas: dict[str, Authority], tmp_path: Path
) -> None:
    """A renewal caught between its two files (the new certificate, the old key): the
    previous context stays, one warning says why, and the complete pair is taken."""
    secret = new_secret()
    first_cert, first_key = cas["clients"].issue("first", server=False)
    second_cert, second_key = cas["clients"].issue("second", server=False)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(first_cert, cert)
    shutil.copy(first_key, key)
    config = settings(
        tmp_path / "data",
        webhook_tls_ca_location=cas["private"].cert,
        webhook_tls_certificate_location=cert,
        webhook_tls_key_location=key,
    )
    served = cas["private"].server_context(client_ca=cas["clients"])

    def names(receiver: Receiver) -> list[str]:
        return [dict(f[0] for f in p["subject"])["commonName"] for p in receiver.peer_certificates]

    async def scenario(parts: Components) -> None:
        with running(secret, tls=served) as receiver:
            parts.registry.create(
                url=receiver.url, events=None, mode="async", secret=secret, timeout_ms=5000
            )

            async def post() -> None:
                # The receiver answers in HTTP/1.0 and closes: every POST connects anew.
                count = len(receiver.events())
                parts.dispatcher.announced(parts.journal.append(draft()))
                await until(lambda: len(receiver.events()) == count + 1)

            await post()
            with capture_logs() as logs:
                shutil.copy(second_cert, tmp_path / "staged.crt")
                os.replace(tmp_path / "staged.crt", cert)
                await post()
            assert names(receiver) == ["first", "first"]
            (warning,) = [e for e in logs if e["log_level"] == "warning"]
            assert "does not belong" in warning["error"]
            shutil.copy(second_key, tmp_path / "staged.key")
            os.replace(tmp_path / "staged.key", key)
            await post()
            assert names(receiver) == ["first", "first", "second"]

    run(config, scenario)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"ca": "missing.crt"}, "SIDECAR_WEBHOOK_TLS_CA_LOCATION={d}/missing.crt: No such file"),
        ({"ca": "junk"}, "SIDECAR_WEBHOOK_TLS_CA_LOCATION={d}/junk: not a PEM CA certificate"),
        ({"ca": "ca", "key": "key"}, "SIDECAR_WEBHOOK_TLS_KEY_LOCATION is set without"),
        (
            {"certificate": "junk"},
            "SIDECAR_WEBHOOK_TLS_CERTIFICATE_LOCATION={d}/junk: no PEM certificate",
        ),
        (
            {"certificate": "cert"},
            "SIDECAR_WEBHOOK_TLS_CERTIFICATE_LOCATION={d}/cert (no SIDECAR_WEBHOOK_TLS_KEY_"
            "LOCATION): no PEM private key",
        ),
        ({"certificate": "cert", "key": "other.key"}, "does not belong to"),
        ({"certificate": "cert", "key": "enc.key"}, "the key is encrypted; set SIDECAR_WEBHOOK"),
        (
            {"certificate": "cert", "key": "enc.key", "password": "wrong-one"},
            "SIDECAR_WEBHOOK_TLS_KEY_LOCATION={d}/enc.key: cannot decrypt the key with "
            "SIDECAR_WEBHOOK_TLS_KEY_PASSWORD",
        ),
        ({"password": "x"}, "SIDECAR_WEBHOOK_TLS_KEY_PASSWORD is set without"),
    ],
)
def test_files_that_cannot_be_used_are_one_line_naming_the_setting(
    cas: dict[str, Authority], tmp_path: Path, files: dict[str, str], message: str
) -> None:
    ca = cas["clients"]
    cert, key = ca.issue("c", server=False)
    _, other = ca.issue("other", server=False)
    _, encrypted = ca.issue("e", server=False, password="right-one")
    given = {
        "ca": tmp_path / "ca",
        "cert": tmp_path / "cert",
        "key": tmp_path / "key",
        "other.key": tmp_path / "other.key",
        "enc.key": tmp_path / "enc.key",
        "junk": tmp_path / "junk",
    }
    shutil.copy(ca.cert, given["ca"])
    shutil.copy(cert, given["cert"])
    shutil.copy(key, given["key"])
    shutil.copy(other, given["other.key"])
    shutil.copy(encrypted, given["enc.key"])
    given["junk"].write_text("not a certificate\n")

    def path(name: str | None) -> Path | None:
        return None if name is None else given.get(name, tmp_path / name)

    tls = TLSFiles(
        ca=path(files.get("ca")),
        certificate=path(files.get("certificate")),
        key=path(files.get("key")),
        password=files.get("password"),
    )
    with pytest.raises(InvalidSettings) as raised:
        build_context(tls)
    text = str(raised.value)
    assert message.format(d=tmp_path) in text
    assert "\n" not in text and "wrong-one" not in text and "right-one" not in text
    # The daemon's builder says the same, as a start-up error (exit 2 in the CLI).
    config = settings(
        tmp_path / "data",
        webhook_tls_ca_location=tls.ca,
        webhook_tls_certificate_location=tls.certificate,
        webhook_tls_key_location=tls.key,
        webhook_tls_key_password=tls.password,
    )

    async def build() -> None:
        build_components(config)

    with pytest.raises(StartupError, match="SIDECAR_WEBHOOK_TLS_"):
        asyncio.run(build())
    assert not (tmp_path / "data").exists()  # refused before the journal was made


def test_the_cli_exits_2_with_one_line_naming_the_setting(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "ca.crt"
    env = {
        **os.environ,
        "SIDECAR_BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "SIDECAR_GROUP_ID": "g",
        "SIDECAR_TOPICS": "t",
        "SIDECAR_DATA_DIR": str(tmp_path / "data"),
        "SIDECAR_API_PORT": "0",
        "SIDECAR_ADMIN_PORT": "-1",
        "SIDECAR_WEBHOOK_TLS_CA_LOCATION": str(missing),
        "SIDECAR_WEBHOOK_TLS_CERTIFICATE_LOCATION": str(tmp_path / "tls.crt"),
        "SIDECAR_WEBHOOK_TLS_KEY_PASSWORD": "never-shown-pw",
    }
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"SIDECAR_WEBHOOK_TLS_CA_LOCATION={missing}: No such file" in lines[0]
    assert "Traceback" not in done.stderr and "never-shown-pw" not in done.stderr + done.stdout
