"""The chart's Secret-backed settings (issue 37, item 5): the Kafka SASL password, the
cluster CA and client certificate, the OIDC client secret and the webhook TLS files come
from Secrets mounted as files, and no secret value is ever rendered into an env value or
a ConfigMap. Rendered with the real helm (``scripts/check-deploy.sh tools`` builds it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "rebalance-sidecar"
HELM = REPO / ".tools" / "bin" / "helm"
SECRETS = "/etc/rebalance-sidecar/secrets"
REQUIRED = {
    "sidecar.kafka.bootstrapServers": "my-cluster-kafka-bootstrap.kafka.svc:9093",
    "sidecar.kafka.groupId": "orders",
    "sidecar.kafka.topics": "{orders}",
}
# Values of the chart's own Secret: given in the values, they must reach a Secret only.
TOKEN = "tok-SENTINEL-4f1d9b"
WEBHOOK_SECRET = "whsec_U0VOVElORUwtd2ViaG9vay1zZWNyZXQtMDAwMA=="

pytestmark = pytest.mark.timeout(1200)  # the first run builds helm (minutes on 2 cores)


@pytest.fixture(scope="module")
def helm() -> Path:
    done = subprocess.run(
        [REPO / "scripts" / "check-deploy.sh", "tools"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return HELM


def template(helm: Path, values: dict[str, str], *files: Path) -> subprocess.CompletedProcess[str]:
    sets = [
        arg
        for name, value in {**REQUIRED, **values}.items()
        for arg in ("--set", f"{name}={value}")
    ]
    return subprocess.run(
        [
            helm,
            "template",
            "rs",
            CHART,
            "--namespace",
            "orders",
            "--kube-version",
            "1.29.0",
            *sets,
            *(a for f in files for a in ("--values", str(f))),
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "CI": "true"},
        check=False,
    )


def render(helm: Path, values: dict[str, str], *files: Path) -> tuple[str, list[dict[str, Any]]]:
    done = template(helm, values, *files)
    assert done.returncode == 0, done.stderr
    return done.stdout, [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def sidecar_of(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (workload,) = [d for d in docs if d["kind"] == "Deployment"]
    spec = workload["spec"]["template"]["spec"]
    (sidecar,) = [c for c in spec["initContainers"] if c["name"] == "rebalance-sidecar"]
    return spec, sidecar


def plain_values(docs: list[dict[str, Any]]) -> list[str]:
    """Every env value and every ConfigMap datum of the render, as text."""
    found: list[str] = []
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            found.extend(str(v) for v in (doc.get("data") or {}).values())
        spec = doc.get("spec", {}).get("template", {}).get("spec") or doc.get("spec") or {}
        for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            found.extend(str(e["value"]) for e in c.get("env", []) if "value" in e)
    return found


SECURED = {
    "sidecar.kafka.properties.security\\.protocol": "SASL_SSL",
    "sidecar.kafka.properties.sasl\\.mechanism": "SCRAM-SHA-512",
    "sidecar.kafka.properties.sasl\\.username": "orders-sidecar",
    "sidecar.kafka.existingSecret": "orders-sidecar",
    "sidecar.kafka.tls.caSecret": "my-cluster-cluster-ca-cert",
    "sidecar.kafka.tls.clientSecret": "orders-sidecar-tls",
    "sidecar.kafka.tls.keyPasswordKey": "user.password",
    "sidecar.kafka.oauthbearer.existingSecret": "orders-oidc",
    "sidecar.webhookTls.existingSecret": "orders-webhook-tls",
    "sidecar.webhookTls.certificateKey": "tls.crt",
    "sidecar.webhookTls.keyKey": "tls.key",
    "sidecar.webhookTls.keyPasswordKey": "key.password",
    "sidecar.token.value": TOKEN,
    "sidecar.webhooks.items[0].url": "https://hooks.internal/rebalance",
    "sidecar.webhooks.items[0].secret": WEBHOOK_SECRET,
}


def test_every_secret_is_a_mounted_file_and_no_value_is_rendered_outside_a_secret(
    helm: Path,
) -> None:
    text, docs = render(helm, SECURED)
    spec, sidecar = sidecar_of(docs)
    env = {e["name"]: e for e in sidecar["env"]}
    files = {
        "SIDECAR_KAFKA_SASL_PASSWORD_FILE": "kafka/sasl-password",
        "SIDECAR_KAFKA_SSL_CA_LOCATION": "kafka/ca.crt",
        "SIDECAR_KAFKA_SSL_CERTIFICATE_LOCATION": "kafka/user.crt",
        "SIDECAR_KAFKA_SSL_KEY_LOCATION": "kafka/user.key",
        "SIDECAR_KAFKA_SSL_KEY_PASSWORD_FILE": "kafka/user.key-password",
        "SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE": "kafka/oauthbearer-client-secret",
        "SIDECAR_WEBHOOK_TLS_CA_LOCATION": "webhook/ca.crt",
        "SIDECAR_WEBHOOK_TLS_CERTIFICATE_LOCATION": "webhook/tls.crt",
        "SIDECAR_WEBHOOK_TLS_KEY_LOCATION": "webhook/tls.key",
        "SIDECAR_WEBHOOK_TLS_KEY_PASSWORD_FILE": "webhook/key-password",
    }
    for name, path in files.items():
        assert env[name] == {"name": name, "value": f"{SECRETS}/{path}"}
    for name in (
        "SIDECAR_KAFKA_SASL_PASSWORD",
        "SIDECAR_KAFKA_SSL_KEY_PASSWORD",
        "SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET",
        "SIDECAR_WEBHOOK_TLS_KEY_PASSWORD",
    ):
        assert name not in env
    assert env["SIDECAR_API_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "token"
    assert env["SIDECAR_WEBHOOKS"]["valueFrom"]["secretKeyRef"]["key"] == "webhooks.json"

    (mount,) = [m for m in sidecar["volumeMounts"] if m["name"] == "rebalance-sidecar-secrets"]
    assert mount == {"name": "rebalance-sidecar-secrets", "mountPath": SECRETS, "readOnly": True}
    assert "subPath" not in mount  # a subPath mount never sees a renewed Secret
    (volume,) = [v for v in spec["volumes"] if v["name"] == "rebalance-sidecar-secrets"]
    assert volume["projected"]["defaultMode"] == 0o440
    sources = {s["secret"]["name"]: s["secret"]["items"] for s in volume["projected"]["sources"]}
    assert sources == {
        "orders-sidecar": [{"key": "password", "path": "kafka/sasl-password"}],
        "my-cluster-cluster-ca-cert": [{"key": "ca.crt", "path": "kafka/ca.crt"}],
        "orders-sidecar-tls": [
            {"key": "user.crt", "path": "kafka/user.crt"},
            {"key": "user.key", "path": "kafka/user.key"},
            {"key": "user.password", "path": "kafka/user.key-password"},
        ],
        "orders-oidc": [{"key": "client-secret", "path": "kafka/oauthbearer-client-secret"}],
        "orders-webhook-tls": [
            {"key": "ca.crt", "path": "webhook/ca.crt"},
            {"key": "tls.crt", "path": "webhook/tls.crt"},
            {"key": "tls.key", "path": "webhook/tls.key"},
            {"key": "key.password", "path": "webhook/key-password"},
        ],
    }
    # The values given to the chart reach its Secret, base64-encoded, and nothing else.
    plain = "\n".join(plain_values(docs))
    for secret in (TOKEN, WEBHOOK_SECRET, "U0VOVElORUwtd2ViaG9vay1zZWNyZXQtMDAwMA"):
        assert secret not in plain
        assert secret not in text  # not even in a comment or an annotation
    (chart_secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert set(chart_secret["data"]) == {"token", "webhooks.json", "webhook-0-secret"}
    assert not [d for d in docs if d["kind"] == "ConfigMap"]


def test_without_secrets_nothing_is_mounted(helm: Path) -> None:
    _, docs = render(helm, {})
    spec, sidecar = sidecar_of(docs)
    assert "rebalance-sidecar-secrets" not in [v["name"] for v in spec["volumes"]]
    assert "rebalance-sidecar-secrets" not in [m["name"] for m in sidecar["volumeMounts"]]
    assert not [e for e in sidecar["env"] if e["name"].endswith(("_FILE", "_LOCATION"))]


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        (
            {"sidecar.kafka.properties.sasl\\.password": "hunter2-SENTINEL"},
            "sidecar.kafka.properties.sasl.password is a secret",
        ),
        (
            {"sidecar.kafka.properties.sasl\\.oauthbearer\\.client\\.secret": "s-SENTINEL"},
            "use sidecar.kafka.oauthbearer.existingSecret",
        ),
        (
            {"sidecar.kafka.properties.ssl\\.key\\.password": "k-SENTINEL"},
            "sidecar.kafka.properties.ssl.key.password is a secret",
        ),
        (
            {
                "sidecar.env[0].name": "SIDECAR_KAFKA_SASL_PASSWORD",
                "sidecar.env[0].value": "hunter2-SENTINEL",
            },
            "sidecar.env gives SIDECAR_KAFKA_SASL_PASSWORD a value",
        ),
        (
            {
                "sidecar.env[0].name": "SIDECAR_WEBHOOK_TLS_KEY_PASSWORD",
                "sidecar.env[0].value": "pw-SENTINEL",
            },
            "sidecar.env gives SIDECAR_WEBHOOK_TLS_KEY_PASSWORD a value",
        ),
        (
            {
                "sidecar.kafka.existingSecret": "orders-sidecar",
                "sidecar.kafka.secretProperties[0].property": "sasl.password",
                "sidecar.kafka.secretProperties[0].secretName": "other",
                "sidecar.kafka.secretProperties[0].key": "password",
            },
            "sidecar.kafka.secretProperties sets sasl.password, which the chart already reads",
        ),
        (
            {
                "sidecar.kafka.tls.caSecret": "ca",
                "sidecar.kafka.properties.ssl\\.ca\\.location": "/somewhere/ca.crt",
            },
            "sidecar.kafka.properties.ssl.ca.location is set, and the chart sets it",
        ),
        (
            {"sidecar.webhookTls.existingSecret": "w", "sidecar.webhookTls.caKey": ""},
            "neither caKey nor certificateKey",
        ),
        (
            {"sidecar.webhookTls.existingSecret": "w", "sidecar.webhookTls.keyKey": "tls.key"},
            "keyKey needs sidecar.webhookTls.certificateKey",
        ),
    ],
)
def test_a_secret_value_in_the_pod_spec_is_refused(
    helm: Path, values: dict[str, str], refusal: str
) -> None:
    done = template(helm, values)
    assert done.returncode != 0
    assert refusal in done.stderr
    assert "SENTINEL" not in done.stdout + done.stderr


def test_the_ci_values_file_of_a_secured_cluster_renders(helm: Path) -> None:
    _, docs = render(helm, {}, CHART / "ci" / "secured-kafka-values.yaml")
    _, sidecar = sidecar_of(docs)
    names = {e["name"] for e in sidecar["env"]}
    assert {"SIDECAR_KAFKA_SASL_PASSWORD_FILE", "SIDECAR_WEBHOOK_TLS_KEY_LOCATION"} <= names


def test_the_strimzi_examples_of_the_kubernetes_guide_render(helm: Path, tmp_path: Path) -> None:
    """docs/kubernetes.md's values blocks (SCRAM, mutual TLS, OAUTHBEARER), as written."""
    guide = (REPO / "docs" / "kubernetes.md").read_text()
    blocks = [block.split("```", 1)[0] for block in guide.split("```yaml\n")[1:]]
    examples = {b.split("\n", 1)[0]: b for b in blocks if b.startswith("# values: ")}
    assert set(examples) == {
        "# values: SCRAM-SHA-512",
        "# values: mutual TLS",
        "# values: OAUTHBEARER",
    }, "the guide's values examples are gone or renamed"
    secret_variables = {
        "SIDECAR_KAFKA_SASL_PASSWORD",
        "SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET",
        "SIDECAR_KAFKA_SSL_KEY_PASSWORD",
    }
    for index, example in enumerate(examples.values()):
        values = tmp_path / f"example-{index}.yaml"
        values.write_text(example)
        _, docs = render(helm, {}, values)
        _, sidecar = sidecar_of(docs)
        env = {e["name"]: e for e in sidecar["env"]}
        assert not secret_variables & set(env)
        assert env["SIDECAR_KAFKA_SSL_CA_LOCATION"]["value"] == f"{SECRETS}/kafka/ca.crt"
