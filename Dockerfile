# syntax=docker/dockerfile:1
# The HybridMQ operator image (Kopf): runs `hybridmq-operator`.
#
# Build from the repository root:
#   docker build -t ghcr.io/hybridmq/operator:0.1.0 .
#
# Runs as UID/GID 10001 with a read-only root filesystem (/tmp is an emptyDir in the chart).
# Dependencies are pinned by requirements/operator.txt (regenerate with requirements/lock.py).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --- builder: a venv with the pinned dependencies and the project's wheel -------------------------
FROM ${PYTHON_IMAGE} AS builder
# Labelled so that stale builder images can be pruned without touching anyone else's images.
LABEL org.opencontainers.image.vendor="HybridMQ"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY requirements/operator.txt requirements/operator.txt
RUN python -m venv /opt/hybridmq \
 && /opt/hybridmq/bin/pip install --no-cache-dir --requirement requirements/operator.txt
COPY pyproject.toml README.md ./
COPY broker-image/hybridmq broker-image/hybridmq
COPY operator/pyproject.toml operator/pyproject.toml
COPY operator/hybridmq_operator operator/hybridmq_operator
# Two wheels: hybridmq (the library, planner and API models) and hybridmq-operator.
RUN /opt/hybridmq/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /dist . ./operator \
 && /opt/hybridmq/bin/pip install --no-cache-dir --no-deps /dist/hybridmq-*.whl /dist/hybridmq_operator-*.whl \
 && /opt/hybridmq/bin/pip check \
 && /opt/hybridmq/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/hybridmq

# --- runtime ---------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 hybridmq \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin hybridmq
COPY --from=builder /opt/hybridmq /opt/hybridmq
# The labels come after the heavy layers: a new revision changes metadata only, not the cached layers.
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="hybridmq-operator" \
      org.opencontainers.image.description="HybridMQ operator (Kopf): BrokerCluster and Partition resources, failover" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="https://github.com/hybridmq/hybridmq" \
      org.opencontainers.image.url="https://github.com/hybridmq/hybridmq" \
      org.opencontainers.image.vendor="HybridMQ" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
ENV PATH=/opt/hybridmq/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp \
    HOME=/tmp
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["hybridmq-operator"]
