#!/usr/bin/env bash
# The whole test suite from a fresh clone: set-up, static checks, tests.
# Exits non-zero on any failure. Extra arguments go to pytest (e.g. -k, -x, -m "not slow").
#
# Set-up (all idempotent and cached): the virtualenv with the package and its extras,
# helm, kustomize and promtool built from their Go modules, Spark's Kafka connector jars and the
# Kafka broker jars from Maven Central, and a local KRaft broker on 127.0.0.1 (unless
# KAFKA_BOOTSTRAP_SERVERS points at one).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export PATH="$REPO/.venv/bin:$PATH"
export PYTHONDONTWRITEBYTECODE=1

step() { printf '\n== %s\n' "$*" >&2; }
started=$SECONDS

step "set-up: virtualenv and packages"
scripts/bootstrap.sh dev,analytics,tracing

if [[ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]]; then
  step "set-up: Kafka broker (deploy/local/kafka.sh)"
  # Empty unless already running: the tests never delete their topics (see kafka.sh fresh).
  KAFKA_BOOTSTRAP_SERVERS="$(deploy/local/kafka.sh fresh </dev/null)"
  export KAFKA_BOOTSTRAP_SERVERS
  trap 'deploy/local/kafka.sh stop >/dev/null 2>&1 || true' EXIT
fi

step "set-up: deploy tools (helm, kustomize and promtool from Go modules, hadolint, kubernetes-validate)"
scripts/check-deploy.sh tools </dev/null

step "set-up: the Go reference app (tests/handover) and Toxiproxy (link faults), from Go modules"
scripts/build-go-app.sh </dev/null
scripts/toxiproxy.sh </dev/null >/dev/null

step "set-up: the OpenTelemetry Collector (tests/tracing), from Go modules"
scripts/otelcol.sh </dev/null

step "set-up: Spark's Kafka connector jars"
scripts/spark-jars.sh </dev/null >/dev/null

step "set-up: Debian's Chromium for the status page (scripts/chromium.sh)"
scripts/chromium.sh </dev/null

step "ruff"
ruff check .
ruff format --check .

step "mypy --strict"
mypy

step "pytest"
pytest "$@"

step "done in $((SECONDS - started)) s"
