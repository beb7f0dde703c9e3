#!/usr/bin/env bash
# The container image: a local base, the build, the container checks.
#
#   scripts/image.sh base    a local base image from Debian packages (debootstrap minbase
#                            bookworm, imported as localhost/rebalance-sidecar-base:bookworm);
#                            the rootfs tarball is cached under .cache/image, so a second run
#                            only imports it (and does nothing when the image is present)
#   scripts/image.sh build   rebalance-sidecar:dev from the Dockerfile. IMAGE_BASE picks the base:
#                            "local" (the default, as no registry answers here: the image
#                            above, made when missing), "official" (the Dockerfile's own
#                            python:*-slim, where a registry is reachable), or any image
#   scripts/image.sh test    the container checks (tests/container), after `build`
#   scripts/image.sh env     the environment the commands run podman with (eval-able)
#   scripts/image.sh size    the sizes of the image and of its base, in bytes
#   scripts/image.sh clean   remove the images, the containers.conf and the cached rootfs
#
# Podman comes from Debian (apt-get install podman runc debootstrap, done here when missing,
# non-interactively). The project's own containers.conf (.cache/image/containers.conf, passed
# with CONTAINERS_CONF) keeps the machine's configuration untouched: runc, cgroupfs, and no
# default ulimits (the runtime may not raise RLIMIT_NOFILE/NPROC here).
#
# Builds run with --network host, the host's CA bundle ($SSL_CERT_FILE) mounted over the
# image's and a pip.conf made from the host's (its PIP_INDEX_URL & co. over /etc/pip.conf)
# mounted at /etc/pip.conf, in every RUN and never in the image; podman passes the host's
# proxy variables itself. apt and pip in the build reach what the host reaches.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${IMAGE_CACHE:-$REPO/.cache/image}"
IMAGE="${IMAGE:-rebalance-sidecar:dev}"
BASE_IMAGE="${IMAGE_LOCAL_BASE:-localhost/rebalance-sidecar-base:bookworm}"
SUITE="${IMAGE_SUITE:-bookworm}"
MIRROR="${IMAGE_MIRROR:-http://deb.debian.org/debian}"
# ca-certificates is in the base, as in python:*-slim: installed in a build, its
# post-install script would replace the bundle that the build mounts from the host.
INCLUDE="${IMAGE_BASE_INCLUDE:-ca-certificates}"
# The cached rootfs is named by what made it: other arguments, another tarball.
ROOTFS="$CACHE/rootfs-$SUITE-minbase-$(printf '%s %s %s' "$SUITE" "$MIRROR" "$INCLUDE" | sha256sum | cut -c1-12).tar"
export CONTAINERS_CONF="$CACHE/containers.conf"

say() { printf 'image: %s\n' "$*" >&2; }
die() { printf 'image: error: %s\n' "$*" >&2; exit 1; }

# --- set-up ---------------------------------------------------------------------------------

tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if [[ ${#missing[@]} -gt 0 ]]; then
    [[ $(id -u) == 0 ]] || die "missing ${missing[*]}: apt-get install -y ${missing[*]} (as root)"
    say "installing ${missing[*]} from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${missing[@]}" fuse-overlayfs uidmap slirp4netns containernetworking-plugins </dev/null >&2
  fi
  mkdir -p "$CACHE"
  local conf
  conf='# Written by scripts/image.sh; used through CONTAINERS_CONF only.
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
'
  if [[ ! -f "$CONTAINERS_CONF" || "$(cat "$CONTAINERS_CONF")" != "$conf" ]]; then
    printf '%s' "$conf" >"$CONTAINERS_CONF"
  fi
}

# debootstrap mounts /proc (and more) in the target; never remove or pack through them.
unmount_under() {
  local mount
  while read -r mount; do
    umount -l "$mount" 2>/dev/null || true
  done < <(awk -v d="$1/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
}

have_image() { podman image exists "$1" 2>/dev/null; }

# --- base -----------------------------------------------------------------------------------

cmd_base() {
  tools
  if [[ "${1:-}" != --force ]] && have_image "$BASE_IMAGE"; then
    say "$BASE_IMAGE is present"
    return
  fi
  if [[ ! -s "$ROOTFS" ]]; then
    local dir
    dir="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
    # shellcheck disable=SC2064
    trap "unmount_under '$dir'; rm -rf --one-file-system '$dir'" EXIT
    say "debootstrap --variant=minbase --include=$INCLUDE $SUITE from $MIRROR (a few minutes, once)"
    debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$dir" "$MIRROR" </dev/null >"$CACHE/debootstrap.log" 2>&1 ||
      { tail -20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
    # What an image does not need: apt's downloaded packages and lists, logs, docs.
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/var/log/* \
      "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/locale/*
    # apt in a container: the sources, and no recommends or docs by default.
    printf 'deb %s %s main\ndeb %s %s-updates main\ndeb http://deb.debian.org/debian-security %s-security main\n' \
      "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" "$SUITE" >"$dir/etc/apt/sources.list"
    printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
      >"$dir/etc/apt/apt.conf.d/90-image"
    printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' \
      >"$dir/etc/dpkg/dpkg.cfg.d/90-image"
    unmount_under "$dir"
    tar --numeric-owner --one-file-system -C "$dir" -cf "$ROOTFS.tmp" .
    mv "$ROOTFS.tmp" "$ROOTFS"
    rm -rf --one-file-system "$dir"
    trap - EXIT
  else
    say "rootfs from the cache: ${ROOTFS#"$REPO"/}"
  fi
  say "podman import -> $BASE_IMAGE"
  podman import --quiet --change 'CMD ["/bin/bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$ROOTFS" "$BASE_IMAGE" >/dev/null
}

# --- build ----------------------------------------------------------------------------------

# The base to build from: IMAGE_BASE=official|local|<image>; unset: local (no registry here).
base_ref() {
  case "${IMAGE_BASE:-local}" in
    official) printf '' ;;
    local) printf '%s' "$BASE_IMAGE" ;;
    *) printf '%s' "$IMAGE_BASE" ;;
  esac
}

build_args() {
  local base="$1"
  [[ -n "$base" ]] && printf -- '--build-arg\0PYTHON_IMAGE=%s\0' "$base"
  printf -- '--build-arg\0VERSION=%s\0' "$(version)"
  printf -- '--build-arg\0REVISION=%s\0' "$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  printf -- '--build-arg\0CREATED=%s\0' "$(git -C "$REPO" log -1 --format=%cI 2>/dev/null || echo unknown)"
}

# pip's configuration in the build: the host's /etc/pip.conf with the host's PIP_INDEX_URL,
# PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST and PIP_DEFAULT_TIMEOUT over it, and the CA bundle
# at the path the build mounts it (pip then reaches the index the host reaches).
pip_conf() {
  local cert="$1"
  python3 - "$CACHE/pip.conf" "$cert" <<'EOF'
import configparser, os, sys
conf = configparser.ConfigParser(interpolation=None)
conf.read("/etc/pip.conf")
if not conf.has_section("global"):
    conf.add_section("global")
for name, key in (("PIP_INDEX_URL", "index-url"), ("PIP_EXTRA_INDEX_URL", "extra-index-url"),
                  ("PIP_TRUSTED_HOST", "trusted-host"), ("PIP_DEFAULT_TIMEOUT", "timeout")):
    if os.environ.get(name):
        conf.set("global", key, os.environ[name])
conf.remove_option("global", "find-links")  # a host directory, absent in the build
if sys.argv[2]:
    conf.set("global", "cert", sys.argv[2])
with open(sys.argv[1], "w") as out:
    conf.write(out)
EOF
}

version() {
  sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/pyproject.toml" | head -1
}

cmd_build() {
  tools
  local base
  base="$(base_ref)"
  [[ "$base" == "$BASE_IMAGE" ]] && cmd_base
  local args=()
  mapfile -d '' args < <(build_args "$base")
  local mounts=() cert=""
  # The host's CA bundle where the host trusts an extra CA (apt and pip in the build).
  if [[ -n "${SSL_CERT_FILE:-}" && -f "$SSL_CERT_FILE" ]]; then
    cert=/etc/ssl/certs/ca-certificates.crt
    mounts+=(-v "$(readlink -f "$SSL_CERT_FILE"):$cert:ro")
  fi
  pip_conf "$cert"
  mounts+=(-v "$CACHE/pip.conf:/etc/pip.conf:ro")
  say "podman build -t $IMAGE (base: ${base:-the default of the Dockerfile})"
  # docker format: OCI images have no HEALTHCHECK.
  podman build --format docker --network host --layers "${mounts[@]}" "${args[@]}" \
    -t "$IMAGE" -f "$REPO/Dockerfile" "$REPO" >&2
  say "built $IMAGE"
}

# --- test -----------------------------------------------------------------------------------

cmd_test() {
  tools
  have_image "$IMAGE" || die "no image $IMAGE: run scripts/image.sh build first"
  local py="$REPO/.venv/bin/python"
  [[ -x "$py" ]] || py=python3
  CI="${CI:-}" IMAGE="$IMAGE" "$py" -m pytest "$REPO/tests/container" "$@"
}

cmd_size() {
  tools
  local base
  base="$(podman image inspect --format '{{index .Labels "org.opencontainers.image.base.name"}}' "$IMAGE")"
  printf '%s\t%s\n' "$IMAGE" "$(podman image inspect --format '{{.Size}}' "$IMAGE")"
  printf '%s\t%s\n' "$base" "$(podman image inspect --format '{{.Size}}' "$base")"
}

cmd_clean() {
  tools
  podman rmi -f "$IMAGE" "$BASE_IMAGE" >/dev/null 2>&1 || true
  podman image prune -f >/dev/null 2>&1 || true
  rm -rf "$CACHE"
  say "removed $IMAGE, $BASE_IMAGE and ${CACHE#"$REPO"/}"
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    base) cmd_base "$@" ;;
    build) cmd_build ;;
    test) cmd_test "$@" ;;
    size) cmd_size ;;
    env)
      tools
      printf 'export CONTAINERS_CONF=%q\n' "$CONTAINERS_CONF"
      ;;
    clean) cmd_clean ;;
    *) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
}

main "$@"
