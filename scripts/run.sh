#!/usr/bin/env bash
# Run the sidecar. With SIDECAR_BOOTSTRAP_SERVERS set it joins that cluster
# (`rebalance-sidecar run`, settings from SIDECAR_*); without, it runs the demo against
# librdkafka's embedded mock cluster (no Kafka, no Java needed).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$REPO/scripts/bootstrap.sh" dev
if [[ -n "${SIDECAR_BOOTSTRAP_SERVERS:-}" ]]; then
  exec "$REPO/.venv/bin/rebalance-sidecar" run "$@"
fi
exec "$REPO/.venv/bin/rebalance-sidecar" demo "$@"
