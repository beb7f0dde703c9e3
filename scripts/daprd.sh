#!/usr/bin/env bash
# Build Dapr's sidecar (daprd) from its Go module and cache it in .tools/bin.
# Idempotent: does nothing when .tools/bin/daprd already reports the wanted version.
# Used by the handover benchmark (python -m bench --only handover) as the peer sidecar.
# Takes about 4 minutes on two cores; run it early, in the background.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${DAPR_VERSION:-v1.14.0}"
BIN_DIR="$PWD/.tools/bin"
OUT="$BIN_DIR/daprd"
STAMP="$BIN_DIR/daprd.version"
mkdir -p "$BIN_DIR"
if [[ -x "$OUT" && -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
  echo "daprd $VERSION already built: $OUT"
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build daprd" >&2; exit 1; }
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
# The module cache is read-only; build from a writable copy.
SRC_DIR="$(go mod download -json "github.com/dapr/dapr@$VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/daprd-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cp -r "$SRC_DIR" "$WORK/dapr"
chmod -R u+w "$WORK/dapr"
cd "$WORK/dapr"
go build -tags stablecomponents -trimpath -ldflags "-s -w -X github.com/dapr/dapr/pkg/buildinfo.version=${VERSION#v}" \
  -o "$OUT.tmp" ./cmd/daprd
mv "$OUT.tmp" "$OUT"
echo "$VERSION" > "$STAMP"
echo "built $OUT"
