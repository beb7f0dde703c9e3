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

# Pin the base by tag; add "@sha256:<digest>" for fully reproducible builds.
ARG PYTHON_IMAGE=python:3.11.14-slim-trixie

FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /src
COPY pyproject.toml constraints.txt ./
COPY README.md ./
COPY sidecar ./sidecar

# Build the project and every runtime dependency as wheels, at the pinned
# versions. Binary wheels are preferred so that no compiler is needed here either.
RUN pip wheel --no-cache-dir --prefer-binary --constraint constraints.txt \
        --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}

ARG UID=10001
ARG GID=10001

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
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --no-deps /wheels/*.whl \
    && pip check

WORKDIR /var/lib/rebalance-sidecar
USER ${UID}:${GID}

EXPOSE 8080
STOPSIGNAL SIGTERM

# Docker-only liveness check (Kubernetes uses the chart's probes instead).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('SIDECAR_API_PORT', '8080') + '/healthz', timeout=4)"]

ENTRYPOINT ["rebalance-sidecar"]
CMD ["run"]
