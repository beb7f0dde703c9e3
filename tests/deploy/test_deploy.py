"""What ships: the Helm chart, kustomize manifests, monitoring, Dockerfiles.

The tool checks run scripts/check-deploy.sh (one test per check, so a failure
says which); the rest render the chart with the real helm and assert on the
manifests, and run the rendered preStop commands against a real HTTP server.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.sidecars import COMMAND

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check-deploy.sh"
CHART = REPO / "helm" / "rebalance-sidecar"
HELM = REPO / ".tools" / "bin" / "helm"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
KUBE_VERSION = "1.29.0"
REQUIRED = [
    "--set",
    "sidecar.kafka.bootstrapServers=kafka:9092",
    "--set",
    "sidecar.kafka.groupId=orders",
    "--set",
    "sidecar.kafka.topics={orders}",
]
# docs/contract.md's contract metrics plus the extra ones the dashboard shows.
KNOWN_METRICS = {
    "rebalances_total",
    "failed_rebalances_total",
    "rebalance_duration_seconds",
    "last_rebalance_timestamp_seconds",
    "assigned_partitions",
    "generation_id",
    "partitions_assigned_callback_seconds",
    "partitions_revoked_callback_seconds",
    "partitions_lost_callback_seconds",
    "webhook_deliveries_total",
    "webhook_delivery_duration_seconds",
    "journal_pending_events",
    "member_state",
    "commits_total",
}
DELIVERY_OUTCOMES = {
    "delivered",
    "failed",
    "gave_up",
    "disabled",
    "barrier_timeout",
    "offsets_rejected",
}

# The first run builds helm and kustomize from their Go modules (minutes on 2 cores).
pytestmark = pytest.mark.timeout(1200)


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "CI": "true", **(env or {})},
        check=False,
    )


@pytest.fixture(scope="session")
def tools() -> None:
    """helm, kustomize, hadolint and kubernetes-validate, installed once."""
    result = run(SCRIPT, "tools")
    assert result.returncode == 0, result.stdout + result.stderr


def check(step: str, out: Path) -> str:
    result = run(SCRIPT, step, env={"CHECK_DEPLOY_OUT": str(out)})
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"check-deploy.sh {step} failed:\n{output}"
    return output


def helm_template(
    *args: str | Path, kube_version: str = KUBE_VERSION, chart: Path = CHART
) -> subprocess.CompletedProcess[str]:
    return run(
        HELM,
        "template",
        "rs",
        chart,
        "--namespace",
        "demo",
        "--kube-version",
        kube_version,
        *args,
    )


def render(*args: str | Path, kube_version: str = KUBE_VERSION) -> list[dict[str, Any]]:
    result = helm_template(*args, kube_version=kube_version)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[d['kind'] for d in docs]}"
    return found[0]


def pod_spec(docs: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, kind)["spec"]["template"]["spec"]
    return spec


def container(containers: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [c for c in containers if c["name"] == name]
    assert found, f"no container {name} in {[c['name'] for c in containers]}"
    return found[0]


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


# -- the checks of scripts/check-deploy.sh ---------------------------------------------------


def test_helm_lint_strict_passes_for_every_ci_values_file(tools: None, tmp_path: Path) -> None:
    output = check("lint", tmp_path)
    for values in sorted((CHART / "ci").glob("*-values.yaml")):
        assert f"ci/{values.name}" in output
    assert "[WARNING]" not in output
    assert "[ERROR]" not in output


def test_helm_template_output_validates_for_every_ci_values_file(
    tools: None, tmp_path: Path
) -> None:
    output = check("template", tmp_path)
    rendered = sorted(p.name for p in (tmp_path / "helm").glob("*.yaml"))
    assert rendered == [
        "classic-sidecar.yaml",
        "monitoring.yaml",
        "native-sidecar.yaml",
        "statefulset-static.yaml",
    ]
    assert "FAIL" not in output


def test_kustomize_builds_validate(tools: None, tmp_path: Path) -> None:
    output = check("kustomize", tmp_path)
    built = {p.name for p in (tmp_path / "kustomize").glob("*.yaml")}
    assert {
        "deploy_kubernetes_base.yaml",
        "deploy_kubernetes_overlays_example.yaml",
        "deploy_kubernetes_overlays_classic-sidecar.yaml",
        "deploy_monitoring.yaml",
    } <= built
    assert "FAIL" not in output


def test_hadolint_reports_nothing_above_info(tools: None, tmp_path: Path) -> None:
    check("hadolint", tmp_path)


def test_validator_rejects_unknown_fields_and_kinds(tools: None, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndataa: {}\n"
        "---\napiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: b}\n"
        "spec: {selector: {}, podMetricsEndpoints: [{port: x, intervall: 5s}]}\n"
        "---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: c}\n"
    )
    result = run(SCRIPT, "validate", bad)
    assert result.returncode == 1
    assert "'dataa' was unexpected" in result.stdout
    assert "'intervall' was unexpected" in result.stdout
    assert "Widget/c" in result.stdout
    assert "0/3 resources valid" in result.stdout


# -- the chart's manifests ------------------------------------------------------------------


def test_native_mode_runs_the_sidecar_as_an_init_container_that_restarts(tools: None) -> None:
    spec = pod_spec(render(*REQUIRED, "--set", "sidecar.mode=native"))
    sidecar = container(spec["initContainers"], "rebalance-sidecar")
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["args"] == ["run"]
    assert [c["name"] for c in spec["containers"]] == ["app"]
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "lifecycle" not in sidecar  # stopped after the app: the app's preStop drains


def test_classic_mode_runs_the_sidecar_beside_the_app_with_its_own_drain(tools: None) -> None:
    spec = pod_spec(render(*REQUIRED, "--set", "sidecar.mode=classic"))
    assert "initContainers" not in spec
    sidecar = container(spec["containers"], "rebalance-sidecar")
    assert "restartPolicy" not in sidecar
    assert "/drain" in " ".join(sidecar["lifecycle"]["preStop"]["exec"]["command"])


def test_the_sidecar_listens_on_all_interfaces_with_a_token_from_a_secret(tools: None) -> None:
    docs = render(*REQUIRED)
    env = env_of(container(pod_spec(docs)["initContainers"], "rebalance-sidecar"))
    assert env["SIDECAR_API_HOST"]["value"] == "0.0.0.0"
    token_ref = env["SIDECAR_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    secret = one(docs, "Secret")
    assert token_ref == {"name": secret["metadata"]["name"], "key": "token"}
    assert len(base64.b64decode(secret["data"]["token"])) >= 32


def test_an_existing_token_secret_is_used_and_none_is_created(tools: None) -> None:
    docs = render(*REQUIRED, "--set", "sidecar.token.existingSecret=mine")
    env = env_of(container(pod_spec(docs)["initContainers"], "rebalance-sidecar"))
    assert env["SIDECAR_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "token"}
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_app_container_drains_the_sidecar_in_prestop(tools: None) -> None:
    app = container(pod_spec(render(*REQUIRED))["containers"], "app")
    command = app["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["sh", "-c"]
    assert "http://127.0.0.1:8080/drain" in command[2]
    env = env_of(app)
    assert env["SIDECAR_URL"]["value"] == "http://127.0.0.1:8080"
    assert "secretKeyRef" in env["SIDECAR_API_TOKEN"]["valueFrom"]


def test_prestop_command_can_be_replaced_or_disabled(tools: None) -> None:
    custom = render(*REQUIRED, "--set", "app.preStop.command={/bin/drain,--now}")
    app = container(pod_spec(custom)["containers"], "app")
    assert app["lifecycle"]["preStop"]["exec"]["command"] == ["/bin/drain", "--now"]
    disabled = render(*REQUIRED, "--set", "app.preStop.enabled=false")
    assert "lifecycle" not in container(pod_spec(disabled)["containers"], "app")


def test_grace_period_is_sized_for_the_drain(tools: None) -> None:
    spec = pod_spec(
        render(
            *REQUIRED,
            "--set",
            "sidecar.drainTimeoutMs=40000",
            "--set",
            "sidecar.revokeTimeoutMs=30000",
            "--set",
            "app.shutdownSeconds=7",
        )
    )
    assert spec["terminationGracePeriodSeconds"] == 40 + 30 + 7 + 5
    too_short = helm_template(*REQUIRED, "--set", "workload.terminationGracePeriodSeconds=30")
    assert too_short.returncode != 0
    assert "terminationGracePeriodSeconds=30 is too short" in too_short.stderr


def test_statefulset_takes_the_group_instance_id_from_the_pod_name(tools: None) -> None:
    docs = render(*REQUIRED, "--set", "workload.kind=StatefulSet")
    env = env_of(container(pod_spec(docs, "StatefulSet")["initContainers"], "rebalance-sidecar"))
    assert env["SIDECAR_GROUP_INSTANCE_ID"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.name"}
    }
    statefulset = one(docs, "StatefulSet")
    headless = [d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"]
    assert [s["metadata"]["name"] for s in headless] == [statefulset["spec"]["serviceName"]]


def test_static_membership_follows_its_value(tools: None) -> None:
    deployment = render(*REQUIRED)
    sidecar = container(pod_spec(deployment)["initContainers"], "rebalance-sidecar")
    assert "SIDECAR_GROUP_INSTANCE_ID" not in env_of(sidecar)
    off = render(
        *REQUIRED,
        "--set",
        "workload.kind=StatefulSet",
        "--set",
        "sidecar.staticMembership=disabled",
    )
    sidecar = container(pod_spec(off, "StatefulSet")["initContainers"], "rebalance-sidecar")
    assert "SIDECAR_GROUP_INSTANCE_ID" not in env_of(sidecar)


def test_statefulset_persistence_replaces_the_data_emptydir(tools: None) -> None:
    docs = render(
        *REQUIRED,
        "--set",
        "workload.kind=StatefulSet",
        "--set",
        "workload.statefulSet.persistence.enabled=true",
    )
    statefulset = one(docs, "StatefulSet")
    claims = [t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]]
    volumes = [v["name"] for v in statefulset["spec"]["template"]["spec"]["volumes"]]
    assert claims == ["rebalance-sidecar-data"]
    assert "rebalance-sidecar-data" not in volumes


def test_kafka_properties_become_sidecar_kafka_variables(tools: None, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "sidecar": {
                    "kafka": {
                        "properties": {
                            "session.timeout.ms": 45000,
                            "fetch.max.bytes": 1000000,
                            "enable.ssl_certificate.verification": False,
                        },
                        "secretProperties": [
                            {"property": "sasl.password", "secretName": "kafka", "key": "pw"}
                        ],
                    }
                }
            }
        )
    )
    spec = pod_spec(render(*REQUIRED, "--values", values))
    env = env_of(container(spec["initContainers"], "rebalance-sidecar"))
    assert env["SIDECAR_KAFKA_SESSION_TIMEOUT_MS"]["value"] == "45000"
    assert env["SIDECAR_KAFKA_FETCH_MAX_BYTES"]["value"] == "1000000"  # not 1e+06
    assert env["SIDECAR_KAFKA_ENABLE_SSL__CERTIFICATE_VERIFICATION"]["value"] == "false"
    assert env["SIDECAR_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "kafka",
        "key": "pw",
    }


def test_declared_webhooks_are_kept_in_a_secret(tools: None) -> None:
    docs = render(*REQUIRED, "--values", CHART / "ci" / "classic-sidecar-values.yaml")
    secret = one(docs, "Secret")
    declared = json.loads(base64.b64decode(secret["data"]["webhooks.json"]))
    assert [w["url"] for w in declared] == [
        "http://127.0.0.1:8081/rebalance",
        "http://127.0.0.1:8081/audit",
    ]
    assert base64.b64decode(secret["data"]["webhook-0-secret"]).decode() == declared[0]["secret"]
    sidecar = container(pod_spec(docs)["containers"], "rebalance-sidecar")
    ref = env_of(sidecar)["SIDECAR_WEBHOOKS"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "webhooks.json"}


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("sidecar.kafka.topic={orders}", "'topic' not allowed"),
        ("sidecar.mod=classic", "'mod' not allowed"),
        ("workload.kind=DaemonSet", "workload/kind"),
        ("sidecar.mode=sidecar", "sidecar/mode"),
        ("monitoring.podMonitor.interval=30", "monitoring/podMonitor/interval"),
    ],
)
def test_schema_rejects_typos_and_bad_values(tools: None, setting: str, complaint: str) -> None:
    result = helm_template(*REQUIRED, "--set", setting)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_required_kafka_settings_are_enforced(tools: None) -> None:
    result = helm_template()
    assert result.returncode != 0
    assert "sidecar.kafka.bootstrapServers is required" in result.stderr


def test_native_mode_needs_kubernetes_1_29(tools: None) -> None:
    old = helm_template(*REQUIRED, kube_version="1.28.0")
    assert old.returncode != 0
    assert "needs Kubernetes 1.29" in old.stderr
    assert render(*REQUIRED, "--set", "sidecar.mode=classic", kube_version="1.28.0")


def test_monitoring_resources_select_the_sidecar_pods(tools: None) -> None:
    docs = render("--values", CHART / "ci" / "monitoring-values.yaml")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = one(docs, "Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    service_monitor = one(docs, "ServiceMonitor")
    selector = service_monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert service_monitor["spec"]["endpoints"][0]["port"] == "sidecar-http"
    pod_monitor = one(docs, "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert one(docs, "PrometheusRule")["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_other_charts_inject_the_sidecar_through_named_templates(
    tools: None, tmp_path: Path
) -> None:
    parent = tmp_path / "billing"
    shutil.copytree(FIXTURES / "parent-chart", parent)
    shutil.copytree(CHART, parent / "charts" / "rebalance-sidecar")
    result = helm_template(chart=parent)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert sorted(d["kind"] for d in docs) == ["Deployment", "Secret"]  # workload.enabled=false
    spec = pod_spec(docs)
    sidecar = container(spec["initContainers"], "rebalance-sidecar")
    assert sidecar["image"] == "rebalance-sidecar:0.1.0"  # the sidecar's version, not billing's
    assert env_of(sidecar)["SIDECAR_GROUP_ID"]["value"] == "billing"
    app = container(spec["containers"], "billing")
    assert "/drain" in app["lifecycle"]["preStop"]["exec"]["command"][2]
    token_ref = env_of(app)["SIDECAR_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token_ref["name"] == one(docs, "Secret")["metadata"]["name"]
    assert {v["name"] for v in spec["volumes"]} == {
        "rebalance-sidecar-data",
        "rebalance-sidecar-tmp",
    }


def test_notes_tell_how_to_curl_the_sidecar(tools: None, tmp_path: Path) -> None:
    # helm template does not render NOTES.txt: render it as a ConfigMap in a copy.
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "notes.txt")
    (chart / "templates" / "notes-preview.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data: {notes: {{ tpl (.Files.Get "notes.txt") . | quote }}}\n'
    )
    result = helm_template(*REQUIRED, "--show-only", "templates/notes-preview.yaml", chart=chart)
    assert result.returncode == 0, result.stderr
    notes = yaml.safe_load(result.stdout)["data"]["notes"]
    assert "kubectl port-forward -n demo" in notes
    assert "curl -s http://127.0.0.1:8080/assignment" in notes
    assert "get secret -n demo rs-rebalance-sidecar -o jsonpath='{.data.token}'" in notes
    assert "Authorization: Bearer $TOKEN" in notes


def test_chart_image_tag_is_the_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert values["sidecar"]["image"]["tag"] == chart["appVersion"] == project["version"]


# -- the preStop commands, run for real --------------------------------------------------------


class DrainRecorder:
    """A stand-in for the sidecar's HTTP API that records drain requests."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                recorder.requests.append(("POST", self.path, self.headers.get("Authorization")))
                body = b'{"drained": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def drain_recorder() -> Iterator[DrainRecorder]:
    recorder = DrainRecorder()
    recorder.thread.start()
    yield recorder
    recorder.server.shutdown()
    recorder.server.server_close()


