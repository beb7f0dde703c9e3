#!/usr/bin/env bash
# Release artefacts, into dist/ (or $RELEASE_OUT):
#
#   rebalance_sidecar-<version>-py3-none-any.whl   the Python package (what the image installs)
#   rebalance_sidecar-<version>.tar.gz             its source distribution
#   rebalance-sidecar-<version>.tgz                the Helm chart (helm package)
#   SHA256SUMS
#
#   scripts/release.sh
#
# Refuses to build when the versions disagree: pyproject.toml's version, the
# chart's appVersion and its default image tag are one version. The container
# image is built from the Dockerfile with the same version:
#   docker build --build-arg VERSION=<version> --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t rebalance-sidecar:<version> .
# Offline: the wheel is built without build isolation with the venv's hatchling
# (pyproject.toml's dev extra), helm comes from scripts/check-deploy.sh tools.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"
PY="$VENV/bin/python"
HELM="$REPO/.tools/bin/helm"
CHART="$REPO/helm/rebalance-sidecar"
OUT="${RELEASE_OUT:-$REPO/dist}"

say() { printf '==> %s\n' "$*"; }
die() { printf 'release: %s\n' "$*" >&2; exit 1; }

[[ -x "$PY" ]] || die "no Python venv at $VENV (scripts/bootstrap.sh creates it)"
[[ -x "$HELM" ]] || "$REPO/scripts/check-deploy.sh" tools >/dev/null

version="$("$PY" - "$REPO" <<'PY'
import sys
import tomllib
from pathlib import Path

import yaml

repo = Path(sys.argv[1])
project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"]
chart = yaml.safe_load((repo / "helm/rebalance-sidecar/Chart.yaml").read_text())
tag = yaml.safe_load((repo / "helm/rebalance-sidecar/values.yaml").read_text())["sidecar"]["image"]["tag"]
found = {"pyproject.toml version": project, "Chart.yaml appVersion": chart["appVersion"],
         "values.yaml sidecar.image.tag": str(tag)}
if len(set(found.values())) != 1:
    sys.exit("versions disagree: " + ", ".join(f"{k}={v}" for k, v in found.items()))
print(project)
PY
)"

rm -rf "$OUT"
mkdir -p "$OUT"
say "rebalance-sidecar $version: sdist, then the wheel from the sdist (python -m build)"
"$PY" -m build --no-isolation --outdir "$OUT" "$REPO" >"$OUT/build.log" 2>&1 ||
  { cat "$OUT/build.log" >&2; die "python -m build failed"; }
rm -f "$OUT/build.log"
say "helm package $(basename "$CHART")"
"$HELM" package "$CHART" --destination "$OUT" >/dev/null
(cd "$OUT" && sha256sum -- *.whl *.tar.gz *.tgz >SHA256SUMS)
say "release artefacts in ${OUT#"$REPO"/}:"
(cd "$OUT" && ls -1)
