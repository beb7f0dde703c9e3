"""What ships: the Helm chart, kustomize manifests, monitoring, Dockerfiles.

The tool checks run scripts/check-deploy.sh (one test per check, so a failure
says which); the rest render the chart with the real helm (and the kustomize
base with the real kustomize) and assert on the manifests, send the rendered
preStop hooks the way the kubelet does to a real HTTP server, and run
scripts/release.sh.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import subprocess
import sys
import threading
import tomllib
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sidecar.model import MemberState
from sidecar.settings import ENV_PREFIX, Settings
from sidecar.settings_sources import load_settings
from tests.support.deploy import (
    CHART,
    HELM,
    KUBE_VERSION,
    KUSTOMIZE,
    REPO,
    REQUIRED,
    SCRIPT,
    check,
    container,
    env_of,
    helm_template,
    is_test_hook,
    one,
    pod_spec,
    render,
    run,
)
from tests.support.sidecars import COMMAND

FIXTURES = Path(__file__).resolve().parent / "fixtures"
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
    "journal_used_bytes",
    "journal_max_bytes",
    "member_state",
    "commits_total",
}
# The jobs of sidecar targets in deploy/monitoring's copy of RebalanceSidecarTargetDown.
UP_JOB_REGEX = ".*rebalance-sidecar.*"
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
        "secured-kafka.yaml",
        "servicemonitor.yaml",
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
    assert "lifecycle" not in sidecar  # stopped after the app: the app's preStop drains


def test_probes_use_the_admin_port_and_never_wait_for_kafka(tools: None) -> None:
    sidecar = container(pod_spec(render(*REQUIRED))["initContainers"], "rebalance-sidecar")
    assert sidecar["ports"] == [{"name": "admin", "containerPort": 8081, "protocol": "TCP"}]
    probes = {kind: sidecar[f"{kind}Probe"] for kind in ("startup", "liveness", "readiness")}
    assert {kind: p["httpGet"] for kind, p in probes.items()} == {
        "startup": {"path": "/startupz", "port": "admin"},
        "liveness": {"path": "/livez", "port": "admin"},
        "readiness": {"path": "/readyz", "port": "admin"},
    }
    # /startupz does not depend on Kafka; its budget covers a slow volume, not a broker.
    startup = probes["startup"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 60
    env = env_of(sidecar)
    assert env["SIDECAR_ADMIN_HOST"]["value"] == "0.0.0.0"
    assert env["SIDECAR_ADMIN_PORT"]["value"] == "8081"


def test_classic_mode_runs_the_sidecar_beside_the_app_with_its_own_drain(tools: None) -> None:
    spec = pod_spec(render(*REQUIRED, "--set", "sidecar.mode=classic"))
    assert "initContainers" not in spec
    sidecar = container(spec["containers"], "rebalance-sidecar")
    assert "restartPolicy" not in sidecar
    app_hook = container(spec["containers"], "app")["lifecycle"]["preStop"]
    assert sidecar["lifecycle"]["preStop"] == app_hook  # the same (idempotent) drain


def test_control_api_is_on_loopback_without_a_token_by_default(tools: None) -> None:
    docs = render(*REQUIRED)
    spec = pod_spec(docs)
    sidecar = container(spec["initContainers"], "rebalance-sidecar")
    env = env_of(sidecar)
    assert env["SIDECAR_API_HOST"]["value"] == "127.0.0.1"
    assert env["SIDECAR_API_PORT"]["value"] == "8080"
    assert "SIDECAR_API_TOKEN" not in env
    assert [p["name"] for p in sidecar["ports"]] == ["admin"]  # 8080 is not on the pod IP
    app_env = env_of(container(spec["containers"], "app"))
    assert app_env["SIDECAR_URL"]["value"] == "http://127.0.0.1:8080"
    assert "SIDECAR_API_TOKEN" not in app_env
    assert not [d for d in docs if d["kind"] == "Secret"]  # nothing generated


def test_control_api_elsewhere_needs_a_token_the_user_provides(tools: None) -> None:
    refused = helm_template(*REQUIRED, "--set", "sidecar.api.host=0.0.0.0")
    assert refused.returncode != 0
    assert "sidecar.api.host=0.0.0.0 is not loopback: set sidecar.token" in refused.stderr
    docs = render(
        *REQUIRED, "--set", "sidecar.api.host=0.0.0.0", "--set", "sidecar.token.existingSecret=mine"
    )
    spec = pod_spec(docs)
    sidecar = container(spec["initContainers"], "rebalance-sidecar")
    ref = {"secretKeyRef": {"name": "mine", "key": "token"}}
    assert env_of(sidecar)["SIDECAR_API_TOKEN"]["valueFrom"] == ref
    assert env_of(container(spec["containers"], "app"))["SIDECAR_API_TOKEN"]["valueFrom"] == ref
    assert {"name": "api", "containerPort": 8080, "protocol": "TCP"} in sidecar["ports"]
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_a_token_value_goes_into_the_charts_secret(tools: None) -> None:
    docs = render(*REQUIRED, "--set", "sidecar.token.value=s3cret-s3cret")
    secret = one(docs, "Secret")
    assert base64.b64decode(secret["data"]["token"]) == b"s3cret-s3cret"
    env = env_of(container(pod_spec(docs)["initContainers"], "rebalance-sidecar"))
    assert env["SIDECAR_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": secret["metadata"]["name"],
        "key": "token",
    }


@pytest.mark.parametrize(
    "values", sorted((CHART / "ci").glob("*-values.yaml")), ids=lambda p: p.name
)
def test_rendering_twice_gives_identical_output(tools: None, values: Path) -> None:
    # GitOps tools (Argo CD, Flux) diff renders: any randomness is a permanent diff.
    first = helm_template("--values", values)
    second = helm_template("--values", values)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


def test_app_container_drains_the_sidecar_with_an_http_get_hook(tools: None) -> None:
    spec = pod_spec(render(*REQUIRED))
    app = container(spec["containers"], "app")
    hook = app["lifecycle"]["preStop"]
    assert set(hook) == {"httpGet"}  # nothing runs in the app image
    get = hook["httpGet"]
    # A number: the kubelet resolves a named port against the app container.
    assert (get["path"], get["port"], get["scheme"]) == ("/drain", 8081, "HTTP")
    sidecar_env = env_of(container(spec["initContainers"], "rebalance-sidecar"))
    assert get["httpHeaders"] == [
        {"name": "X-Drain-Token", "value": sidecar_env["SIDECAR_DRAIN_TOKEN"]["value"]}
    ]


def drain_token(*args: str) -> str:
    spec = pod_spec(render(*REQUIRED, *args))
    value: str = env_of(container(spec["initContainers"], "rebalance-sidecar"))[
        "SIDECAR_DRAIN_TOKEN"
    ]["value"]
    return value


def test_drain_token_is_derived_per_release_or_set(tools: None) -> None:
    derived = drain_token()
    assert re.fullmatch(r"[0-9a-f]{40}", derived)
    assert derived == drain_token()
    assert derived != drain_token("--set", "fullnameOverride=payments")
    assert derived != drain_token("--set", "sidecar.kafka.groupId=payments")
    assert drain_token("--set", "sidecar.drainToken=from-my-vault") == "from-my-vault"


EVERY_OBJECT = [
    *REQUIRED,
    *("--set", "service.enabled=true", "--set", "networkPolicy.enabled=true"),
    *("--set", "monitoring.serviceMonitor.enabled=true"),
    *("--set", "monitoring.prometheusRule.enabled=true"),
]
STATEFUL = ("--set", "workload.kind=StatefulSet")
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def released_as(release: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run(HELM, "template", release, CHART, "--namespace", "demo", *args)


def released_docs(release: str, *args: str) -> list[dict[str, Any]]:
    result = released_as(release, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.mark.parametrize(
    ("release", "args"),
    [
        ("rs", (*EVERY_OBJECT, *STATEFUL)),
        ("a" * 53, (*EVERY_OBJECT, *STATEFUL)),
        ("team.orders", EVERY_OBJECT),
        ("1orders", REQUIRED),
        ("1orders", (*REQUIRED, *STATEFUL, "--set", "workload.statefulSet.serviceName=my-svc")),
    ],
)
def test_every_object_name_is_valid_for_its_kind_whatever_the_release_name(
    tools: None, release: str, args: tuple[str, ...]
) -> None:
    """Helm takes dots in a release name, and a digit first; a Service's name may have
    neither (a DNS-1035 label). Rendered with team.orders the Services were named
    team.orders-rebalance-sidecar, which Kubernetes refuses."""
    docs = released_docs(release, *args)
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    assert services, [d["kind"] for d in docs]  # the test's own, at least
    for doc in docs:
        name = doc["metadata"]["name"]
        assert DNS_1123_SUBDOMAIN.fullmatch(name) and len(name) <= 253, (doc["kind"], name)
        if doc["kind"] == "Service":
            assert DNS_1035_LABEL.fullmatch(name) and len(name) <= 63, name
        if doc["kind"] in ("StatefulSet", "Deployment"):
            assert len(name) <= 52, name  # room for the pods' suffixes
        if doc["kind"] == "StatefulSet":
            assert "." not in name  # its pods' host names
            given = dict(a.split("=", 1) for a in args if a.startswith("workload.statefulSet."))
            assert doc["spec"]["serviceName"] in {*services, *given.values()}


def test_a_dotted_release_keeps_its_object_names_and_one_job(tools: None) -> None:
    """Only the Services lose the dots: every other object keeps the name it had (an
    upgrade renames nothing that ran), and the alerts select the series by the same
    job whether the ServiceMonitor (the Service's label) or the pods' label gives it."""
    docs = released_docs("team.orders", *EVERY_OBJECT)
    assert one(docs, "Deployment")["metadata"]["name"] == "team.orders-rebalance-sidecar"
    service = one([d for d in docs if not is_test_hook(d)], "Service")
    assert service["metadata"]["name"] == "team-orders-rebalance-sidecar"
    monitor = one(docs, "ServiceMonitor")["spec"]
    job = service["metadata"]["labels"][monitor["jobLabel"]]
    assert job == "team.orders-rebalance-sidecar"
    rule = json.dumps(one(docs, "PrometheusRule")["spec"])
    assert 'job=\\"team.orders-rebalance-sidecar\\"' in rule


@pytest.mark.parametrize(
    ("release", "args", "said"),
    [
        (
            "1orders",
            ("--set", "service.enabled=true"),
            'the Service name "1orders-rebalance-sidecar" is not a DNS-1035 label',
        ),
        ("team.orders", STATEFUL, "its pods (team.orders-rebalance-sidecar-0, ...) take"),
    ],
)
def test_a_name_kubernetes_would_refuse_is_refused_clearly(
    tools: None, release: str, args: tuple[str, ...], said: str
) -> None:
    """A Service of a release named 1orders, a StatefulSet of one named team.orders:
    the render says what to set, and with it the release renders."""
    refused = released_as(release, *REQUIRED, *args)
    assert refused.returncode != 0
    assert said in refused.stderr
    assert "set fullnameOverride" in refused.stderr
    fixed = released_as(release, *REQUIRED, *args, "--set", "fullnameOverride=orders")
    assert fixed.returncode == 0, fixed.stderr


def test_sidecar_env_may_not_set_again_what_the_chart_also_uses(
    tools: None, tmp_path: Path
) -> None:
    # The kubelet lets the last definition of a name win: the sidecar would run with the
    # sidecar.env value while the preStop header and the grace period keep the chart's
    # (a drain token from a Secret: every drain a 401 the kubelet does not report).
    def with_env(
        *env: dict[str, Any], args: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        values = tmp_path / "env.yaml"
        values.write_text(yaml.safe_dump({"sidecar": {"env": list(env)}}))
        return helm_template(*REQUIRED, "--values", values, *args)

    from_secret = {"secretKeyRef": {"name": "orders-drain", "key": "token"}}
    for refused in (
        {"name": "SIDECAR_DRAIN_TOKEN", "valueFrom": from_secret},
        {"name": "SIDECAR_DRAIN_TIMEOUT_MS", "value": "120000"},
        {"name": "SIDECAR_ADMIN_PORT", "value": "9000"},
        {"name": "SIDECAR_DATA_DIR", "value": "/tmp"},
    ):
        result = with_env(refused)
        assert result.returncode != 0, refused
        assert f"sidecar.env sets {refused['name']}, which the chart sets" in result.stderr
    # What the chart sets but uses nowhere else may come from elsewhere (a review found
    # the first version refusing these, which worked before): sidecar.env's entry
    # replaces the chart's, one definition per name.
    from_map = {"configMapKeyRef": {"name": "kafka-bootstrap", "key": "servers"}}
    pod_ip = {"fieldRef": {"fieldPath": "status.podIP"}}
    accepted = with_env(
        {"name": "SIDECAR_LOG_LEVEL", "value": "debug"},
        {"name": "SIDECAR_BOOTSTRAP_SERVERS", "valueFrom": from_map},
        {"name": "SIDECAR_ADMIN_HOST", "valueFrom": pod_ip},
        {"name": "SIDECAR_KAFKA_SESSION_TIMEOUT_MS", "value": "6000"},
        {"name": "SIDECAR_JOURNAL_MAX_BYTES", "value": "0"},
        args=("--set", "sidecar.kafka.properties.session\\.timeout\\.ms=10000"),
    )
    assert accepted.returncode == 0, accepted.stderr
    docs = [d for d in yaml.safe_load_all(accepted.stdout) if d and not is_test_hook(d)]
    sidecar = container(pod_spec(docs)["initContainers"], "rebalance-sidecar")
    names = [e["name"] for e in sidecar["env"]]
    assert len(names) == len(set(names)), names
    env = env_of(sidecar)
    assert env["SIDECAR_LOG_LEVEL"]["value"] == "debug"
    assert env["SIDECAR_BOOTSTRAP_SERVERS"]["valueFrom"] == from_map
    assert env["SIDECAR_ADMIN_HOST"]["valueFrom"] == pod_ip
    assert env["SIDECAR_KAFKA_SESSION_TIMEOUT_MS"]["value"] == "6000"
    assert env["SIDECAR_JOURNAL_MAX_BYTES"]["value"] == "0"


def test_app_ports_that_collide_with_the_sidecar_are_refused(tools: None) -> None:
    result = helm_template(*REQUIRED, "--set", "app.ports[0].containerPort=8081")
    assert result.returncode != 0
    assert "containerPort 8081 is taken by the sidecar" in result.stderr


@pytest.mark.parametrize("mode", ["native", "classic"])
def test_app_port_names_that_the_sidecars_resources_select_are_refused(
    tools: None, mode: str
) -> None:
    # Services, the PodMonitor and a NetworkPolicy rule resolve a port name against every
    # container of the pod, and Kubernetes looks at spec.containers (the app) first: an
    # app port named `admin` would take the metrics Service's and the `helm test`
    # Service's targetPort, put the app's port in the PodMonitor's job, and, through
    # networkPolicy.allowAppPorts, open the sidecar's admin port (/drain) to everyone.
    monitored = ("--values", str(CHART / "ci" / "monitoring-values.yaml"))
    named = ("--set", f"sidecar.mode={mode}", "--set", "app.ports[1].containerPort=9090")
    admin = helm_template(*monitored, *named, "--set", "app.ports[1].name=admin")
    assert admin.returncode != 0
    assert "app.ports: the name admin is the sidecar's port" in admin.stderr
    # `api` names a sidecar port only when the control API leaves the loopback.
    assert render(*monitored, *named, "--set", "app.ports[1].name=api")
    exposed = helm_template(
        *monitored,
        *named,
        "--set",
        "app.ports[1].name=api",
        "--set",
        "sidecar.api.host=0.0.0.0,sidecar.token.existingSecret=orders-token",
    )
    assert exposed.returncode != 0
    assert "app.ports: the name api is the sidecar's port" in exposed.stderr


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
    # The defaults (docs/kubernetes.md): 45 s drain + 30 s revoke + 10 s app + 5 s.
    assert pod_spec(render(*REQUIRED))["terminationGracePeriodSeconds"] == 90
    explicit = render(*REQUIRED, "--set", "workload.terminationGracePeriodSeconds=120")
    assert pod_spec(explicit)["terminationGracePeriodSeconds"] == 120
    too_short = helm_template(*REQUIRED, "--set", "workload.terminationGracePeriodSeconds=30")
    assert too_short.returncode != 0
    assert "terminationGracePeriodSeconds=30 is too short" in too_short.stderr


def test_a_drained_sidecar_that_no_sigterm_follows_is_restarted_after_the_grace(
    tools: None,
) -> None:
    """The app's preStop drains the sidecar also when only the app container restarts;
    liveness then fails after the pod's grace period + 30 s (a real termination is over by
    then), so the kubelet restarts the sidecar and it rejoins the group."""

    def restart_after(*args: str) -> str:
        sidecar = container(
            pod_spec(render(*REQUIRED, *args))["initContainers"], "rebalance-sidecar"
        )
        return str(env_of(sidecar)["SIDECAR_DRAINED_RESTART_AFTER_MS"]["value"])

    assert restart_after() == str((90 + 30) * 1000)
    assert restart_after("--set", "workload.terminationGracePeriodSeconds=200") == "230000"
    assert restart_after("--set", "sidecar.drainedRestartAfterMs=0") == "0"  # stay drained
    assert restart_after("--set", "sidecar.drainedRestartAfterMs=600000") == "600000"
    assert restart_after("--set", "sidecar.drainedRestartAfterMs=1000") == "1000"
    # The kustomize base: its own grace period + 30 s.
    built = yaml.safe_load_all(run(KUSTOMIZE, "build", REPO / "deploy/kubernetes/base").stdout)
    deployment = next(d for d in built if d and d["kind"] == "Deployment")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    env = (REPO / "deploy/kubernetes/base/sidecar.env").read_text().splitlines()
    assert f"SIDECAR_DRAINED_RESTART_AFTER_MS={(grace + 30) * 1000}" in env


def test_the_admin_listener_may_take_ipv6_for_the_kubelet(tools: None) -> None:
    """The kubelet probes and drains on the pod IP: on an IPv6 single-stack cluster a
    listener on 0.0.0.0 refused them all and the sidecar restarted in a loop; the host
    was fixed in the chart."""

    def admin_host(*args: str) -> str:
        sidecar = container(
            pod_spec(render(*REQUIRED, *args))["initContainers"], "rebalance-sidecar"
        )
        return str(env_of(sidecar)["SIDECAR_ADMIN_HOST"]["value"])

    assert admin_host() == "0.0.0.0"
    assert admin_host("--set", "sidecar.admin.host=::") == "::"
    other = helm_template(*REQUIRED, "--set", "sidecar.admin.host=10.0.0.1")
    assert other.returncode != 0 and "/sidecar/admin/host" in other.stderr


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
        "http://127.0.0.1:8082/rebalance",
        "http://127.0.0.1:8082/audit",
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
        ("sidecar.probes.liveness.path=/readyz", "sidecar/probes/liveness/path"),
        ("sidecar.port=8080", "'port' not allowed"),
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


def test_chart_declares_the_kubernetes_versions_it_supports(tools: None) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.25.0-0"
    too_old = helm_template(*REQUIRED, "--set", "sidecar.mode=classic", kube_version="1.24.0")
    assert too_old.returncode != 0
    assert "incompatible with Kubernetes v1.24.0" in too_old.stderr


def test_one_default_assignment_strategy_for_chart_and_kustomize(tools: None) -> None:
    env = env_of(container(pod_spec(render(*REQUIRED))["initContainers"], "rebalance-sidecar"))
    base = (REPO / "deploy" / "kubernetes" / "base" / "sidecar.env").read_text().splitlines()
    assert env["SIDECAR_ASSIGNMENT_STRATEGY"]["value"] == "cooperative-sticky"
    assert "SIDECAR_ASSIGNMENT_STRATEGY=cooperative-sticky" in base
    # KIP-848: the broker assigns, and the sidecar refuses a strategy.
    consumer = render(*REQUIRED, "--set", "sidecar.kafka.groupProtocol=consumer")
    sidecar = container(pod_spec(consumer)["initContainers"], "rebalance-sidecar")
    assert "SIDECAR_ASSIGNMENT_STRATEGY" not in env_of(sidecar)
    explicit = helm_template(
        *REQUIRED,
        "--set",
        "sidecar.kafka.groupProtocol=consumer",
        "--set",
        "sidecar.kafka.assignmentStrategy=range",
    )
    assert explicit.returncode != 0
    assert "assignmentStrategy applies to groupProtocol=classic only" in explicit.stderr


def test_pod_disruption_budget_lets_one_member_go_at_a_time(tools: None) -> None:
    docs = render(*REQUIRED)
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    off = render(*REQUIRED, "--set", "podDisruptionBudget.enabled=false")
    assert not [d for d in off if d["kind"] == "PodDisruptionBudget"]


def test_pod_disruption_budget_lets_pods_that_never_joined_be_evicted(tools: None) -> None:
    # /readyz is 503 until the first join: when no pod can join (ACLs, Kafka down at
    # deploy) every pod is unhealthy, and IfHealthyBudget would refuse every eviction.
    def policy(*args: str, kube_version: str = KUBE_VERSION) -> str | None:
        docs = render(*REQUIRED, *args, kube_version=kube_version)
        value: str | None = one(docs, "PodDisruptionBudget")["spec"].get(
            "unhealthyPodEvictionPolicy"
        )
        return value

    assert policy() == "AlwaysAllow"
    key = "podDisruptionBudget.unhealthyPodEvictionPolicy"
    assert policy("--set", f"{key}=IfHealthyBudget") == "IfHealthyBudget"
    assert policy("--set", f"{key}=") is None  # the API server's default
    # Beta (on by default) since 1.27, GA in 1.31; unknown to older API servers.
    assert policy("--set", "sidecar.mode=classic", kube_version="1.27.0") == "AlwaysAllow"
    assert policy("--set", "sidecar.mode=classic", kube_version="1.26.0") is None
    refused = helm_template(*REQUIRED, "--set", f"{key}=Always")
    assert refused.returncode != 0
    assert "podDisruptionBudget/unhealthyPodEvictionPolicy" in refused.stderr
    for overlay in ("base", "overlays/classic-sidecar"):
        result = run(KUSTOMIZE, "build", REPO / "deploy" / "kubernetes" / overlay)
        assert result.returncode == 0, result.stderr
        docs = [d for d in yaml.safe_load_all(result.stdout) if d]
        spec = one(docs, "PodDisruptionBudget")["spec"]
        assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow", overlay


def test_deployments_replace_one_pod_at_a_time_and_keep_every_member(tools: None) -> None:
    """The Deployment's strategy was Kubernetes' default (25 % unavailable, 25 % surge):
    from 4 replicas on, a rollout drained several members at once (stacked rebalances,
    fewer members while it ran). Chart and kustomize now surge one pod and take none away."""
    one_at_a_time = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert one(render(*REQUIRED), "Deployment")["spec"]["strategy"] == one_at_a_time
    for overlay in ("base", "overlays/classic-sidecar"):
        result = run(KUSTOMIZE, "build", REPO / "deploy" / "kubernetes" / overlay)
        assert result.returncode == 0, result.stderr
        docs = [d for d in yaml.safe_load_all(result.stdout) if d]
        assert one(docs, "Deployment")["spec"]["strategy"] == one_at_a_time, overlay
    # workload.updateStrategy replaces it; StatefulSets keep their own default (no surge).
    recreate = render(*REQUIRED, "--set", "workload.updateStrategy.type=Recreate")
    assert one(recreate, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    statefulset = one(render(*REQUIRED, "--set", "workload.kind=StatefulSet"), "StatefulSet")
    assert "updateStrategy" not in statefulset["spec"]


def test_app_gets_only_sidecar_scoped_variables_and_never_a_name_twice(
    tools: None, tmp_path: Path
) -> None:
    app = container(pod_spec(render(*REQUIRED))["containers"], "app")
    names = [e["name"] for e in app["env"]]
    assert sorted(names) == [
        "PORT",
        "SIDECAR_BOOTSTRAP_SERVERS",
        "SIDECAR_GROUP_ID",
        "SIDECAR_URL",
    ]
    env = env_of(app)
    assert env["SIDECAR_BOOTSTRAP_SERVERS"]["value"] == "kafka:9092"
    assert env["SIDECAR_GROUP_ID"]["value"] == "orders"
    # The names an app that subscribes by itself reads would make it a competing member.
    assert not {"GROUP_ID", "KAFKA_BOOTSTRAP_SERVERS"} & set(names)
    # A name set in app.env wins; the chart does not emit it a second time.
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "sidecar": {"token": {"existingSecret": "mine"}},
                "app": {
                    "env": [
                        {"name": "SIDECAR_URL", "value": "http://127.0.0.1:9999"},
                        {"name": "SIDECAR_GROUP_ID", "value": "orders-offsets"},
                        {
                            "name": "SIDECAR_API_TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": "app", "key": "t"}},
                        },
                    ]
                },
            }
        )
    )
    app = container(pod_spec(render(*REQUIRED, "--values", values))["containers"], "app")
    names = [e["name"] for e in app["env"]]
    assert len(names) == len(set(names)), names
    env = env_of(app)
    assert env["SIDECAR_URL"]["value"] == "http://127.0.0.1:9999"
    assert env["SIDECAR_GROUP_ID"]["value"] == "orders-offsets"
    assert env["SIDECAR_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "app", "key": "t"}
    assert env["SIDECAR_BOOTSTRAP_SERVERS"]["value"] == "kafka:9092"
    off = render(*REQUIRED, "--set", "app.sidecarEnv=false")
    assert [e["name"] for e in container(pod_spec(off)["containers"], "app")["env"]] == ["PORT"]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("podDisruptionBudget.maxUnavailable=0%", "podDisruptionBudget/maxUnavailable"),
        ("podDisruptionBudget.maxUnavailable=0", "podDisruptionBudget/maxUnavailable"),
        ("podDisruptionBudget.maxUnavailable=101%", "podDisruptionBudget/maxUnavailable"),
        ("sidecar.dataVolume.sizeLimit=lots", "sidecar/dataVolume/sizeLimit"),
        ("sidecar.dataVolume.sizeLimit=256m", "sidecar/dataVolume/sizeLimit"),  # 0.256 bytes
        ("workload.statefulSet.persistence.size=1GB", "workload/statefulSet/persistence/size"),
    ],
)
def test_schema_rejects_values_that_fail_only_at_apply_time(
    tools: None, setting: str, complaint: str
) -> None:
    result = helm_template(*REQUIRED, "--set-string", setting)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_schema_accepts_budgets_and_sizes_kubernetes_accepts(tools: None) -> None:
    for setting in (
        "podDisruptionBudget.maxUnavailable=25%",
        "podDisruptionBudget.maxUnavailable=100%",
        "sidecar.dataVolume.sizeLimit=1Gi",
        "sidecar.dataVolume.sizeLimit=1.5Gi",
        "sidecar.dataVolume.sizeLimit=500M",
        "sidecar.dataVolume.sizeLimit=",
    ):
        assert render(*REQUIRED, "--set-string", setting), setting
    assert one(render(*REQUIRED, "--set", "podDisruptionBudget.maxUnavailable=2"), "Deployment")


@pytest.mark.parametrize("mode", ["native", "classic"])
def test_sidecar_and_app_containers_need_different_names(tools: None, mode: str) -> None:
    for setting in ("sidecar.name=app", "app.name=rebalance-sidecar"):
        result = helm_template(*REQUIRED, "--set", f"sidecar.mode={mode}", "--set", setting)
        assert result.returncode != 0, setting
        assert "sidecar.name and app.name are both" in result.stderr
        assert "two containers with one name" in result.stderr


@pytest.mark.parametrize("monitor", ["podMonitor", "serviceMonitor"])
def test_scrape_timeout_may_not_exceed_the_interval(tools: None, monitor: str) -> None:
    def template(interval: str, timeout: str) -> subprocess.CompletedProcess[str]:
        return helm_template(
            *REQUIRED,
            "--set",
            f"monitoring.{monitor}.enabled=true",
            "--set",
            f"monitoring.{monitor}.interval={interval}",
            "--set",
            f"monitoring.{monitor}.scrapeTimeout={timeout}",
        )

    for interval, timeout in (("30s", "1m"), ("1m", "1m1s"), ("1s", "1001ms"), ("1h", "1d")):
        result = template(interval, timeout)
        assert result.returncode != 0, (interval, timeout)
        assert (
            f"monitoring.{monitor}.scrapeTimeout={timeout} is longer than "
            f"monitoring.{monitor}.interval={interval}"
        ) in result.stderr
    for interval, timeout in (("30s", "10s"), ("1m30s", "90s"), ("1s", "500ms"), ("2h", "1h59m")):
        result = template(interval, timeout)
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("given", "peer"),
    [
        ({}, {"namespaceSelector": {}}),  # every namespace
        ({"matchLabels": {"team": "obs"}}, {"namespaceSelector": {"matchLabels": {"team": "obs"}}}),
        (None, {}),  # the release's own namespace
    ],
)
def test_the_metrics_peer_is_the_namespace_selector_given_not_merged_with_the_default(
    tools: None, tmp_path: Path, given: dict[str, Any] | None, peer: dict[str, Any]
) -> None:
    """The default selector (the monitoring namespace) sat in values.yaml, and Helm
    merges a user's map into a default map: {} (every namespace) rendered the default,
    and {matchLabels: {team: obs}} rendered both labels, a namespace that rarely exists
    (Prometheus then could not scrape, without a word)."""
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {"networkPolicy": {"enabled": True, "metrics": {"namespaceSelector": given}}}
        )
    )
    policy = one(render(*REQUIRED, "--values", values), "NetworkPolicy")["spec"]
    assert policy["ingress"][0]["from"][0] == {**peer, "podSelector": {}}


def test_service_account_mounts_no_api_token(tools: None) -> None:
    docs = render(*REQUIRED)
    account = one(docs, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    spec = pod_spec(docs)
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False
    existing = render(*REQUIRED, "--set", "serviceAccount.create=false,serviceAccount.name=ops")
    assert not [d for d in existing if d["kind"] == "ServiceAccount"]
    assert pod_spec(existing)["serviceAccountName"] == "ops"


def test_network_policy_opens_the_admin_port_to_monitoring_only(tools: None) -> None:
    docs = render("--values", CHART / "ci" / "monitoring-values.yaml")
    policy = one(docs, "NetworkPolicy")["spec"]
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    admin, app = policy["ingress"]
    assert admin["ports"] == [{"port": 8081, "protocol": "TCP"}]
    assert admin["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {},
        },
        {"ipBlock": {"cidr": "10.0.0.0/16"}},
        # The `helm test` pod, and nothing else of the namespace.
        {"podSelector": {"matchLabels": {"rebalance-sidecar.io/test": "rs-rebalance-sidecar"}}},
    ]
    test_pod = one(render("--values", CHART / "ci" / "monitoring-values.yaml", tests=True), "Pod")
    assert {"rebalance-sidecar.io/test": "rs-rebalance-sidecar"}.items() <= test_pod["metadata"][
        "labels"
    ].items()
    untested = render(
        "--values", CHART / "ci" / "monitoring-values.yaml", "--set", "tests.enabled=false"
    )
    assert one(untested, "NetworkPolicy")["spec"]["ingress"][0]["from"] == admin["from"][:2]
    assert app == {"ports": [{"port": "http", "protocol": "TCP"}]}
    opened = [p["port"] for rule in policy["ingress"] for p in rule["ports"]]
    assert 8080 not in opened  # the control API stays closed
    assert not [d for d in render(*REQUIRED) if d["kind"] == "NetworkPolicy"]  # opt-in


def test_images_take_the_registry_from_global_or_their_own(tools: None) -> None:
    def images(*args: str) -> tuple[str, str]:
        spec = pod_spec(render(*REQUIRED, *args))
        return (
            container(spec["initContainers"], "rebalance-sidecar")["image"],
            container(spec["containers"], "app")["image"],
        )

    assert images() == ("rebalance-sidecar:0.1.0", "rebalance-sidecar-example-app:0.1.0")
    assert images("--set", "sidecar.image.registry=r.example.com") == (
        "r.example.com/rebalance-sidecar:0.1.0",
        "rebalance-sidecar-example-app:0.1.0",
    )
    assert images(
        "--set", "global.imageRegistry=mirror.example.com/", "--set", "app.image.registry=x.io"
    ) == (
        "mirror.example.com/rebalance-sidecar:0.1.0",
        "mirror.example.com/rebalance-sidecar-example-app:0.1.0",
    )


def test_monitoring_resources_select_the_sidecar_pods(tools: None) -> None:
    docs = render("--values", CHART / "ci" / "monitoring-values.yaml")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    pod_monitor = one(docs, "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "admin"
    assert one(docs, "PrometheusRule")["metadata"]["labels"]["release"] == "kube-prometheus-stack"

    docs = render("--values", CHART / "ci" / "servicemonitor-values.yaml")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = one(docs, "Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "admin"
    service_monitor = one(docs, "ServiceMonitor")
    selector = service_monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert service_monitor["spec"]["endpoints"][0]["port"] == "admin"


def test_service_and_pod_monitor_never_scrape_the_same_pods(tools: None) -> None:
    both = helm_template(
        *REQUIRED,
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.podMonitor.enabled=true",
    )
    assert both.returncode != 0
    assert "choose one; both would scrape every pod twice" in both.stderr
    # A StatefulSet's headless Service carries the same port: the ServiceMonitor
    # must not select it as well.
    docs = render(
        *REQUIRED,
        "--set",
        "workload.kind=StatefulSet",
        "--set",
        "monitoring.serviceMonitor.enabled=true",
    )
    selector = one(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    services = [d for d in docs if d["kind"] == "Service"]
    assert len(services) == 2
    selected = [s for s in services if selector.items() <= s["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in selected] == ["rs-rebalance-sidecar"]


def rule_selectors(rule: dict[str, Any]) -> set[str]:
    exprs = " ".join(r["expr"] for r in rule["spec"]["groups"][0]["rules"])
    return set(re.findall(r'\b(job="[^"]*")', exprs))


def test_other_charts_inject_the_sidecar_through_named_templates(
    tools: None, tmp_path: Path
) -> None:
    parent = tmp_path / "billing"
    shutil.copytree(FIXTURES / "parent-chart", parent)
    shutil.copytree(CHART, parent / "charts" / "rebalance-sidecar")
    result = helm_template(chart=parent)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    # workload.enabled=false: no workload, ServiceAccount or PodDisruptionBudget of
    # the subchart; no token, so no Secret either.
    assert sorted(d["kind"] for d in docs) == ["Deployment"]
    spec = pod_spec(docs)
    sidecar = container(spec["initContainers"], "rebalance-sidecar")
    assert sidecar["image"] == "rebalance-sidecar:0.1.0"  # the sidecar's version, not billing's
    assert env_of(sidecar)["SIDECAR_GROUP_ID"]["value"] == "billing"
    app = container(spec["containers"], "billing")
    assert app["lifecycle"]["preStop"]["httpGet"]["path"] == "/drain"
    assert env_of(app)["SIDECAR_URL"]["value"] == "http://127.0.0.1:8080"
    assert {v["name"] for v in spec["volumes"]} == {
        "rebalance-sidecar-data",
        "rebalance-sidecar-tmp",
    }


def test_alert_rules_select_a_parent_charts_pods(tools: None, tmp_path: Path) -> None:
    parent = tmp_path / "billing"
    shutil.copytree(FIXTURES / "parent-chart", parent)
    shutil.copytree(CHART, parent / "charts" / "rebalance-sidecar")
    for monitor in ("podMonitor", "serviceMonitor"):
        result = helm_template(
            "--set",
            f"rebalance-sidecar.monitoring.{monitor}.enabled=true",
            "--set",
            "rebalance-sidecar.monitoring.prometheusRule.enabled=true",
            chart=parent,
        )
        assert result.returncode == 0, result.stderr
        docs = [d for d in yaml.safe_load_all(result.stdout) if d]
        pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
        if monitor == "podMonitor":
            spec = one(docs, "PodMonitor")["spec"]
            assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
            job = pod_labels[spec["jobLabel"]]  # the Operator's job label for these pods
        else:
            service = one(docs, "Service")
            assert service["spec"]["selector"].items() <= pod_labels.items()
            job = service["metadata"]["name"]  # a ServiceMonitor's default job label
        # The pods are named billing-*, the rules must not depend on it.
        assert rule_selectors(one(docs, "PrometheusRule")) == {f'job="{job}"'}, monitor


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
    assert 'kubectl port-forward -n demo "$POD" 8080 8081' in notes
    assert "curl -s http://127.0.0.1:8080/assignment" in notes
    assert "curl -s http://127.0.0.1:8081/metrics" in notes
    assert "Bearer" not in notes  # no token by default
    assert "sends GET :8081/drain with the X-Drain-Token header" in notes
    assert "terminationGracePeriodSeconds is 90s" in notes


def helm_test_hooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if is_test_hook(d)]


def test_helm_test_hook_checks_the_sidecars_readiness(tools: None, tmp_path: Path) -> None:
    """`helm test` had nothing to run. The hook: a headless Service of its own (not-ready
    pods too, weight -1) and a Pod that asks each sidecar's /readyz on the admin port."""
    docs = render(*REQUIRED, tests=True)
    assert not helm_test_hooks(render(*REQUIRED))  # not what `helm install` creates
    hooks = helm_test_hooks(docs)
    assert [h["kind"] for h in hooks] == ["Service", "Pod"]
    service, pod = hooks
    for hook in hooks:
        annotations = hook["metadata"]["annotations"]
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    assert int(service["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        pod["metadata"]["annotations"]["helm.sh/hook-weight"]
    )  # the Service exists before the Pod resolves it
    deployment = one(docs, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True  # the failing pods too
    assert service["spec"]["ports"] == [
        {"name": "admin", "port": 8081, "targetPort": "admin", "protocol": "TCP"}
    ]
    # Nothing selects the test pod: not the workload, not the budget.
    labels = pod["metadata"]["labels"]
    for selector in (
        deployment["spec"]["selector"]["matchLabels"],
        one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        service["spec"]["selector"],
    ):
        assert not selector.items() <= labels.items(), selector
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    (check,) = spec["containers"]
    sidecar = container(pod_spec(docs)["initContainers"], "rebalance-sidecar")
    assert check["image"] == sidecar["image"]  # no image the chart did not already pull
    assert check["command"][0] == "python3"
    env = {e["name"]: e["value"] for e in check["env"]}
    assert env == {
        "TARGET_HOST": service["metadata"]["name"],
        "ADMIN_PORT": "8081",
        "EXPECTED_PODS": str(deployment["spec"]["replicas"]),
        "TIMEOUT_SECONDS": "120",
    }
    assert check["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    # No mesh proxy: one injected would never exit and `helm test` would hang.
    assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert pod["metadata"]["annotations"]["linkerd.io/inject"] == "disabled"
    # Valid against the Kubernetes schemas, offline.
    rendered = tmp_path / "hooks.yaml"
    rendered.write_text(yaml.safe_dump_all(hooks))
    result = run(SCRIPT, "validate", rendered)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2/2 resources valid" in result.stdout


def test_helm_test_hook_takes_its_own_image_and_can_be_disabled(tools: None) -> None:
    def image(*args: str) -> str:
        (pod,) = [
            h for h in helm_test_hooks(render(*REQUIRED, *args, tests=True)) if h["kind"] == "Pod"
        ]
        value: str = pod["spec"]["containers"][0]["image"]
        return value

    assert image("--set", "sidecar.image.digest=sha256:" + "a" * 64) == (
        "rebalance-sidecar@sha256:" + "a" * 64
    )
    assert image(
        "--set", "tests.image.repository=python", "--set", "tests.image.tag=3.12-alpine"
    ) == ("python:3.12-alpine")
    assert (
        image(
            "--set",
            "tests.image.repository=python",
            "--set",
            "global.imageRegistry=mirror.example.com",
        )
        == "mirror.example.com/python:latest"
    )
    assert not helm_test_hooks(render(*REQUIRED, "--set", "tests.enabled=false", tests=True))
    assert not helm_test_hooks(render(*REQUIRED, "--set", "workload.enabled=false", tests=True))
    # No pods to ask: a test that could never pass is left out.
    assert not helm_test_hooks(render(*REQUIRED, "--set", "workload.replicas=0", tests=True))
    for setting, complaint in (
        ("tests.timeoutSeconds=0", "tests/timeoutSeconds"),
        ("tests.image.pullPolicy=Sometimes", "tests/image/pullPolicy"),
        ("tests.imag.tag=1", "'imag' not allowed"),
    ):
        result = helm_template(*REQUIRED, "--set", setting)
        assert result.returncode != 0, setting
        assert complaint in result.stderr, setting


# Run before the test pod's script: TARGET_HOST resolves to RESOLVE_TO's addresses, as
# the headless Service's name does to the pods' IPs in the cluster.
RESOLVE_TO = """
import os, socket
_getaddrinfo = socket.getaddrinfo
def _resolve(host, port, *args, **kwargs):
    if host != os.environ["TARGET_HOST"] or not os.environ.get("RESOLVE_TO"):
        return _getaddrinfo(host, port, *args, **kwargs)
    return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (a, port))
            for a in os.environ["RESOLVE_TO"].split(",")]
socket.getaddrinfo = _resolve
"""


def test_helm_test_pod_passes_when_enough_sidecars_are_ready(
    tools: None, drain_recorder: DrainRecorder
) -> None:
    """Run the rendered test container's command here, against stand-in sidecars."""
    server = drain_recorder
    docs = render(
        *REQUIRED,
        "--set",
        f"sidecar.admin.port={server.port}",
        "--set",
        "tests.timeoutSeconds=1",
        "--set",
        "workload.replicas=1",
        tests=True,
    )
    (pod,) = [h for h in helm_test_hooks(docs) if h["kind"] == "Pod"]
    check = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in check["env"]}
    assert env["ADMIN_PORT"] == str(server.port)
    assert check["command"][:2] == ["python3", "-c"]
    (script,) = check["args"]

    def run_check(**override: str) -> subprocess.CompletedProcess[str]:
        environ = {**env, "TARGET_HOST": "sidecars.test", "RESOLVE_TO": "127.0.0.1", **override}
        return run(sys.executable, "-c", RESOLVE_TO + script, env=environ)

    passed = run_check()
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 of 1 sidecars are ready (1 expected): 127.0.0.1" in passed.stdout
    # Fewer pods answer than the workload has replicas: not done.
    short = run_check(EXPECTED_PODS="2")
    assert short.returncode == 1, short.stdout
    assert "1 of 1 sidecars are ready, 2 expected:" in short.stdout
    # After an upgrade the Service still lists a pod of the previous rollout that
    # drains (503): enough others answer 200, so the release is fine.
    with running(DrainRecorder("127.0.0.2", server.port)) as draining:
        draining.readyz_status = 503
        both = "127.0.0.1,127.0.0.2"
        extra = run_check(RESOLVE_TO=both)
        assert extra.returncode == 0, extra.stdout + extra.stderr
        assert "1 of 2 sidecars are ready (1 expected): 127.0.0.1" in extra.stdout
        # Too few 200s: fails, and lists every answer.
        too_few = run_check(RESOLVE_TO=both, EXPECTED_PODS="2")
        assert too_few.returncode == 1, too_few.stdout + too_few.stderr
        assert "1 of 2 sidecars are ready, 2 expected:" in too_few.stdout
        assert '127.0.0.2: 503 {"ok": false, "reason": "not joined"}' in too_few.stdout
    server.readyz_status = 503
    failed = run_check()
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert '127.0.0.1: 503 {"ok": false, "reason": "not joined"}' in failed.stdout
    unknown = run_check(TARGET_HOST="no-such-host.invalid", RESOLVE_TO="")
    assert unknown.returncode == 1
    assert "no-such-host.invalid:" in unknown.stdout


def test_chart_image_tag_is_the_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert values["sidecar"]["image"]["tag"] == chart["appVersion"] == project["version"]


# -- what the sidecar makes of the manifests' environment ---------------------------------------

# Stand-ins for values that come from Secrets or the downward API.
SECRET_STANDINS = {
    "SIDECAR_API_TOKEN": "token-from-a-secret",
    "SIDECAR_WEBHOOKS": json.dumps(
        [{"id": "app", "url": "http://127.0.0.1:8082/rebalance", "secret": "whsec_c2VjcmV0"}]
    ),
    "SIDECAR_GROUP_INSTANCE_ID": "orders-0",
}


def sidecar_environ(
    sidecar: dict[str, Any], config: dict[str, str] | None = None
) -> dict[str, str]:
    environ = dict(config or {})
    for item in sidecar["env"]:
        name = item["name"]
        environ[name] = item["value"] if "value" in item else SECRET_STANDINS.get(name, "x")
    return environ


def assert_the_sidecar_accepts(environ: dict[str, str]) -> Settings:
    # load_settings reads only the names it knows: a misspelt one would be ignored.
    fields = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    unknown = {
        name
        for name in environ
        if name.startswith(ENV_PREFIX)
        and not name.startswith(f"{ENV_PREFIX}KAFKA_")
        and name not in fields
    }
    assert not unknown, f"not sidecar settings: {sorted(unknown)}"
    return load_settings(environ)


@pytest.mark.parametrize(
    "values", sorted((CHART / "ci").glob("*-values.yaml")), ids=lambda p: p.name
)
def test_the_sidecar_accepts_the_environment_the_chart_gives_it(tools: None, values: Path) -> None:
    docs = render("--values", values)
    workload = next(d for d in docs if d["kind"] in {"Deployment", "StatefulSet"})
    spec = workload["spec"]["template"]["spec"]
    containers = spec.get("initContainers", []) + spec["containers"]
    settings = assert_the_sidecar_accepts(
        sidecar_environ(container(containers, "rebalance-sidecar"))
    )
    assert settings.admin_port == 8081
    assert settings.drain_token is not None
    hooks = [c["lifecycle"]["preStop"] for c in containers if "lifecycle" in c]
    for hook in (h["httpGet"] for h in hooks if "httpGet" in h):
        assert hook["port"] == settings.admin_port
        assert hook["httpHeaders"] == [
            {"name": "X-Drain-Token", "value": settings.drain_token.get_secret_value()}
        ]


def test_the_sidecar_accepts_the_environment_of_the_kustomize_base(tools: None) -> None:
    result = run(KUSTOMIZE, "build", REPO / "deploy" / "kubernetes" / "base")
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    sidecar = container(pod_spec(docs)["initContainers"], "rebalance-sidecar")
    settings = assert_the_sidecar_accepts(sidecar_environ(sidecar, one(docs, "ConfigMap")["data"]))
    assert (settings.api_host, settings.api_port) == ("127.0.0.1", 8080)
    assert settings.api_token is None
    assert settings.assignment_strategy == "cooperative-sticky"


# -- what the example app makes of the manifests' environment -----------------------------------

EXAMPLE_APP = REPO / "deploy" / "example-app"


def example_app_reads() -> dict[str, set[str]]:
    """The environment variable names each example app reads: the Python app through
    `env.get("NAME")` (env = os.environ), the Go app through `os.Getenv("NAME")` and its
    `getenv("NAME", ...)` helper."""
    python = (EXAMPLE_APP / "app.py").read_text()
    go = (EXAMPLE_APP / "go" / "main.go").read_text()
    assert "env = os.environ" in python
    go_names: set[str] = set(re.findall(r'os\.Getenv\("([A-Z0-9_]+)"\)', go))
    for call in re.findall(r"\bgetenv\(([^)]*)\)", go):
        go_names |= set(re.findall(r'"([A-Z0-9_]+)"', call))
    reads = {
        "app.py": set(re.findall(r'\benv\.get\("([A-Z0-9_]+)"', python)),
        "go/main.go": go_names,
    }
    for names in reads.values():  # the parse found the settings both apps document
        assert {"WEBHOOK_SECRET", "PORT", "STORE_DIR", "SIDECAR_URL"} <= names, names
    return reads


def app_container_variables(docs: list[dict[str, Any]]) -> set[str]:
    """Every variable the app container gets: its env, and the keys of the ConfigMaps
    and Secrets it takes whole (envFrom)."""
    app = container(pod_spec(docs)["containers"], "app")
    names = {e["name"] for e in app.get("env", [])}
    for source in app.get("envFrom", []):
        ref = source.get("configMapRef") or source.get("secretRef")
        kind = "ConfigMap" if "configMapRef" in source else "Secret"
        found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == ref["name"]]
        assert found, f"envFrom {kind} {ref['name']} is not in the build"
        names |= {source.get("prefix", "") + k for k in found[0].get("data", {})}
    return names


def test_manifests_give_the_example_app_only_variables_it_reads(tools: None) -> None:
    """The kustomize base set STATE_DIR, which neither example app reads (they read
    STORE_DIR): the store directory was right only because the defaults matched. And
    envFrom handed it every SIDECAR_* setting, drain token included."""
    reads = example_app_reads()
    result = run(KUSTOMIZE, "build", REPO / "deploy" / "kubernetes" / "base")
    assert result.returncode == 0, result.stderr
    builds = {"kustomize base": [d for d in yaml.safe_load_all(result.stdout) if d]}
    # The chart's default app is the example app too.
    builds["chart defaults"] = render(*REQUIRED)
    for build, docs in builds.items():
        given = app_container_variables(docs)
        for reader, names in reads.items():
            assert given <= names, f"{build}: {reader} does not read {sorted(given - names)}"
    # The store the base mounts is where the app keeps it.
    app = container(pod_spec(builds["kustomize base"])["containers"], "app")
    mounts = {m["mountPath"] for m in app["volumeMounts"]}
    assert env_of(app)["STORE_DIR"]["value"] in mounts


# -- the preStop hooks, sent for real ----------------------------------------------------------


class DrainRecorder:
    """A stand-in for the sidecar's admin listener that records drain requests (and
    answers /readyz with readyz_status)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        self.readyz_status = 200
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                status, body = 200, b'{"drained": true}'
                if self.path == "/readyz":
                    status = recorder.readyz_status
                    body = b'{"ok": true, "reason": "joined"}'
                    if status != 200:
                        body = b'{"ok": false, "reason": "not joined"}'
                else:
                    recorder.requests.append(("GET", self.path, self.headers.get("X-Drain-Token")))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@contextlib.contextmanager
def running(recorder: DrainRecorder) -> Iterator[DrainRecorder]:
    recorder.thread.start()
    try:
        yield recorder
    finally:
        recorder.server.shutdown()
        recorder.server.server_close()


@pytest.fixture
def drain_recorder() -> Iterator[DrainRecorder]:
    with running(DrainRecorder()) as recorder:
        yield recorder


def send_like_the_kubelet(hook: dict[str, Any], pod_ip: str = "127.0.0.1") -> int:
    """Run an httpGet lifecycle hook as the kubelet does: GET scheme://podIP:port/path
    with the hook's headers (Kubernetes >= 1.23 sends them: ConsistentHTTPGetHandlers)."""
    get = hook["httpGet"]
    url = f"{get.get('scheme', 'HTTP').lower()}://{get.get('host', pod_ip)}:{get['port']}"
    headers = {h["name"]: h["value"] for h in get.get("httpHeaders", [])}
    return httpx.get(url + get["path"], headers=headers, timeout=30).status_code


@pytest.mark.parametrize("mode", ["native", "classic"])
def test_prestop_hooks_reach_the_drain_path_with_the_token(
    tools: None, drain_recorder: DrainRecorder, mode: str
) -> None:
    docs = render(
        *REQUIRED,
        "--set",
        f"sidecar.mode={mode}",
        "--set",
        f"sidecar.admin.port={drain_recorder.port}",
    )
    spec = pod_spec(docs)
    sidecar = container(spec.get("initContainers", []) + spec["containers"], "rebalance-sidecar")
    token = env_of(sidecar)["SIDECAR_DRAIN_TOKEN"]["value"]
    hooks = [container(spec["containers"], "app")["lifecycle"]["preStop"]]
    if mode == "classic":
        hooks.append(sidecar["lifecycle"]["preStop"])
    for hook in hooks:
        assert send_like_the_kubelet(hook) == 200
    assert drain_recorder.requests == [("GET", "/drain", token)] * len(hooks)


def test_kustomize_base_drains_with_the_token_the_sidecar_gets(tools: None) -> None:
    for overlay in ("base", "overlays/classic-sidecar"):
        result = run(KUSTOMIZE, "build", REPO / "deploy" / "kubernetes" / overlay)
        assert result.returncode == 0, result.stderr
        docs = [d for d in yaml.safe_load_all(result.stdout) if d]
        config = one(docs, "ConfigMap")["data"]
        assert config["SIDECAR_API_HOST"] == "127.0.0.1"
        assert config["SIDECAR_ADMIN_PORT"] == "8081"
        spec = pod_spec(docs)
        containers = spec.get("initContainers", []) + spec["containers"]
        hooks = [c["lifecycle"]["preStop"] for c in containers if "lifecycle" in c]
        assert len(hooks) == (2 if overlay.endswith("classic-sidecar") else 1)
        for hook in hooks:
            assert hook["httpGet"]["path"] == "/drain"
            assert hook["httpGet"]["httpHeaders"] == [
                {"name": "X-Drain-Token", "value": config["SIDECAR_DRAIN_TOKEN"]}
            ]
        sidecar = container(containers, "rebalance-sidecar")
        assert sidecar["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "admin"}
        assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
        assert "SIDECAR_API_TOKEN" not in result.stdout
        assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
        assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False


@pytest.mark.parametrize("below", ["base", "overlays/example", "overlays/classic-sidecar"])
def test_kustomize_overlay_that_changes_the_drain_token_keeps_the_hooks_in_step(
    tools: None, tmp_path: Path, below: str
) -> None:
    """The token is copied into the hooks by a `replacements` entry, which copies the value
    the ConfigMap has where it runs. It ran in the base (and the classic overlay) only: an
    overlay that changed SIDECAR_DRAIN_TOKEN as the docs say gave the sidecar the new token
    and left the old one in the hooks, so every drain was a 401 the kubelet ignores. An
    overlay lists components/drain-token (docs/kubernetes.md, section 11) and the hooks
    follow."""
    deploy = tmp_path / "deploy"
    shutil.copytree(REPO / "deploy" / "kubernetes", deploy / "kubernetes")
    mine = deploy / "kubernetes" / "overlays" / "mine"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"../../{below}"],
                "components": ["../../components/drain-token"],
                "configMapGenerator": [
                    {
                        "name": "rebalance-sidecar-config",
                        "behavior": "merge",
                        "literals": ["SIDECAR_DRAIN_TOKEN=only-this-team-knows-it"],
                    }
                ],
            }
        )
    )
    result = run(KUSTOMIZE, "build", mine)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert one(docs, "ConfigMap")["data"]["SIDECAR_DRAIN_TOKEN"] == "only-this-team-knows-it"
    spec = pod_spec(docs)
    containers = spec.get("initContainers", []) + spec["containers"]
    hooks = [c["lifecycle"]["preStop"]["httpGet"] for c in containers if "lifecycle" in c]
    assert len(hooks) == (2 if below.endswith("classic-sidecar") else 1)
    for hook in hooks:
        assert hook["httpHeaders"] == [
            {"name": "X-Drain-Token", "value": "only-this-team-knows-it"}
        ]