@pytest.mark.parametrize("client", ["curl", "wget", "python3"])
def test_app_prestop_posts_drain_with_the_token(
    tools: None, drain_recorder: DrainRecorder, tmp_path: Path, client: str
) -> None:
    found = sys.executable if client == "python3" else shutil.which(client)
    if found is None:
        pytest.skip(f"{client} is not installed here")
    bin_dir = tmp_path / "bin"  # a PATH with only this client on it
    bin_dir.mkdir()
    (bin_dir / client).symlink_to(found)
    docs = render(*REQUIRED, "--set", f"sidecar.port={drain_recorder.port}")
    command = container(pod_spec(docs)["containers"], "app")["lifecycle"]["preStop"]["exec"]
    shell, flag, script = command["command"]
    result = subprocess.run(
        [shutil.which(shell) or "/bin/sh", flag, script],
        env={"PATH": str(bin_dir), "SIDECAR_API_TOKEN": "s3cret"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert drain_recorder.requests == [("POST", "/drain", "Bearer s3cret")]


def test_app_prestop_without_any_client_fails_loudly(tools: None, tmp_path: Path) -> None:
    script = container(pod_spec(render(*REQUIRED))["containers"], "app")["lifecycle"]["preStop"]
    result = subprocess.run(
        ["/bin/sh", "-c", script["exec"]["command"][2]],
        env={"PATH": str(tmp_path), "SIDECAR_API_TOKEN": "x"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "set app.preStop.command" in result.stderr


def test_classic_sidecar_prestop_posts_drain_with_the_token(
    tools: None, drain_recorder: DrainRecorder
) -> None:
    docs = render(
        *REQUIRED, "--set", "sidecar.mode=classic", "--set", f"sidecar.port={drain_recorder.port}"
    )
    sidecar = container(pod_spec(docs)["containers"], "rebalance-sidecar")
    program, *args = sidecar["lifecycle"]["preStop"]["exec"]["command"]
    assert program == "python"  # the sidecar image's interpreter
    result = subprocess.run(
        [sys.executable, *args],
        env={"SIDECAR_API_TOKEN": "s3cret"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert drain_recorder.requests == [("POST", "/drain", "Bearer s3cret")]


# -- the image ---------------------------------------------------------------------------------


def dockerfile_final_stage(path: Path) -> dict[str, Any]:
    """ENTRYPOINT, CMD, USER, STOPSIGNAL of the last stage (exec-form JSON only)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    stages = re.split(r"(?im)^FROM\s", text)
    found: dict[str, Any] = {}
    for line in stages[-1].splitlines():
        match = re.match(r"(?i)^(ENTRYPOINT|CMD|USER|STOPSIGNAL)\s+(.*)$", line.strip())
        if match:
            keyword, value = match.group(1).upper(), match.group(2).strip()
            found[keyword] = json.loads(value) if value.startswith("[") else value
    return found


def test_image_runs_the_command_the_integration_tests_run() -> None:
    stage = dockerfile_final_stage(REPO / "Dockerfile")
    assert stage["ENTRYPOINT"] + stage["CMD"] == ["rebalance-sidecar", "run"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    # The tests start `python -m sidecar run`; __main__ calls the console script's function.
    assert scripts["rebalance-sidecar"] == "sidecar.cli:main"
    assert "from sidecar.cli import main" in (REPO / "sidecar" / "__main__.py").read_text()
    assert COMMAND[1:] == ["-m", "sidecar", *stage["CMD"]]


def test_image_runs_as_a_fixed_non_root_user_and_stops_on_sigterm() -> None:
    stage = dockerfile_final_stage(REPO / "Dockerfile")
    assert stage["STOPSIGNAL"] == "SIGTERM"
    assert stage["USER"] == "${UID}:${GID}"
    text = (REPO / "Dockerfile").read_text()
    assert "ARG UID=10001" in text
    assert "ARG GID=10001" in text
    assert re.search(r"(?m)^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim", text)
    assert "--constraint constraints.txt" in text


def test_constraints_pin_every_runtime_dependency() -> None:
    pins = dict(
        line.split("==", 1)
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pins, f"{name} is not pinned in constraints.txt"


# -- monitoring ----------------------------------------------------------------------------


def test_alert_rules_in_deploy_match_the_chart(tools: None) -> None:
    docs = render("--values", CHART / "ci" / "monitoring-values.yaml")
    chart_rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
    plain = yaml.safe_load((REPO / "deploy" / "monitoring" / "prometheusrule.yaml").read_text())
    plain_rules = plain["spec"]["groups"][0]["rules"]
    scope = 'namespace="demo", pod=~"rs-rebalance-sidecar-.*"'

    def unscoped(expr: str) -> str:
        return expr.replace("{" + scope + ", ", "{").replace("{" + scope + "}", "").strip()

    assert [r["alert"] for r in plain_rules] == [r["alert"] for r in chart_rules]
    for mine, theirs in zip(plain_rules, chart_rules, strict=True):
        assert mine["expr"].strip() == unscoped(theirs["expr"]), mine["alert"]
        assert mine.get("for") == theirs.get("for"), mine["alert"]
        assert mine["labels"] == theirs["labels"], mine["alert"]


def metric_names(text: str) -> set[str]:
    names = set(re.findall(r"rebalance_sidecar_([a-z_]+?)(?:_bucket|_sum|_count)?\b", text))
    return {n.removesuffix("_bucket") for n in names}


def test_dashboard_and_alerts_only_use_metrics_the_sidecar_exports() -> None:
    dashboard = (REPO / "deploy" / "monitoring" / "grafana-dashboard.json").read_text()
    rules = (REPO / "deploy" / "monitoring" / "prometheusrule.yaml").read_text()
    template = (CHART / "templates" / "prometheusrule.yaml").read_text()
    for text in (dashboard, rules, template):
        used = metric_names(text)
        assert used, "no metrics found"
        assert used <= KNOWN_METRICS, used - KNOWN_METRICS
    for text in (rules, template):
        outcomes = set(re.findall(r'outcome=~?"([a-z_|]+)"', text))
        assert {o for group in outcomes for o in group.split("|")} <= DELIVERY_OUTCOMES


def test_dashboard_is_importable() -> None:
    dashboard = json.loads((REPO / "deploy" / "monitoring" / "grafana-dashboard.json").read_text())
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "pod"} <= variables
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert 'namespace=~"$namespace", pod=~"$pod"' in target["expr"], panel["title"]
