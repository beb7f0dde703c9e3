"""A private secured broker (SASL_SSL/SCRAM, mutual TLS, OAUTHBEARER), once per session.

Never the shared broker: ``deploy/local/kafka.sh`` with ``KAFKA_SECURITY=secured`` on
ports of its own and a data directory of its own, validating OAUTHBEARER tokens against
the JWKS of a local token issuer (``tests.support.token_issuer``). The secrets the
sidecars use are written to files, as a Kubernetes Secret volume holds them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.kafka import create_topic
from tests.support.sidecars import REPO, Sidecar, free_port
from tests.support.token_issuer import TokenIssuer

KAFKA_SH = REPO / "deploy" / "local" / "kafka.sh"
CERTS_SH = REPO / "deploy" / "local" / "secured-certs.sh"
CLIENT_ID = "sidecar-oidc"
CLIENT_SECRET = "oidc-client-secret-7c1d9e2f4a6b8c0d"


@dataclass(frozen=True)
class SecuredBroker:
    port: int  # PLAINTEXT (topics are made there); +2 SASL_SSL, +3 SSL, +4 OAUTHBEARER
    certs: Path  # the broker's secured directory (CA, client certificates, passwords)
    issuer: TokenIssuer
    secrets: Path  # the secrets as files, as a Secret volume mounts them

    @property
    def plaintext(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def password(self) -> str:
        return (self.certs / "sidecar.password").read_text().strip()

    @property
    def key_password(self) -> str:
        return (self.certs / "client.key.password").read_text().strip()

    def key_material(self, name: str = "client") -> list[str]:
        """Lines of the private key's PEM body: none may show anywhere."""
        lines = (self.certs / f"{name}.key").read_text().splitlines()
        return [line for line in lines if line and not line.startswith("-----")][1:4]

    def client_certificate(self, name: str, days: int) -> tuple[Path, Path]:
        """A new client certificate signed by the broker's CA (days < 0: expired)."""
        subprocess.run(
            [str(CERTS_SH), "client", str(self.certs), name, str(days)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        return self.certs / f"{name}.crt", self.certs / f"{name}.key"

    def topic(self, partitions: int = 2) -> str:
        return create_topic(self.plaintext, partitions)

    # -- the settings of each way in -----------------------------------------------------

    def scram(self) -> dict[str, str]:
        return {
            "SIDECAR_BOOTSTRAP_SERVERS": f"127.0.0.1:{self.port + 2}",
            "SIDECAR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "SIDECAR_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "SIDECAR_KAFKA_SASL_USERNAME": "sidecar",
            "SIDECAR_KAFKA_SASL_PASSWORD_FILE": str(self.secrets / "password"),
            "SIDECAR_KAFKA_SSL_CA_LOCATION": str(self.certs / "ca.crt"),
        }

    def mtls(self, certificate: Path | None = None, key: Path | None = None) -> dict[str, str]:
        return {
            "SIDECAR_BOOTSTRAP_SERVERS": f"127.0.0.1:{self.port + 3}",
            "SIDECAR_KAFKA_SECURITY_PROTOCOL": "SSL",
            "SIDECAR_KAFKA_SSL_CA_LOCATION": str(self.certs / "ca.crt"),
            "SIDECAR_KAFKA_SSL_CERTIFICATE_LOCATION": str(certificate or self.certs / "client.crt"),
            "SIDECAR_KAFKA_SSL_KEY_LOCATION": str(key or self.certs / "client.key"),
            "SIDECAR_KAFKA_SSL_KEY_PASSWORD_FILE": str(self.secrets / "key-password"),
        }

    def oauthbearer(self) -> dict[str, str]:
        return {
            "SIDECAR_BOOTSTRAP_SERVERS": f"127.0.0.1:{self.port + 4}",
            "SIDECAR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "SIDECAR_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "SIDECAR_KAFKA_SASL_OAUTHBEARER_METHOD": "oidc",
            "SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_ID": CLIENT_ID,
            "SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE": str(
                self.secrets / "client-secret"
            ),
            "SIDECAR_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": self.issuer.token_url,
            "SIDECAR_KAFKA_SSL_CA_LOCATION": str(self.certs / "ca.crt"),
        }


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    root = tmp_path_factory.mktemp("secured-broker")
    issuer = TokenIssuer(CLIENT_ID, CLIENT_SECRET).start()
    port = free_port(consecutive=5)
    env = {
        **os.environ,
        "KAFKA_SECURITY": "secured",
        "KAFKA_PORT": str(port),
        "KAFKA_DATA_DIR": str(root / "kafka"),
        "KAFKA_OAUTH_JWKS_URL": issuer.jwks_url,
        "KAFKA_OAUTH_TOKEN_URL": issuer.token_url,
    }
    try:
        started = subprocess.run(
            [str(KAFKA_SH), "start"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        if started.returncode != 0:
            pytest.fail(f"the secured broker did not start:\n{started.stderr[-4000:]}")
        certs = root / "kafka" / "secured"
        secrets = root / "secrets"
        secrets.mkdir()
        (secrets / "password").write_text((certs / "sidecar.password").read_text())
        (secrets / "key-password").write_text((certs / "client.key.password").read_text())
        (secrets / "client-secret").write_text(CLIENT_SECRET + "\n")
        yield SecuredBroker(port, certs, issuer, secrets)
    finally:
        subprocess.run([str(KAFKA_SH), "stop"], env=env, capture_output=True, timeout=120)
        issuer.stop()


@pytest.fixture
def secured_sidecar(
    secured_broker: SecuredBroker, tmp_path: Path
) -> Iterator[Callable[..., Sidecar]]:
    """Sidecars for the secured broker (``extra_env``: the way in), stopped at the end."""
    started: list[Sidecar] = []

    def make(group: str, topic: str, extra_env: dict[str, str], **options: object) -> Sidecar:
        name = str(options.pop("name", f"sidecar-{len(started) + 1}"))
        data_dir = Path(str(options.pop("data_dir", tmp_path / name)))
        sidecar = Sidecar(
            extra_env["SIDECAR_BOOTSTRAP_SERVERS"],
            group,
            topic,
            data_dir,
            name=name,
            extra_env=extra_env,
            **options,  # type: ignore[arg-type]
        )
        started.append(sidecar)
        return sidecar.start()

    yield make
    for sidecar in started:
        sidecar.stop()
        print(f"---- {sidecar.name} ----\n{sidecar.logs()[-3000:]}")


def copy_files(files: list[Path], where: Path) -> list[Path]:
    """Copies (a mounted Secret of its own, that a test may replace)."""
    where.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy(f, where / f.name)) for f in files]