@pytest.mark.parametrize(
    ("mode", "overlay"), [("native", "base"), ("classic", "overlays/classic-sidecar")]
)
def test_kustomize_probes_the_sidecar_as_the_chart_does(
    tools: None, mode: str, overlay: str
) -> None:
    """The base's startup probe had no timeoutSeconds (the kubelet's default, 1 s, where
    the chart gives 3 s) and its readiness probe no failureThreshold; the classic overlay
    dropped the startup probe, which the chart's classic mode keeps. Every field of every
    sidecar probe is now the chart's default, in both modes."""
    spec = pod_spec(render(*REQUIRED, "--set", f"sidecar.mode={mode}"))
    chart = container(spec.get("initContainers", []) + spec["containers"], "rebalance-sidecar")
    result = run(KUSTOMIZE, "build", REPO / "deploy" / "kubernetes" / overlay)
    assert result.returncode == 0, result.stderr
    spec = pod_spec([d for d in yaml.safe_load_all(result.stdout) if d])
    built = container(spec.get("initContainers", []) + spec["containers"], "rebalance-sidecar")
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert built.get(kind) == chart[kind], kind
        assert {"periodSeconds", "timeoutSeconds", "failureThreshold"} <= set(built[kind]), kind


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
    # dumb-init is PID 1 and runs the sidecar as its child (docs/container.md says why).
    assert stage["ENTRYPOINT"] + stage["CMD"] == ["dumb-init", "--", "rebalance-sidecar", "run"]
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


