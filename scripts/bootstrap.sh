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

digest="$(cat "$REPO/pyproject.toml" "$REPO/constraints.txt" 2>/dev/null | sha256sum | cut -d' ' -f1)"
want="$digest $EXTRAS"
if [[ -f "$STAMP" ]]; then
  read -r had_digest had_extras <"$STAMP" || true
  if [[ "$had_digest" == "$digest" ]]; then
    # Nothing to do when every extra asked for is installed already (scripts/run.sh asks
    # for none in a checkout bootstrapped for the tests).
    missing=""
    IFS=, read -r -a asked <<<"$EXTRAS"
    for extra in "${asked[@]}"; do
      [[ ",${had_extras:-}," == *",$extra,"* ]] || missing+="$extra,"
    done
    [[ -z "$missing" ]] && exit 0
    # Keep what was installed: the union of the extras.
    [[ -n "${had_extras:-}" ]] && EXTRAS="$had_extras,${missing%,}" && want="$digest $EXTRAS"
  fi
fi
target="$REPO${EXTRAS:+[$EXTRAS]}"
echo "bootstrap: installing rebalance-sidecar${EXTRAS:+[$EXTRAS]} into $VENV" >&2
constraints=()
[[ -f "$REPO/constraints.txt" ]] && constraints=(-c "$REPO/constraints.txt")
"$VENV/bin/pip" install --quiet --upgrade pip </dev/null >&2
"$VENV/bin/pip" install --quiet "${constraints[@]}" -e "$target" </dev/null >&2
printf '%s\n' "$want" >"$STAMP"
