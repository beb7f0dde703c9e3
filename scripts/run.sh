#!/usr/bin/env bash
# Run the sidecar, installing its runtime dependencies first (not the test tools).
#
# With Kafka settings given (SIDECAR_BOOTSTRAP_SERVERS, or a settings file:
# SIDECAR_CONFIG_FILE / SIDECAR_ENV_FILE) it joins that cluster: `rebalance-sidecar run`,
# settings from SIDECAR_*. Without, it runs the demo against librdkafka's embedded mock
# cluster (no Kafka, no Java needed). Both refuse a SIDECAR_* name they do not know (a
# typo such as SIDECAR_BOOTSTRAP_SERVER) with a suggestion, exit 2; the demo names the
# known ones it ignores.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$REPO/scripts/bootstrap.sh" ""
if [[ -n "${SIDECAR_BOOTSTRAP_SERVERS:-}${SIDECAR_CONFIG_FILE:-}${SIDECAR_ENV_FILE:-}" ]]; then
  exec "$REPO/.venv/bin/rebalance-sidecar" run "$@"
fi
exec "$REPO/.venv/bin/rebalance-sidecar" demo "$@"
