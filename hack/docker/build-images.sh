#!/usr/bin/env bash
# Builds both images from the repository's Dockerfiles on the project's engine (hack/docker/engine.sh).
#
#   hack/docker/build-images.sh     starts (or reuses) the engine, finds or makes the base image
#                                   (hack/docker/base-image.sh), builds the operator image (Dockerfile)
#                                   and the broker image (broker-image/Dockerfile); prints DOCKER_HOST=...
#
# Settings: OPERATOR_IMAGE (default ghcr.io/hybridmq/operator:dev), BROKER_IMAGE
# (default ghcr.io/hybridmq/broker:dev), PYTHON_IMAGE (default: the Dockerfiles' own ARG default).
# The classic builder is used: BuildKit would fetch the `# syntax=` frontend from a registry.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
cd "${repo}"
say() { echo "[images $(date -u +%H:%M:%S)] $*" >&2; }

engine="$("${here}/engine.sh" start)"
export DOCKER_HOST="${engine#DOCKER_HOST=}"
official="${PYTHON_IMAGE:-$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)}"
base="$("${here}/base-image.sh" "${official}")"
revision="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

# The builder stage is tagged too (hybridmq.local/build-cache:NAME): the classic builder keeps a
# stage's layers only as long as an image refers to them, and dangling images are pruned below.
build() {
  local tag="$1" dockerfile="$2" name="$3"
  say "docker build ${tag} (${dockerfile}, FROM ${base})"
  local common=(--quiet --build-arg "PYTHON_IMAGE=${base}" -f "${dockerfile}")
  DOCKER_BUILDKIT=0 docker build "${common[@]}" --target builder -t "hybridmq.local/build-cache:${name}" . >/dev/null
  DOCKER_BUILDKIT=0 docker build "${common[@]}" --build-arg "REVISION=${revision}" -t "${tag}" . >/dev/null
}
build "${OPERATOR_IMAGE:-ghcr.io/hybridmq/operator:dev}" Dockerfile operator
build "${BROKER_IMAGE:-ghcr.io/hybridmq/broker:dev}" broker-image/Dockerfile broker
# Earlier builds of our images (now untagged) would otherwise pile up; other images are left alone.
docker image prune --force --filter label=org.opencontainers.image.vendor=HybridMQ >/dev/null
say "done"
echo "DOCKER_HOST=${DOCKER_HOST}"
