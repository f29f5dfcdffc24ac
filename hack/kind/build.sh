#!/usr/bin/env bash
# Builds kind (sigs.k8s.io/kind) from source through the Go module proxy, at one pinned release,
# into $HYBRIDMQ_CACHE/kind/<version> (default ~/.cache/hybridmq/kind/v0.33.0), and prints the path
# of the binary. Nothing is built when it is already there.
set -euo pipefail

KIND_VERSION="${KIND_VERSION:-v0.33.0}"
cache_root="${HYBRIDMQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridmq}"
out="${cache_root}/kind/${KIND_VERSION}"

if [[ ! -x "${out}/kind" ]]; then
  echo "[kind $(date +%H:%M:%S)] go install sigs.k8s.io/kind@${KIND_VERSION}" >&2
  mkdir -p "${out}"
  GOBIN="${out}" CGO_ENABLED=0 GOFLAGS="-trimpath" go install "sigs.k8s.io/kind@${KIND_VERSION}"
fi
echo "${out}/kind"
