#!/usr/bin/env bash
# A kind cluster on the project's Docker engine, from the node image made here.
#
#   hack/kind/cluster.sh up      creates the cluster (reused when it exists); prints KUBECONFIG=...
#   hack/kind/cluster.sh down    deletes it (the engine is left running: hack/docker/engine.sh stop)
#
# Settings: KIND_CLUSTER (default hybridmq), KIND_WORKERS (default 3 worker nodes next to the one
# control-plane node), KIND_WAIT (default 300s, how long `kind create` waits for Ready nodes).
# The kubeconfig is kept in $HYBRIDMQ_CACHE/kind/<cluster>.kubeconfig.
#
# On a cgroup v1 host the kubelet of Kubernetes 1.35 refuses to start unless its configuration says
# failCgroupV1: false; the patch below says so (kind already skips kubeadm's preflight checks).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${HYBRIDMQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridmq}"
name="${KIND_CLUSTER:-hybridmq}"
workers="${KIND_WORKERS:-3}"
kubeconfig="${cache_root}/kind/${name}.kubeconfig"
say() { echo "[kind-cluster $(date -u +%H:%M:%S)] $*" >&2; }

[[ "${workers}" =~ ^[0-9]+$ ]] || { say "KIND_WORKERS must be a whole number, not '${workers}'"; exit 2; }
engine="$("${here}/../docker/engine.sh" start)"
export DOCKER_HOST="${engine#DOCKER_HOST=}"
kind="$("${here}/build.sh")"

up() {
  if "${kind}" get clusters 2>/dev/null | grep -qx "${name}"; then
    "${kind}" get kubeconfig --name "${name}" >"${kubeconfig}"
    echo "KUBECONFIG=${kubeconfig}"
    return 0
  fi
  local image config
  image="$("${here}/node-image.sh")"
  config="$(mktemp "${TMPDIR:-/tmp}/hybridmq-kind-config.XXXXXX")"
  {
    echo "kind: Cluster"
    echo "apiVersion: kind.x-k8s.io/v1alpha4"
    if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
      echo "kubeadmConfigPatches:"
      echo "- |"
      echo "  kind: KubeletConfiguration"
      echo "  failCgroupV1: false"
    fi
    echo "nodes:"
    echo "- role: control-plane"
    for _ in $(seq 1 "${workers}"); do echo "- role: worker"; done
  } >"${config}"
  say "kind create cluster ${name}: 1 control-plane + ${workers} workers from ${image}"
  mkdir -p "$(dirname "${kubeconfig}")"
  if ! "${kind}" create cluster --name "${name}" --image "${image}" --config "${config}" \
    --kubeconfig "${kubeconfig}" --wait "${KIND_WAIT:-300s}" >&2; then
    rm -f "${config}"
    say "kind create cluster failed (logs: ${kind} export logs --name ${name})"
    exit 1
  fi
  rm -f "${config}"
  echo "KUBECONFIG=${kubeconfig}"
}

down() {
  "${kind}" delete cluster --name "${name}" --kubeconfig "${kubeconfig}" >&2
  rm -f "${kubeconfig}"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) say "usage: $0 up|down"; exit 2 ;;
esac
