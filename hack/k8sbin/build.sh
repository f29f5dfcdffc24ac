#!/usr/bin/env bash
# Builds the Kubernetes control-plane binaries (and etcd, kubectl, helm) from source through the
# Go module proxy, at one pinned release, into a cache directory keyed by version.
#
#   hack/k8sbin/build.sh            prints the directory holding the binaries (building if needed)
#   K8SBIN_NODE=1 hack/k8sbin/build.sh   also kubelet, kubeadm and kube-proxy (for the kind node image)
#
# KUBEBUILDER_ASSETS (the envtest convention) overrides everything: if set, it is used as is.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.35.4}"
HELM_VERSION="${HELM_VERSION:-v3.19.0}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${HYBRIDMQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridmq}"
out="${cache_root}/k8s/v${K8S_VERSION}"
kube_binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
[[ "${K8SBIN_NODE:-0}" == 1 ]] && kube_binaries+=(kubelet kubeadm kube-proxy)
binaries=(etcd "${kube_binaries[@]}" helm)

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  echo "${KUBEBUILDER_ASSETS}"
  exit 0
fi

built() {
  local b
  for b in "${binaries[@]}"; do [[ -x "${out}/${b}" ]] || return 1; done
}
if built; then
  echo "${out}"
  exit 0
fi

log() { echo "[k8sbin $(date +%H:%M:%S)] $*" >&2; }
mkdir -p "${out}"
# One build at a time (make lint's helm and make setup may ask together): the second waits, then
# finds the binaries the first built.
exec 9>"${out}/.build.lock"
flock 9
if built; then
  echo "${out}"
  exit 0
fi
export GOFLAGS="-buildvcs=false -trimpath"
export CGO_ENABLED=0

# 1. The wrapper module: its go.mod is generated from k8s.io/kubernetes' own go.mod, replacing every
#    staging module it requires at v0.0.0 by the published v0.<minor>.<patch>.
log "generating the wrapper module for k8s.io/kubernetes v${K8S_VERSION}"
python3 "${here}/gen_gomod.py" "${K8S_VERSION}" "${here}/kube"
cd "${here}/kube"
go mod download k8s.io/kubernetes

major="${K8S_VERSION%%.*}"; rest="${K8S_VERSION#*.}"; minor="${rest%%.*}"
pkg=k8s.io/component-base/version
ldflags="-s -w -X ${pkg}.gitVersion=v${K8S_VERSION} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=v${K8S_VERSION}"

for b in "${kube_binaries[@]}"; do
  [[ -x "${out}/${b}" ]] && continue
  log "go build ${b} (the first build of a release takes a while on 2 cores)"
  go build -mod=mod -ldflags "${ldflags}" -o "${out}/${b}.tmp" "k8s.io/kubernetes/cmd/${b}"
  mv "${out}/${b}.tmp" "${out}/${b}"
done

# 2. etcd at the version this Kubernetes release pins (hack/lib/etcd.sh of the release).
etcd_version="$(sed -n 's/^ETCD_VERSION=\${ETCD_VERSION:-\(.*\)}$/\1/p' "$(go list -mod=mod -m -f '{{.Dir}}' k8s.io/kubernetes)/hack/lib/etcd.sh")"
if [[ ! -x "${out}/etcd" ]]; then
  log "go build etcd v${etcd_version}"
  cd "${here}/etcd"
  cat > go.mod <<GOMOD
module hybridmq.local/k8sbin/etcd

go 1.24

require go.etcd.io/etcd/server/v3 v${etcd_version}
GOMOD
  go mod download go.etcd.io/etcd/server/v3
  go build -mod=mod -ldflags "-s -w" -o "${out}/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "${out}/etcd.tmp" "${out}/etcd"
fi

# 3. helm, pinned, with its version ldflag.
if [[ ! -x "${out}/helm" ]]; then
  log "go install helm ${HELM_VERSION}"
  GOBIN="${out}" go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
fi
log "binaries ready in ${out}"
echo "${out}"
