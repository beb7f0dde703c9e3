#!/usr/bin/env bash
# Set up everything on a fresh machine: the virtualenv and the package with its extras.
# Idempotent and quiet when nothing changed (a stamp records what was installed).
#
#   scripts/bootstrap.sh [extras]     default extras: dev,analytics; "" for none
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"
EXTRAS="${1-dev,analytics}"  # "": the runtime dependencies only (what the image installs)
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.bootstrap-stamp"

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  { echo "bootstrap: Python 3.11+ is required (found $("$PYTHON" --version 2>&1))" >&2; exit 1; }

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "bootstrap: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi

want="$(cat "$REPO/pyproject.toml" "$REPO/constraints.txt" 2>/dev/null | sha256sum | cut -d' ' -f1) $EXTRAS"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi
target="$REPO${EXTRAS:+[$EXTRAS]}"
echo "bootstrap: installing rebalance-sidecar${EXTRAS:+[$EXTRAS]} into $VENV" >&2
constraints=()
[[ -f "$REPO/constraints.txt" ]] && constraints=(-c "$REPO/constraints.txt")
"$VENV/bin/pip" install --quiet --upgrade pip </dev/null >&2
"$VENV/bin/pip" install --quiet "${constraints[@]}" -e "$target" </dev/null >&2
printf '%s\n' "$want" >"$STAMP"
