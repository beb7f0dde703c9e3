#!/usr/bin/env bash
# Install Toxiproxy's server (a real TCP fault injector for the failure tests) into
# .tools/bin/server. Idempotent: does nothing when it is already there and runs.
#
#   scripts/toxiproxy.sh            # install if missing; prints the binary's path
#
# Environment: TOXIPROXY_VERSION (default: latest), GOPROXY/GOFLAGS as usual for Go.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$REPO/.tools/bin"
SERVER="$BIN/server"
VERSION="${TOXIPROXY_VERSION:-latest}"

if [[ -x "$SERVER" ]] && "$SERVER" -version >/dev/null 2>&1; then
  printf '%s\n' "$SERVER"
  exit 0
fi
command -v go >/dev/null || { echo "toxiproxy.sh: error: go is not installed" >&2; exit 1; }
mkdir -p "$BIN"
echo "toxiproxy.sh: building github.com/Shopify/toxiproxy/v2/cmd/server@$VERSION" >&2
GOBIN="$BIN" go install "github.com/Shopify/toxiproxy/v2/cmd/server@$VERSION"
printf '%s\n' "$SERVER"
