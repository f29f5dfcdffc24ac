#!/usr/bin/env bash
# Builds, on the host, every Go (and the one C) program a kind node image needs, into a cache
# directory keyed by the pinned versions; prints that directory. Nothing is rebuilt when present.
#
#   hack/kind/node-binaries.sh     prints $HYBRIDMQ_CACHE/kind/node-bin/<key> (building what is missing)
#
# Kubernetes node binaries (kubelet, kubeadm, kube-proxy) come from hack/k8sbin/build.sh (same
# release and ldflags as the control plane); the rest through the Go module proxy, static with
# CGO off; runc alone needs cgo (libseccomp), linked statically against the host's libseccomp-dev.
set -euo pipefail

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
RUNC_VERSION="${RUNC_VERSION:-v1.4.3}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.10.0}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.13.1}"
LOCAL_PATH_VERSION="${LOCAL_PATH_VERSION:-v0.0.30}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${HYBRIDMQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridmq}"
# One directory per Kubernetes release; each other program records the version it was built at
# (.NAME.version next to it) and is rebuilt when that differs from the one asked for.
out="${cache_root}/kind/node-bin/v${K8S_VERSION:-1.35.4}"
log() { echo "[node-binaries $(date +%H:%M:%S)] $*" >&2; }

export GOFLAGS="-buildvcs=false -trimpath"
export CGO_ENABLED=0
mkdir -p "${out}"

current() { [[ -x "${out}/$1" && "$(cat "${out}/.$1.version" 2>/dev/null)" == "$2" ]]; }

# go install PKG@VERSION into $out under NAME (unless built at that version); extra args go to go install.
install() {
  local name="$1" pkg="$2"
  shift 2
  current "${name}" "${pkg##*@}" && return 0
  log "go install ${pkg}"
  local tmp
  tmp="$(mktemp -d "${out}/.gobin.XXXXXX")"
  GOBIN="${tmp}" go install "$@" "${pkg}"
  mv "${tmp}/$(basename "${pkg%@*}")" "${out}/${name}"
  rm -rf "${tmp}"
  echo "${pkg##*@}" >"${out}/.${name}.version"
}

# 1. Kubernetes node binaries, next to the control-plane ones.
k8s_dir="$(K8SBIN_NODE=1 "${here}/../k8sbin/build.sh")"
for b in kubelet kubeadm kube-proxy kube-apiserver kube-controller-manager kube-scheduler kubectl etcd; do
  ln -sf "${k8s_dir}/${b}" "${out}/${b}"
done

# 2. The container runtime and its tools, at the versions given above.
ctrd=github.com/containerd/containerd/v2
ctrd_ld="-s -w -X ${ctrd}/version.Version=${CONTAINERD_VERSION} -X ${ctrd}/version.Revision=hybridmq"
for b in containerd containerd-shim-runc-v2 ctr; do
  install "${b}" "${ctrd}/cmd/${b}@${CONTAINERD_VERSION}" \
    -tags "no_aufs no_zfs no_btrfs no_devmapper" -ldflags "${ctrd_ld}"
done
if ! current runc "${RUNC_VERSION}"; then
  if [[ ! -f /usr/lib/x86_64-linux-gnu/libseccomp.a && ! -f /usr/lib/libseccomp.a ]]; then
    log "installing libseccomp-dev (apt-get) for runc's seccomp support"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev >/dev/null; }
  fi
  CGO_ENABLED=1 install runc "github.com/opencontainers/runc@${RUNC_VERSION}" \
    -tags "seccomp netgo osusergo urfave_cli_no_docs" \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v} -extldflags -static"
fi
install crictl "sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}" \
  -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION}"
mkdir -p "${out}/cni"
if ! current cni "${CNI_PLUGINS_VERSION}"; then
  for p in ipam/host-local main/loopback main/ptp meta/portmap; do
    log "go install CNI plugin ${p}"
    GOBIN="${out}/cni" go install -ldflags "-s -w" \
      "github.com/containernetworking/plugins/plugins/${p}@${CNI_PLUGINS_VERSION}"
  done
  echo "${CNI_PLUGINS_VERSION}" >"${out}/.cni.version"
fi

# 3. Add-ons: CoreDNS (the version kubeadm deploys) and the local-path provisioner.
install coredns "github.com/coredns/coredns@${COREDNS_VERSION}" -ldflags "-s -w"
install local-path-provisioner "github.com/rancher/local-path-provisioner@${LOCAL_PATH_VERSION}" -ldflags "-s -w"

# 4. pause, the sandbox holder: the C program of the Kubernetes tree, static.
if [[ ! -x "${out}/pause" ]]; then
  src="$(cd "${here}/../k8sbin/kube" && go list -mod=mod -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
  log "cc -static pause"
  cc -Os -static -DVERSION=v3.10.1-hybridmq -o "${out}/pause.tmp" "${src}"
  strip "${out}/pause.tmp"
  mv "${out}/pause.tmp" "${out}/pause"
fi
log "node binaries ready in ${out}"
echo "${out}"
