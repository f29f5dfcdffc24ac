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

build() {
  local tag="$1" dockerfile="$2"
  say "docker build ${tag} (${dockerfile}, FROM ${base})"
  DOCKER_BUILDKIT=0 docker build --quiet \
    --build-arg "PYTHON_IMAGE=${base}" --build-arg "REVISION=${revision}" \
    -f "${dockerfile}" -t "${tag}" . >/dev/null
}
build "${OPERATOR_IMAGE:-ghcr.io/hybridmq/operator:dev}" Dockerfile
build "${BROKER_IMAGE:-ghcr.io/hybridmq/broker:dev}" broker-image/Dockerfile
say "done"
echo "DOCKER_HOST=${DOCKER_HOST}"
