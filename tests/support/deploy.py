"""The deploy checks' tools and renderers: helm, kustomize and scripts/check-deploy.sh.

A conftest plugin: tests/deploy/conftest.py takes its ``tools`` fixture.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check-deploy.sh"
CHART = REPO / "helm" / "rebalance-sidecar"
HELM = REPO / ".tools" / "bin" / "helm"
KUSTOMIZE = REPO / ".tools" / "bin" / "kustomize"
KUBE_VERSION = "1.29.0"
REQUIRED = [
    "--set",
    "sidecar.kafka.bootstrapServers=kafka:9092",
    "--set",
    "sidecar.kafka.groupId=orders",
    "--set",
    "sidecar.kafka.topics={orders}",
]


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


def is_test_hook(doc: dict[str, Any]) -> bool:
    return bool(doc["metadata"].get("annotations", {}).get("helm.sh/hook") == "test")


def render(
    *args: str | Path, kube_version: str = KUBE_VERSION, tests: bool = False
) -> list[dict[str, Any]]:
    """What `helm install` creates; with tests=True also the `helm test` hooks."""
    result = helm_template(*args, kube_version=kube_version)
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return [doc for doc in docs if tests or not is_test_hook(doc)]


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