def test_image_carries_oci_labels_and_caches_dependencies_apart_from_the_source() -> None:
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    labels = set(re.findall(r"org\.opencontainers\.image\.([a-z.]+)=", text))
    assert {"title", "version", "revision", "created", "licenses", "source"} <= labels
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in text
    builder = re.split(r"(?im)^FROM\s", text)[1]
    # The dependency wheels are built before the source is copied in.
    assert builder.index("--wheel-dir /wheels/deps") < builder.index("COPY sidecar")
    assert builder.index("/wheels/deps/*.whl") < builder.index("COPY sidecar")
    # The final stage takes the dependencies' virtualenv first, the project's wheel after.
    final = re.split(r"(?im)^FROM\s", text)[-1]
    assert final.index("COPY --from=builder /opt/venv") < final.index("--from=builder /wheels/app")
    assert (REPO / ".dockerignore").read_text().count("!LICENSE") == 1


def test_license_is_the_apache_license() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0")
    assert "END OF TERMS AND CONDITIONS" in text
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"


def test_release_script_builds_the_wheel_sdist_and_chart(tools: None, tmp_path: Path) -> None:
    out = tmp_path / "dist"
    result = run(REPO / "scripts" / "release.sh", env={"RELEASE_OUT": str(out)})
    assert result.returncode == 0, result.stdout + result.stderr
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    wheel = out / f"rebalance_sidecar-{version}-py3-none-any.whl"
    sdist = out / f"rebalance_sidecar-{version}.tar.gz"
    chart = out / f"rebalance-sidecar-{version}.tgz"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [wheel.name, sdist.name, chart.name, "SHA256SUMS"]
    )
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"rebalance_sidecar-{version}.dist-info/entry_points.txt")
    assert "sidecar/cli.py" in names
    assert f"rebalance_sidecar-{version}.dist-info/licenses/LICENSE" in names
    assert b"rebalance-sidecar = sidecar.cli:main" in entry_points
    listing = run("tar", "tzf", sdist).stdout.split()
    assert f"rebalance_sidecar-{version}/LICENSE" in listing
    assert not [n for n in listing if "/tests/" in n or "/.venv" in n or "/.tools" in n]
    # The packaged chart renders like the source chart.
    packaged = helm_template(*REQUIRED, chart=chart)
    assert packaged.returncode == 0, packaged.stderr
    assert packaged.stdout == helm_template(*REQUIRED).stdout
    check_sums = subprocess.run(
        ["sha256sum", "--check", "SHA256SUMS"], cwd=out, capture_output=True, text=True, check=False
    )
    assert check_sums.returncode == 0, check_sums.stdout + check_sums.stderr
    assert check_sums.stdout.count(": OK") == 3


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
    scope = 'namespace="demo", job="rs-rebalance-sidecar"'

    def unscoped(expr: str) -> str:
        return expr.replace("{" + scope + ", ", "{").replace("{" + scope + "}", "").strip()

    def plain_unscoped(expr: str) -> str:
        # `up` is every target's: the plain copy picks the sidecars' jobs by a regex.
        return expr.replace(f"up{{job=~{UP_JOB_REGEX!r}}}".replace("'", '"'), "up").strip()

    assert [r["alert"] for r in plain_rules] == [r["alert"] for r in chart_rules]
    for mine, theirs in zip(plain_rules, chart_rules, strict=True):
        assert plain_unscoped(mine["expr"]) == unscoped(theirs["expr"]), mine["alert"]
        assert mine.get("for") == theirs.get("for"), mine["alert"]
        assert mine["labels"] == theirs["labels"], mine["alert"]
        # The same promtool tests (deploy/monitoring/tests) check both files.
        assert mine["annotations"] == theirs["annotations"], mine["alert"]


