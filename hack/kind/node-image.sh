#!/usr/bin/env bash
# The kind node image for our Kubernetes release, made here: no registry is reachable, so kind's
# base image, the node binaries and every image a kind cluster starts are built on this machine.
#
#   hack/kind/node-image.sh      prints the node image name (building it when the engine lacks it)
#
# Steps (each kept by a cache: Go builds in hack/kind/node-binaries.sh, images by the engine):
#   1. host Go builds: containerd, crictl, CNI plugins, kubelet/kubeadm/kubectl/kube-proxy, the
#      control plane, etcd, CoreDNS, local-path-provisioner; pause from C (node-binaries.sh)
#   2. the images kubeadm and kind's add-on manifests name, with the tags they expect: FROM scratch
#      for static binaries, FROM a Debian tools image for kube-proxy, the pod network and the
#      local-path helper
#   3. the node base (node/Dockerfile: kind's images/base files and packages, our binaries)
#   4. like `kind build node-image`: a container of the base imports every image into containerd,
#      gets kind's add-on manifests and /kind/version, and is committed as the node image
#
# Settings: KIND_NODE_IMAGE (default hybridmq.local/kind-node:v<k8s>), K8S_VERSION (1.35.4),
# KIND_VERSION (v0.33.0), KIND_NODE_REBUILD=1 (rebuild even when the image exists).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.35.4}"
KIND_VERSION="${KIND_VERSION:-v0.33.0}"
node_image="${KIND_NODE_IMAGE:-hybridmq.local/kind-node:v${K8S_VERSION}}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
docker_dir="${here}/../docker"
say() { echo "[kind-node $(date -u +%H:%M:%S)] $*" >&2; }

engine="$("${docker_dir}/engine.sh" start)"
export DOCKER_HOST="${engine#DOCKER_HOST=}"
if [[ "${KIND_NODE_REBUILD:-0}" != 1 ]] && docker image inspect "${node_image}" >/dev/null 2>&1; then
  echo "${node_image}"
  exit 0
fi

bin="$(K8S_VERSION="${K8S_VERSION}" "${here}/node-binaries.sh")"
kind_src="$(cd "${here}/../k8sbin/kube" && go mod download -json "sigs.k8s.io/kind@${KIND_VERSION}" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
base="$("${docker_dir}/base-image.sh" "$(sed -n 's/^ARG PYTHON_IMAGE=//p' "${here}/../../Dockerfile")")"
ctx="$(mktemp -d "${TMPDIR:-/tmp}/hybridmq-kind-node.XXXXXX")"
container=""
cleanup() {
  [[ -z "${container}" ]] || docker rm -f -v "${container}" >/dev/null 2>&1 || true
  rm -rf "${ctx}"
}
trap cleanup EXIT

# docker build (the classic builder: BuildKit would fetch its frontend from a registry), quiet
# unless it fails.
dbuild() {
  DOCKER_BUILDKIT=0 docker build -q "$@" >/dev/null 2>"${ctx}/build.err" || {
    cat "${ctx}/build.err" >&2
    return 1
  }
}

# Hard links where the cache and the context share a filesystem (the binaries are large).
place() { cp -lL "$1" "$2" 2>/dev/null || cp -L "$1" "$2"; }

# A FROM scratch image holding one static binary: image_of TAG BINARY [ENTRYPOINT]
image_of() {
  local tag="$1" binary="$2" entry="${3:-}" d="${ctx}/img-${2}"
  mkdir -p "${d}"
  place "${bin}/${binary}" "${d}/${binary}"
  {
    echo "FROM scratch"
    echo "COPY ${binary} /usr/local/bin/${binary}"
    echo "ENV PATH=/usr/local/bin"
    [[ -z "${entry}" ]] || echo "ENTRYPOINT [\"/usr/local/bin/${binary}\"]"
  } >"${d}/Dockerfile"
  dbuild -t "${tag}" "${d}"
  images+=("${tag}")
}

# 2. The images, with the names kubeadm (`kubeadm config images list`) and kind's manifests use.
images=()
say "images for Kubernetes v${K8S_VERSION}"
kubeadm_images="$("${bin}/kubeadm" config images list --kubernetes-version "v${K8S_VERSION}")"
want() { grep -m1 "/$1:" <<<"${kubeadm_images}"; }
for b in kube-apiserver kube-controller-manager kube-scheduler; do image_of "$(want "${b}")" "${b}"; done
image_of "$(want etcd)" etcd
image_of "$(want coredns)" coredns entry
image_of "$(want pause)" pause entry
# containerd's sandbox image in kind's containerd config may lag kubeadm's pause tag: both exist.
sandbox="$(sed -n 's/^ *sandbox_image *= *"\(.*\)"/\1/p' "${kind_src}/images/base/files/etc/containerd/config.toml")"
docker tag "$(want pause)" "${sandbox}"
images+=("${sandbox}")
addon_images="$(python3 "${here}/node/manifests.py" "${kind_src}" --images)"
addon() { grep -m1 "/$1:" <<<"${addon_images}"; }
image_of "$(addon local-path-provisioner)" local-path-provisioner

