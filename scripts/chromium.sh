#!/usr/bin/env bash
# Debian's Chromium for the status-page tests (driven by Playwright, which never downloads
# a browser here). Idempotent: installs only when /usr/bin/chromium is missing.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
  exit 0
fi
SUDO=()
if [[ "$(id -u)" != 0 ]]; then
  command -v sudo >/dev/null || {
    echo "chromium.sh: not root and no sudo: install Debian's chromium package" >&2
    exit 1
  }
  SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q >&2
"${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium >&2
/usr/bin/chromium --version >&2
