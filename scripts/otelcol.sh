#!/usr/bin/env bash
# Build a minimal OpenTelemetry Collector (OTLP receiver, file and debug exporters) from its Go
# modules into .tools/bin/otelcol: the real OTLP receiver of the tracing tests (tests/tracing).
# Idempotent: does nothing when .tools/bin/otelcol was built at the wanted version.
# The collector's modules are kept at one release; the contrib file exporter is taken at
# v0.161.0 (newer ones did not build here). Takes several minutes on two cores the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${OTELCOL_VERSION:-v0.161.0}"
BIN_DIR="$PWD/.tools/bin"
OUT="$BIN_DIR/otelcol"
STAMP="$BIN_DIR/otelcol.version"
# The stamp names the release and the source: a changed main.go is built again.
VERSION="$VERSION $(sha256sum scripts/otelcol/main.go | cut -c1-12)"
mkdir -p "$BIN_DIR"
if [[ -x "$OUT" && -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
  echo "otelcol $VERSION already built: $OUT"
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build otelcol" >&2; exit 1; }
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/otelcol-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cp scripts/otelcol/main.go "$WORK/main.go"
cd "$WORK"
go mod init rebalance-sidecar/otelcol >/dev/null 2>&1
core=go.opentelemetry.io/collector
release="${VERSION%% *}"
go get "$core/otelcol@$release" "$core/receiver/otlpreceiver@$release" \
  "$core/exporter/debugexporter@$release" \
  "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter@$release"
# The confmap providers are released with confmap (the v1 line): take the one otelcol uses.
confmap="$(go list -m -f '{{.Version}}' "$core/confmap")"
go get "$core/confmap/provider/fileprovider@$confmap" "$core/confmap/provider/envprovider@$confmap"
go mod tidy
go build -trimpath -ldflags "-s -w" -o "$OUT.tmp" .
mv "$OUT.tmp" "$OUT"
echo "$VERSION" > "$STAMP"
echo "built $OUT"