tools="hybridmq.local/kind-node-tools:v${K8S_VERSION}"
dbuild --build-arg "BASE_IMAGE=${base}" -t "${tools}" \
  -f "${here}/node/tools.Dockerfile" "${here}/node" >/dev/null
docker tag "${tools}" "$(addon local-path-helper)"
images+=("$(addon local-path-helper)")
mkdir -p "${ctx}/proxy"
place "${bin}/kube-proxy" "${ctx}/proxy/kube-proxy"
printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' "${tools}" >"${ctx}/proxy/Dockerfile"
dbuild -t "$(want kube-proxy)" "${ctx}/proxy"
images+=("$(want kube-proxy)")
mkdir -p "${ctx}/net"
cp "${here}/node/kindnet.py" "${ctx}/net/kindnet.py"
printf 'FROM %s\nCOPY kindnet.py /usr/local/bin/kindnet.py\nENTRYPOINT ["python3", "/usr/local/bin/kindnet.py"]\n' \
  "${tools}" >"${ctx}/net/Dockerfile"
dbuild -t "$(addon kindnetd)" "${ctx}/net"
images+=("$(addon kindnetd)")

# 3. The node base: kind's files with kind's modes (scripts and directories 0755, the rest 0644).
say "node base (kind ${KIND_VERSION} images/base, FROM ${base})"
nb="${ctx}/base"
mkdir -p "${nb}/bin" "${nb}/sbin" "${nb}/cni" "${nb}/kube"
cp -r "${kind_src}/images/base/files" "${nb}/files"
chmod -R u+w "${nb}/files"
find "${nb}/files" -type d -exec chmod 0755 {} +
find "${nb}/files" -type f -exec chmod 0644 {} +
chmod 0755 "${nb}"/files/usr/local/bin/* "${nb}"/files/kind/bin/*
for b in containerd containerd-shim-runc-v2 ctr crictl; do place "${bin}/${b}" "${nb}/bin/${b}"; done
place "${bin}/runc" "${nb}/sbin/runc"
for p in host-local loopback ptp portmap; do place "${bin}/cni/${p}" "${nb}/cni/${p}"; done
for b in kubelet kubeadm kubectl; do place "${bin}/${b}" "${nb}/kube/${b}"; done
cp "${here}/node/Dockerfile" "${nb}/Dockerfile"
node_base="hybridmq.local/kind-node-base:v${K8S_VERSION}"
dbuild --build-arg "BASE_IMAGE=${base}" -t "${node_base}" "${nb}"

# 4. Preload every image into the node's containerd, add kind's manifests, commit.
say "preloading ${#images[@]} images into the node's containerd"
docker save "${images[@]}" -o "${ctx}/images.tar"
mkdir -p "${ctx}/manifests"
python3 "${here}/node/manifests.py" "${kind_src}" defaultCNIManifest >"${ctx}/manifests/default-cni.yaml"
python3 "${here}/node/manifests.py" "${kind_src}" defaultStorageManifest >"${ctx}/manifests/default-storage.yaml"
container="$(docker run -d --entrypoint sleep --security-opt seccomp=unconfined \
  -v "${ctx}:/build:ro" "${node_base}" infinity)"
docker exec "${container}" bash -euc '
  mkdir -p /kind/manifests
  cp /build/manifests/*.yaml /kind/manifests/
  echo "v'"${K8S_VERSION}"'" > /kind/version
  nohup containerd >/tmp/containerd.log 2>&1 &
  for _ in $(seq 1 60); do ctr version >/dev/null 2>&1 && break; sleep 0.5; done
  ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests /build/images.tar >/dev/null
  ctr --namespace=k8s.io images list -q | grep -v "^sha256:" | sort
  pkill containerd
  for _ in $(seq 1 60); do pgrep containerd >/dev/null || break; sleep 0.5; done
  rm -rf /tmp/containerd.log /var/lib/containerd/tmpmounts
' >&2
docker commit \
  --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
  --change 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""' \
  "${container}" "${node_image}" >/dev/null
say "built ${node_image}"
echo "${node_image}"