def test_alerts_pass_promtool_check_and_unit_tests(tools: None, tmp_path: Path) -> None:
    output = check("rules", tmp_path)
    for name in ("deploy", "chart"):
        assert f"promtool check rules ({name})" in output
        assert f"promtool test rules deploy/monitoring/tests/alerts.test.yaml ({name})" in output
    assert "promtool test rules deploy/monitoring/tests/chart-scope.test.yaml (chart)" in output
    assert output.count("SUCCESS") >= 5
    # Every alert has a unit test that expects it to fire.
    # The shared cases, and the deploy copy's own (an alert whose labels differ).
    files = [REPO / "deploy/monitoring/tests/alerts.test.yaml"]
    files += sorted((REPO / "deploy/monitoring/tests").glob("deploy-*.test.yaml"))
    fired = {
        case["alertname"]
        for file in files
        for test in yaml.safe_load(file.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    plain = yaml.safe_load((REPO / "deploy" / "monitoring" / "prometheusrule.yaml").read_text())
    assert fired == {r["alert"] for r in plain["spec"]["groups"][0]["rules"]}


def chart_alerts(*settings: str) -> dict[str, dict[str, Any]]:
    """The chart's alert rules by name, rendered with ci/monitoring-values.yaml."""
    sets = [arg for setting in settings for arg in ("--set", setting)]
    docs = render("--values", CHART / "ci" / "monitoring-values.yaml", *sets)
    rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
    return {r["alert"]: r for r in rules if "alert" in r}


def test_an_alert_watches_members_that_stay_out_of_the_group(tools: None) -> None:
    """Readiness follows only the first join, so nothing told anyone about a member that
    stays out of its group (Kafka unreachable, a group that never settles, a drained
    sidecar that was never stopped): no shipped alert read member_state."""
    plain = yaml.safe_load((REPO / "deploy" / "monitoring" / "prometheusrule.yaml").read_text())
    rules = [r for r in plain["spec"]["groups"][0]["rules"] if "member_state" in r["expr"]]
    assert [r["alert"] for r in rules] == ["RebalanceSidecarMemberNotStable"]
    (rule,) = rules
    # The states it names are the sidecar's (sidecar/model.py), not guesses.
    states = set(re.findall(r'state=~?"([a-z|]+)"', rule["expr"]))
    assert {s for group in states for s in group.split("|")} == {MemberState.STABLE.value}
    # Not stable over a window longer than a rebalance (a revoke barrier of 30 s plus a
    # static member's session), read with max_over_time so that scrape gaps (a sidecar
    # that crash-loops) do not start it over; `for:` only rides out one evaluation.
    (window,) = set(re.findall(r"max_over_time\([^)]*\[(\d+m)\]\)", rule["expr"]))
    # Past the 6m presence window below by more than a pod's stop after its drain, or a
    # deleted pod fires briefly all the same (it does with 6m, not with 7m).
    assert int(window[:-1]) >= 8
    assert f"[{window}] offset {window}" in rule["expr"]  # not for a pod younger than that
    # Nor for a pod gone: one drained and deleted leaves `stopped` last samples in the
    # window, and the alert fired ~10m after the pod was deleted, on every rollout. 6m
    # outlasts the kubelet's 5m crash-loop backoff (a crash-looping member still fires).
    assert (
        "and on (namespace, pod) max by (namespace, pod) (present_over_time("
        "rebalance_sidecar_member_state[6m]))" in rule["expr"]
    )
    cases = yaml.safe_load((REPO / "deploy/monitoring/tests/alerts.test.yaml").read_text())
    (deleted,) = [t for t in cases["tests"] if "deleted" in t["name"]]
    assert {c["alertname"] for c in deleted["alert_rule_test"]} == {rule["alert"]}
    assert not any(c["exp_alerts"] for c in deleted["alert_rule_test"])
    assert rule["for"] == "1m"
    assert f"for {window} " in rule["annotations"]["description"]
    assert "kubectl logs" in rule["annotations"]["description"]  # what to look at first
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["monitoring"]["prometheusRule"]["memberNotStableFor"] == window
    chart_rule = chart_alerts("monitoring.prometheusRule.memberNotStableFor=30m")[rule["alert"]]
    assert "[30m])) == 0" in chart_rule["expr"]
    assert "[30m] offset 30m" in chart_rule["expr"]
    assert (
        'present_over_time(rebalance_sidecar_member_state{namespace="demo", '
        'job="rs-rebalance-sidecar"}[6m])' in chart_rule["expr"]
    )
    assert chart_rule["for"] == "1m"
    assert "for 30m" in chart_rule["annotations"]["description"]


def test_an_alert_watches_sidecars_prometheus_cannot_scrape(tools: None) -> None:
    """A sidecar that crash-loops or is restarted by liveness leaves gaps, and with them
    every other alert goes quiet: no shipped rule looked at `up`."""
    plain = yaml.safe_load((REPO / "deploy" / "monitoring" / "prometheusrule.yaml").read_text())
    rules = {r["alert"]: r for r in plain["spec"]["groups"][0]["rules"]}
    rule = rules["RebalanceSidecarTargetDown"]
    assert f"up{{job=~{UP_JOB_REGEX!r}}}".replace("'", '"') in rule["expr"]
    # The jobs the shipped monitors give the sidecars: the chart's full name (a
    # ServiceMonitor's Service, a PodMonitor's jobLabel) and the kustomize PodMonitor
    # (no jobLabel: <namespace>/<name>); not other targets.
    podmonitor = yaml.safe_load(
        (REPO / "deploy/kubernetes/components/podmonitor/podmonitor.yaml").read_text()
    )
    assert "jobLabel" not in podmonitor["spec"]
    for job in ("rs-rebalance-sidecar", "orders/" + podmonitor["metadata"]["name"]):
        assert re.fullmatch(UP_JOB_REGEX, job), job
    assert not re.fullmatch(UP_JOB_REGEX, "kafka")
    for monitor in ("podMonitor", "serviceMonitor"):
        docs = render(
            *REQUIRED,
            "--set",
            f"monitoring.{monitor}.enabled=true",
            "--set",
            "monitoring.prometheusRule.enabled=true",
        )
        chart_rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
        chart_rule = next(r for r in chart_rules if r["alert"] == rule["alert"])
        assert 'up{namespace="demo", job="rs-rebalance-sidecar"}' in chart_rule["expr"], monitor


def test_an_alert_says_when_prometheus_scrapes_no_sidecar_at_all(tools: None) -> None:
    """RebalanceSidecarTargetDown needs a target to go down: when Prometheus does not pick
    up the sidecars' monitor at all (its selectors miss the monitor's labels, a common
    first-install mistake) there is no `up` series, and every shipped alert stayed quiet
    for ever. promtool cases (deploy/monitoring/tests) show it fire; here, where it is."""
    plain = yaml.safe_load((REPO / "deploy" / "monitoring" / "prometheusrule.yaml").read_text())
    up_rules = [r["alert"] for r in plain["spec"]["groups"][0]["rules"] if "up{" in r["expr"]]
    assert up_rules == ["RebalanceSidecarTargetDown", "RebalanceSidecarTargetsAbsent"]
    chart_rule = chart_alerts()["RebalanceSidecarTargetsAbsent"]
    # Equality matchers: the alert carries the release's namespace and job, for routing.
    assert chart_rule["expr"] == 'absent(up{namespace="demo", job="rs-rebalance-sidecar"})'
    assert chart_rule["for"] == "10m"
    later = chart_alerts("monitoring.prometheusRule.targetsAbsentFor=30m")[
        "RebalanceSidecarTargetsAbsent"
    ]
    assert later["for"] == "30m"
    assert "scraped for 30m," in later["annotations"]["description"]
    # A sharded Prometheus: every shard but the scraping one would fire.
    assert "RebalanceSidecarTargetsAbsent" not in chart_alerts(
        "monitoring.prometheusRule.targetsAbsentFor="
    )
    # A release that runs no sidecar on purpose does not page for it.
    assert "RebalanceSidecarTargetsAbsent" not in chart_alerts("workload.replicas=0")
    # Pods from a parent chart (workload disabled): the chart cannot count them.
    assert "RebalanceSidecarTargetsAbsent" in chart_alerts(
        "workload.enabled=false", "workload.replicas=0"
    )


def test_alert_descriptions_name_the_configured_sidecar_container(tools: None) -> None:
    rules = chart_alerts("sidecar.name=kafka-agent").values()
    described = [r for r in rules if "kubectl logs" in r["annotations"]["description"]]
    assert {r["alert"] for r in described} >= {
        "RebalanceSidecarMemberNotStable",
        "RebalanceSidecarTargetDown",
    }
    for rule in described:
        description = rule["annotations"]["description"]
        assert "-c kafka-agent" in description, rule["alert"]
        assert "-c rebalance-sidecar" not in description, rule["alert"]


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


def test_the_journal_alerts_keep_their_wait_when_a_value_is_unset(tools: None) -> None:
    """``--set ...journalBacklogFor=null`` (or a parent chart's null) deletes the key: the
    rule must not render an empty ``for:``, which fires without waiting."""
    for alert, key in (
        ("RebalanceSidecarJournalBacklog", "journalBacklogFor"),
        ("RebalanceSidecarJournalNearBudget", "journalNearBudgetFor"),
    ):
        rule = chart_alerts(f"monitoring.prometheusRule.{key}=null")[alert]
        assert rule["for"] == "15m", alert
        assert "for more than 15m" in " ".join(rule["annotations"]["description"].split())
        assert chart_alerts(f"monitoring.prometheusRule.{key}=1h")[alert]["for"] == "1h"
