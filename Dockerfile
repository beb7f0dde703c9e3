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
ARG PYTHON_IMAGE=python:3.11.14-slim-trixie

FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /src
COPY pyproject.toml constraints.txt ./

# Every runtime dependency as a wheel, at the pinned versions, from the
# dependency list in pyproject.toml alone. Binary wheels are preferred so that
# no compiler is needed here either.
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        >requirements.txt \
    && pip wheel --no-cache-dir --prefer-binary --constraint constraints.txt \
        --requirement requirements.txt --wheel-dir /wheels/deps

# Then the project itself (LICENSE goes into the wheel's metadata).
COPY README.md LICENSE ./
COPY sidecar ./sidecar
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels/app .

FROM ${PYTHON_IMAGE}

ARG UID=10001
ARG GID=10001
# Set by scripts/release.sh (or --build-arg) for the OCI labels.
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

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SIDECAR_DATA_DIR=/var/lib/rebalance-sidecar

# A fixed numeric uid/gid so that Kubernetes `runAsNonRoot` can verify it and
# volume ownership (fsGroup) is predictable.
RUN groupadd --system --gid "${GID}" sidecar \
    && useradd --system --uid "${UID}" --gid "${GID}" --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin sidecar \
    && mkdir -p /var/lib/rebalance-sidecar \
    && chown "${UID}:${GID}" /var/lib/rebalance-sidecar

# Install exactly the wheels from the builder, offline, without dependency
# resolution (the set is already complete and pinned), then check consistency.
# Dependencies first: this layer stays cached while only the source changes.
RUN --mount=type=bind,from=builder,source=/wheels/deps,target=/wheels \
    pip install --no-cache-dir --no-index --no-deps /wheels/*.whl
RUN --mount=type=bind,from=builder,source=/wheels/app,target=/wheels \
    pip install --no-cache-dir --no-index --no-deps /wheels/*.whl \
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

# Exec form: the sidecar's own Python process is PID 1 and receives SIGTERM
# directly (no shell in between), and handles it from its first instant. No
# init (tini) is needed: `run` starts no child processes to reap.
ENTRYPOINT ["rebalance-sidecar"]
CMD ["run"]
