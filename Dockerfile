# syntax=docker/dockerfile:1
#
# rebalance-sidecar container image.
#
#   docker build -t rebalance-sidecar:0.1.0 .
#   docker run --rm -e SIDECAR_BOOTSTRAP_SERVERS=... -e SIDECAR_GROUP_ID=... \
#              -e SIDECAR_TOPICS=... rebalance-sidecar:0.1.0
#
# The image runs `rebalance-sidecar run`, exactly the command the integration
# tests start (tests/deploy/test_deploy.py checks that they stay identical).
# Runtime dependencies are pinned by constraints.txt; the final stage has no
# compilers and no build tools, only the wheels built in the first stage.
# Dependencies are built and installed in layers of their own, before the source
# is copied: a change to sidecar/ rebuilds one small wheel, not all of them.

# Pin the base by tag; add "@sha256:<digest>" for fully reproducible builds.
# Where no registry is reachable, any Debian image without Python works as well: the
# stages below install Debian's python3 when the base has none (scripts/image.sh base
# makes one with debootstrap; `--build-arg PYTHON_IMAGE=...` picks it).
ARG PYTHON_IMAGE=python:3.11.14-slim-trixie

FROM ${PYTHON_IMAGE} AS builder

# pip's index and the proxies are the host's: scripts/image.sh mounts a pip.conf (and the
# host's CA bundle) into every RUN, and podman passes the proxy variables through; none of
# it stays in the image.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PATH=/opt/venv/bin:$PATH

# One virtualenv in both bases (the official image's Python or Debian's python3).
# hadolint ignore=DL3008
RUN if ! command -v python3 >/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/venv

WORKDIR /src
COPY pyproject.toml constraints.txt ./

# Every runtime dependency as a wheel, at the pinned versions, from the
# dependency list in pyproject.toml alone, installed into the virtualenv that the
# final stage copies. Binary wheels are preferred so that no compiler is needed
# here either.
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        >requirements.txt \
    && pip wheel --no-cache-dir --prefer-binary --constraint constraints.txt \
        --requirement requirements.txt --wheel-dir /wheels/deps \
    && pip install --no-cache-dir --no-index --no-deps /wheels/deps/*.whl

# Then the project itself (LICENSE goes into the wheel's metadata).
COPY README.md LICENSE ./
COPY sidecar ./sidecar
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels/app .

FROM ${PYTHON_IMAGE}

ARG UID=10001
ARG GID=10001

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH \
    SIDECAR_DATA_DIR=/var/lib/rebalance-sidecar

# dumb-init is PID 1 (see the ENTRYPOINT); Debian's python3 only where the base has no
# Python. A fixed numeric uid/gid so that Kubernetes `runAsNonRoot` can verify it and
# volume ownership (fsGroup) is predictable.
# hadolint ignore=DL3008
RUN if command -v python3 >/dev/null; then python=""; else python="python3"; fi \
    && apt-get update \
    && apt-get install -y --no-install-recommends dumb-init ${python} \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
    && groupadd --system --gid "${GID}" sidecar \
    && useradd --system --uid "${UID}" --gid "${GID}" --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin sidecar \
    && mkdir -p /var/lib/rebalance-sidecar \
    && chown "${UID}:${GID}" /var/lib/rebalance-sidecar

# The dependencies' virtualenv from the builder (exactly the pinned wheels, installed
# offline without resolution), then the project's own wheel: this first layer stays
# cached while only the source changes. (COPY, not a RUN --mount from the builder:
# podman 4.3's buildah cannot mount a stage it took whole from its cache.)
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /wheels/app /opt/wheels
RUN pip install --no-cache-dir --no-index --no-deps /opt/wheels/*.whl \
    && pip check

WORKDIR /var/lib/rebalance-sidecar
USER ${UID}:${GID}

# The admin listener (probes, metrics, drain) on all interfaces; the control API
# (8080) binds 127.0.0.1 unless SIDECAR_API_HOST says otherwise.
EXPOSE 8081
STOPSIGNAL SIGTERM

# Docker-only liveness check (Kubernetes uses the chart's probes instead).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('SIDECAR_ADMIN_PORT', '8081') + '/livez', timeout=4)"]

# PID 1 is dumb-init, the sidecar its only child. A Python PID 1 loses a SIGTERM that
# arrives before its handler is installed (the kernel drops signals PID 1 has no handler
# for), and `docker stop` then waits for the SIGKILL. dumb-init forwards every signal to
# the sidecar and exits with its exit code (0 after a drain; 143 for a SIGTERM before the
# handler). docs/container.md has the details.
ENTRYPOINT ["dumb-init", "--", "rebalance-sidecar"]
CMD ["run"]

# Declared again to reach the label below (an ARG before FROM is only seen by FROM).
ARG PYTHON_IMAGE
# Set by scripts/release.sh (or --build-arg) for the OCI labels; last, so that a new
# revision changes no layer.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown

LABEL org.opencontainers.image.title="rebalance-sidecar" \
      org.opencontainers.image.description="Kafka consumer-group rebalances as signed, durable, ordered webhooks for any application" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/rebalance-sidecar/rebalance-sidecar" \
      org.opencontainers.image.documentation="https://github.com/rebalance-sidecar/rebalance-sidecar/blob/main/docs/kubernetes.md" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
