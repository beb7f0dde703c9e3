#!/usr/bin/env bash
# Build the Go reference app (deploy/example-app/go: franz-go + the Standard Webhooks Go library)
# into .tools/bin/handover-go-app. Idempotent: rebuilds only when its sources changed.
# Modules come from the Go module proxy (go.sum pins them).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC="deploy/example-app/go"
OUT=".tools/bin/handover-go-app"
STAMP="$OUT.sum"
command -v go >/dev/null || { echo "go is required to build the Go reference app" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
SUM="$( (cd "$SRC" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) -print0 \
  | sort -z | xargs -0 sha256sum; go version) | sha256sum | cut -d' ' -f1)"
if [[ -x "$OUT" && -f "$STAMP" && "$(cat "$STAMP")" == "$SUM" ]]; then
  echo "$OUT is up to date"
  exit 0
fi
(cd "$SRC" && GOFLAGS="${GOFLAGS:--buildvcs=false}" go build -trimpath -o "$OLDPWD/$OUT.tmp" .)
mv "$OUT.tmp" "$OUT"
echo "$SUM" > "$STAMP"
echo "built $OUT"
