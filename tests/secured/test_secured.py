"""The sidecar against a secured broker: SCRAM over SASL_SSL, mutual TLS, OAUTHBEARER
(OIDC client credentials), secrets from files; refused credentials exit 78 within a minute;
renewed certificate files drain and exit 75; no secret is ever shown."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.kafka import unique
from tests.support.secured import CLIENT_SECRET, SecuredBroker, copy_files
from tests.support.sidecars import COMMAND, REPO, Sidecar, wait_until

pytestmark = pytest.mark.kafka

EXIT_ROTATED = 75
EXIT_CREDENTIALS = 78
API_TOKEN = "api-token-3b5d7f9a1c2e4f60"


def outputs(sidecar: Sidecar) -> dict[str, str]:
    """Every output of a run but the log (read at the end): pages, API, metrics, journal."""
    found = {}
    for path in ("/", "/assignment", "/group", "/metrics", "/webhooks", "/openapi.json"):
        response = sidecar.client.get(path, headers=sidecar.headers())
        found[path] = response.text
    return found


def journal_bytes(sidecar: Sidecar) -> str:
    return "".join(
        p.read_bytes().decode("latin-1")
        for p in sidecar.data_dir.iterdir()
        if p.name.startswith("journal.sqlite3")
    )


def command(args: list[str], env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    done = subprocess.run(
        [*COMMAND[:-1], *args],  # COMMAND ends with "run"
        env={**clean, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    return f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def assert_never_shown(texts: dict[str, str], secrets: list[str]) -> None:
    assert all(len(s) >= 8 for s in secrets)
    for where, text in texts.items():
        for secret in secrets:
            assert secret not in text, f"{secret[:4]}... shows in {where}"


def test_scram_over_sasl_ssl_with_secrets_from_files_shows_no_secret(
    secured_broker: SecuredBroker, secured_sidecar: Callable[..., Sidecar], tmp_path: Path
) -> None:
    """Joins over SASL_SSL/SCRAM-SHA-512, the password and the API token and the webhook
    secrets read from files; then every output of the run, librdkafka's debug log included,
    is searched for the secrets and the private key."""
    token_file = tmp_path / "api-token"
    token_file.write_text(API_TOKEN + "\n")
    webhook_secret = "whsec_" + "c2VjcmV0LXdlYmhvb2sta2V5LTMyLWJ5dGVzLWxvbmc="
    webhooks_file = tmp_path / "webhooks.json"
    webhooks_file.write_text(
        f'[{{"url": "http://127.0.0.1:9/hook", "secret": "{webhook_secret}", "mode": "async"}}]'
    )
    env = {
        **secured_broker.scram(),
        "SIDECAR_API_TOKEN_FILE": str(token_file),
        "SIDECAR_WEBHOOKS_FILE": str(webhooks_file),
        "SIDECAR_LOG_LEVEL": "debug",
        "SIDECAR_KAFKA_DEBUG": "security,broker,protocol,cgrp",
    }
    topic = secured_broker.topic()
    sidecar = secured_sidecar(unique("scram"), topic, env)
    sidecar.token = API_TOKEN
    assert sidecar.wait_stable()["partitions"]
    shown = outputs(sidecar)
    assert sidecar.client.post("/enforce-rebalance", headers=sidecar.headers()).is_success
    shown["journal"] = journal_bytes(sidecar)
    wrong = {**env, "SIDECAR_KAFKA_SASL_PASSWORD": secured_broker.password}
    shown["both set"] = command(["run"], wrong)
    assert "are both set" in shown["both set"]
    shown["settings"] = command(["settings"], env)
    shown["--help"] = command(["--help"], env) + command(["run", "--help"], env)
    sidecar.stop()
    shown["log"] = sidecar.log_path.read_text()
    assert "SASL" in shown["log"]  # librdkafka's debug lines are in it
    secrets = [
        secured_broker.password,
        API_TOKEN,
        secured_broker.key_password,
        *secured_broker.key_material(),
    ]
    assert_never_shown(shown, secrets)
    # The journal keeps the webhooks' secrets (it signs with them after a restart): only
    # there, never in an output.
    del shown["journal"]
    assert_never_shown(shown, [webhook_secret, webhook_secret.removeprefix("whsec_")])


def test_mutual_tls_with_the_key_password_from_a_file(
    secured_broker: SecuredBroker, secured_sidecar: Callable[..., Sidecar]
) -> None:
    sidecar = secured_sidecar(unique("mtls"), secured_broker.topic(), secured_broker.mtls())
    assert sidecar.wait_stable()["partitions"]
    shown = outputs(sidecar)
    sidecar.stop()
    shown["log"] = sidecar.log_path.read_text()
    assert_never_shown(shown, [secured_broker.key_password, *secured_broker.key_material()])


def test_oauthbearer_oidc_client_credentials_with_the_secret_from_a_file(
    secured_broker: SecuredBroker, secured_sidecar: Callable[..., Sidecar]
) -> None:
    """librdkafka fetches a token from the local issuer; the broker validates it with
    Kafka's OAuthBearerValidatorCallbackHandler against the issuer's JWKS."""
    issued = secured_broker.issuer.tokens_issued
    env = {
        **secured_broker.oauthbearer(),
        "SIDECAR_LOG_LEVEL": "debug",
        "SIDECAR_KAFKA_DEBUG": "security,broker,protocol",  # librdkafka's token requests
    }
    sidecar = secured_sidecar(unique("oauth"), secured_broker.topic(), env)
    assert sidecar.wait_stable()["partitions"]
    assert secured_broker.issuer.tokens_issued > issued
    shown = outputs(sidecar)
    sidecar.stop()
    shown["log"] = sidecar.log_path.read_text()
    assert "OAUTHBEARER" in shown["log"]
    assert_never_shown(shown, [CLIENT_SECRET])


def test_refused_credentials_fail_startupz_and_exit_78_with_one_line(
    secured_broker: SecuredBroker, tmp_path: Path
) -> None:
    """A wrong password, a CA that does not verify the broker, an expired client
    certificate: each a line naming the settings, /startupz 503, exit 78 within a minute,
    no log flood. The three run side by side."""
    wrong_password = tmp_path / "wrong.password"
    wrong_password.write_text("not-the-password-1a2b3c")
    other_ca = tmp_path / "other-ca"
    subprocess.run(
        [str(REPO / "deploy/local/secured-certs.sh"), "ca", str(other_ca), "other"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    certificate, key = secured_broker.client_certificate(unique("expired"), -2)
    cases = {
        "wrong password": (
            {**secured_broker.scram(), "SIDECAR_KAFKA_SASL_PASSWORD_FILE": str(wrong_password)},
            "SIDECAR_KAFKA_SASL_PASSWORD",
        ),
        "unknown CA": (
            {**secured_broker.mtls(), "SIDECAR_KAFKA_SSL_CA_LOCATION": str(other_ca / "other.crt")},
            "SIDECAR_KAFKA_SSL_CA_LOCATION",
        ),
        "expired certificate": (
            secured_broker.mtls(certificate, key),
            "SIDECAR_KAFKA_SSL_CERTIFICATE_LOCATION",
        ),
    }
    topic = secured_broker.topic()
    sidecars = {
        case: Sidecar(
            env["SIDECAR_BOOTSTRAP_SERVERS"],
            unique("refused"),
            topic,
            tmp_path / case.replace(" ", "-"),
            name=case.replace(" ", "-"),
            extra_env=env,
        )
        for case, (env, _) in cases.items()
    }
    # Started together, not one after another: each lives only ~30 s past its first
    # refusal, and a slow start of the next must not eat the previous one's window.
    with ThreadPoolExecutor(len(sidecars)) as starting:
        list(starting.map(Sidecar.start, sidecars.values()))
    try:
        failing: set[str] = set()

        def all_refused() -> bool:
            """Each seen failing once: all are polled together, as each lives only ~30 s
            past its first refusal."""
            for case, sidecar in sidecars.items():
                try:
                    probe = sidecar.client.get("/startupz", timeout=5)
                except httpx.TransportError:
                    continue
                if probe.status_code == 503 and cases[case][1] in probe.text:
                    failing.add(case)
            return failing == set(cases)

        wait_until(all_refused, 40, "/startupz failing, naming the setting, for each case")
        for case, sidecar in sidecars.items():
            assert sidecar.process is not None
            code = sidecar.process.wait(timeout=90)  # the bound: a minute and then some
            log = sidecar.log_path.read_text()
            assert code == EXIT_CREDENTIALS, f"{case}: exit {code}\n{log[-3000:]}"
            verdict = [line for line in log.splitlines() if "exiting with 78" in line]
            assert len(verdict) == 1, f"{case}\n{log[-3000:]}"
            assert cases[case][1] in verdict[0]
            assert len(log.splitlines()) < 80, f"{case}: a log flood\n{log[-3000:]}"
            assert secured_broker.password not in log
            assert wrong_password.read_text() not in log  # a refused secret is one too
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()


def test_a_renewed_client_certificate_drains_and_restarts_with_75(
    secured_broker: SecuredBroker, secured_sidecar: Callable[..., Sidecar], tmp_path: Path
) -> None:
    """The mounted certificate and key are replaced during a run (Strimzi renews them):
    the member leaves the group (revoked), says why, exits 75; started again on the same
    files it joins with the new certificate."""
    mounted = tmp_path / "mounted"
    certificate, key = copy_files(
        [secured_broker.certs / "client.crt", secured_broker.certs / "client.key"], mounted
    )
    env = secured_broker.mtls(certificate, key)
    group, topic = unique("rotate"), secured_broker.topic()
    sidecar = secured_sidecar(group, topic, env, name="before")
    assert sidecar.wait_stable()["partitions"]
    renewed = secured_broker.client_certificate(unique("renewed"), 30)
    for new, old in zip(renewed, (certificate, key), strict=True):
        staged = old.with_suffix(".new")
        staged.write_bytes(new.read_bytes())
        staged.replace(old)  # an atomic swap, as the kubelet does
    assert sidecar.process is not None
    code = sidecar.process.wait(timeout=90)
    log = sidecar.log_path.read_text()
    assert code == EXIT_ROTATED, log[-3000:]
    assert "SIDECAR_KAFKA_SSL_CERTIFICATE_LOCATION" in log
    assert "restarting to load them" in log
    assert "partitions revoked" in log  # drained: the application was told
    again = secured_sidecar(group, topic, env, name="after", data_dir=sidecar.data_dir)
    assert again.wait_stable()["partitions"]
