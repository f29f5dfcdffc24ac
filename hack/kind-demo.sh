#!/usr/bin/env bash
# HybridMQ on a laptop with Docker and kind: watch a failover.
#
#   hack/kind-demo.sh            create (or reuse) a kind cluster, build and load both images,
#                                install the chart, create a BrokerCluster, start producers, delete
#                                the primary MM of a fixed partition, show the partitions failing
#                                over, then audit the run and print its verdict
#
# Everything is made here when missing (no registry needed): the project's Docker engine
# (hack/docker/engine.sh), kind (hack/kind/build.sh), kubectl and helm (hack/k8sbin/build.sh), the
# kind node image (hack/kind/node-image.sh) and the cluster (hack/kind/cluster.sh, KIND_WORKERS
# workers, default 3). For the audit, the project's venv (`make setup`: the audit, `hybridmq audit`,
# is a PySpark job, so Java 17 too).
#
# Settings (environment):
#   CLUSTER_NAME=hybridmq     kind cluster           NAMESPACE=hybridmq-demo    BrokerCluster namespace
#   RELEASE=hybridmq          helm release           OPERATOR_NAMESPACE=hybridmq-system
#   TAG=dev                   image tag              BROKER_CLUSTER=demo        BrokerCluster name
#   MESSAGES=20000            per producer           RATE=500                   msgs/s per producer
#   WATCH_SECONDS=30          watch after the kill   AUDIT_PYTHON=.venv/bin/python  (runs the audit)
#   WARMUP_SECONDS=10         load before the kill   AUDIT_LOCAL_PORT=(free)    port-forward to a CM
#   SKIP_BUILD=1              reuse loaded images    DELETE_CLUSTER=1           delete the cluster at the end
#   FAILURE=pod               what fails: pod (delete the primary MM's pod) or node (`docker stop` the
#                             kind node running it; started again at the end)
#   AUDIT_REPORT=$TMPDIR/hybridmq-demo-audit.json    the audit's JSON report
# The last line printed is the audit's verdict (verdict=PASS ... or verdict=FAIL ...) followed by the
# failover times: status_updated_s (pod deleted -> the partition's status names a new primary at a new
# epoch) and producers_resumed_s (pod deleted -> the partition's reported log end grows again). The
# exit status is 0 only on PASS.
set -euo pipefail

CLUSTER_NAME="${CLUSTER_NAME:-hybridmq}"
NAMESPACE="${NAMESPACE:-hybridmq-demo}"
OPERATOR_NAMESPACE="${OPERATOR_NAMESPACE:-hybridmq-system}"
RELEASE="${RELEASE:-hybridmq}"
TAG="${TAG:-dev}"
BROKER_CLUSTER="${BROKER_CLUSTER:-demo}"
MESSAGES="${MESSAGES:-20000}"
RATE="${RATE:-500}"
WATCH_SECONDS="${WATCH_SECONDS:-30}"
WARMUP_SECONDS="${WARMUP_SECONDS:-10}"
SKIP_BUILD="${SKIP_BUILD:-0}"
FAILURE="${FAILURE:-pod}"
DELETE_CLUSTER="${DELETE_CLUSTER:-0}"
CM_PORT=7400 # the operator's CM client port (hybridmq_operator.names.CM_CLIENT_PORT)

OPERATOR_IMAGE="ghcr.io/hybridmq/operator:${TAG}"
BROKER_IMAGE="ghcr.io/hybridmq/broker:${TAG}"
LOAD_JOB="${BROKER_CLUSTER}-load"
BOOTSTRAP="${BROKER_CLUSTER}.${NAMESPACE}.svc:${CM_PORT}"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
AUDIT_PYTHON="${AUDIT_PYTHON:-${repo}/.venv/bin/python}"
AUDIT_REPORT="${AUDIT_REPORT:-${TMPDIR:-/tmp}/hybridmq-demo-audit.json}"
context="kind-${CLUSTER_NAME}"
export KIND_CLUSTER="${CLUSTER_NAME}"
workdir="$(mktemp -d "${TMPDIR:-/tmp}/hybridmq-demo.XXXXXX")"
background_pids=()
stopped_node=""
[[ "${FAILURE}" == pod || "${FAILURE}" == node ]] || {
  echo "kind-demo: FAILURE must be pod or node, not '${FAILURE}'" >&2
  exit 2
}

step_no=0
step() {
  step_no=$((step_no + 1))
  printf '\n\033[1m==> %d. %s\033[0m\n' "${step_no}" "$*"
}
info() { printf '    %s\n' "$*"; }
die() {
  printf 'kind-demo: %s\n' "$*" >&2
  exit 1
}
k() { kubectl --context "${context}" "$@"; }
now_ms() { python3 -c 'import time; print(int(time.time() * 1000))' 2>/dev/null || echo "$(($(date +%s) * 1000))"; }

cleanup() {
  local pid
  for pid in "${background_pids[@]+"${background_pids[@]}"}"; do
    kill "${pid}" 2>/dev/null || true
  done
  rm -rf "${workdir}"
  if [[ -n "${stopped_node}" ]]; then
    docker start "${stopped_node}" >/dev/null || true
  fi
  if [[ "${DELETE_CLUSTER}" == 1 ]]; then
    hack/kind/cluster.sh down || true
  fi
}
trap cleanup EXIT

# The tools: ours (built once, cached) unless the PATH has them.
engine="$(hack/docker/engine.sh start)" || die "no Docker engine (hack/docker/engine.sh start)"
export DOCKER_HOST="${engine#DOCKER_HOST=}"
command -v kind >/dev/null || PATH="$(dirname "$(hack/kind/build.sh)"):${PATH}"
command -v kubectl >/dev/null && command -v helm >/dev/null || PATH="$(hack/k8sbin/build.sh):${PATH}"
for tool in docker kind kubectl helm; do
  command -v "${tool}" >/dev/null || die "${tool} is not on PATH"
done
docker info >/dev/null 2>&1 || die "the Docker engine is not running"

# --- 1. cluster -------------------------------------------------------------------------------------
step "kind cluster ${CLUSTER_NAME}"
kind get clusters 2>/dev/null | grep -qx "${CLUSTER_NAME}" && info "reusing the existing cluster"
kubeconfig="$(hack/kind/cluster.sh up)" || die "the kind cluster could not be created"
export KUBECONFIG="${kubeconfig#KUBECONFIG=}"
k cluster-info | awk "NR == 1"
k get nodes -o wide

# --- 2. images --------------------------------------------------------------------------------------
if [[ "${SKIP_BUILD}" != 1 ]]; then
  step "docker build ${OPERATOR_IMAGE} and ${BROKER_IMAGE}"
  # The repository's Dockerfiles, FROM the official Python image or its local stand-in.
  OPERATOR_IMAGE="${OPERATOR_IMAGE}" BROKER_IMAGE="${BROKER_IMAGE}" hack/docker/build-images.sh >/dev/null

  step "kind load docker-image"
  kind load docker-image --name "${CLUSTER_NAME}" "${OPERATOR_IMAGE}" "${BROKER_IMAGE}"
fi

# --- 3. chart ---------------------------------------------------------------------------------------
step "helm upgrade --install ${RELEASE} (CRDs, operator, RBAC)"
helm --kube-context "${context}" upgrade --install "${RELEASE}" helm/hybridmq \
  --namespace "${OPERATOR_NAMESPACE}" --create-namespace \
  --set image.operator.tag="${TAG}" --set image.broker.tag="${TAG}" \
  --wait --timeout 5m
if [[ "${SKIP_BUILD}" != 1 ]]; then
  # The tag did not change, so a running operator keeps the image it started with: restart it.
  k -n "${OPERATOR_NAMESPACE}" rollout restart deployment -l app.kubernetes.io/instance="${RELEASE}"
  k -n "${OPERATOR_NAMESPACE}" rollout status deployment -l app.kubernetes.io/instance="${RELEASE}" --timeout=5m
fi
k -n "${OPERATOR_NAMESPACE}" get deploy,pods -l app.kubernetes.io/instance="${RELEASE}"

# --- 4. BrokerCluster -------------------------------------------------------------------------------
step "BrokerCluster ${NAMESPACE}/${BROKER_CLUSTER}: 2 CMs, 3 MMs, 3 fixed partitions x 2 copies"
k create namespace "${NAMESPACE}" --dry-run=client -o yaml | k apply -f -
k apply -f - <<YAML
apiVersion: hybridmq.io/v1alpha1
kind: BrokerCluster
metadata:
  name: ${BROKER_CLUSTER}
  namespace: ${NAMESPACE}
spec:
  image: ${BROKER_IMAGE}
  imagePullPolicy: IfNotPresent
  connectionManagers:
    replicas: 2
  messageManagers:
    replicas: 3
    storage:
      size: 1Gi
  partitions:
    fixed:
      count: 3
      replicas: 2
    onDemand:
      perMessageManager: 1
YAML
info "waiting for the cluster to be Ready"
k -n "${NAMESPACE}" wait "brokercluster/${BROKER_CLUSTER}" --for=condition=Ready --timeout=5m
k -n "${NAMESPACE}" get hbc,pods -o wide
k -n "${NAMESPACE}" get hpart

# --- 5. load ----------------------------------------------------------------------------------------
step "load: a fixed and an on-demand producer, ${MESSAGES} messages each at about ${RATE}/s"
# The producers read numbered lines from stdin (hybridmq produce sends each line as a message).
# A queue keeps its records until they are consumed, so the audit reads every one of them (a topic
# without subscribers keeps none, and its audit would check nothing).
load_script="$(
  cat <<'SH'
#!/bin/sh
# load.sh PARTITION_TYPE: MESSAGES numbered messages to queue:demo, a pause of PAUSE s every 50.
set -eu
i=0
while [ "${i}" -lt "${MESSAGES}" ]; do
  i=$((i + 1))
  echo "demo-$1-${i}"
  [ $((i % 50)) -ne 0 ] || sleep "${PAUSE}"
done | hybridmq produce queue:demo --partition-type "$1" --key "demo-$1"
SH
)"
pause="$(awk -v rate="${RATE}" 'BEGIN { printf "%.3f", 50 / rate }')"
k -n "${NAMESPACE}" delete job "${LOAD_JOB}" --ignore-not-found --wait
k -n "${NAMESPACE}" create configmap "${LOAD_JOB}" --from-literal=load.sh="${load_script}" \
  --dry-run=client -o yaml | k apply -f -
containers=""
for type in fixed on-demand; do
  containers+="$(
    cat <<CONTAINER
        - name: ${type}
          image: ${BROKER_IMAGE}
          imagePullPolicy: IfNotPresent
          command: ["/bin/sh", "/load/load.sh", "${type}"]
          env:
            - {name: HYBRIDMQ_BOOTSTRAP, value: "${BOOTSTRAP}"}
            - {name: HYBRIDMQ_TLS_CA, value: /ca/ca.crt}
            - {name: MESSAGES, value: "${MESSAGES}"}
            - {name: PAUSE, value: "${pause}"}
          volumeMounts:
            - {name: tmp, mountPath: /tmp}
            - {name: load, mountPath: /load, readOnly: true}
            - {name: ca, mountPath: /ca, readOnly: true}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
CONTAINER
  )"$'\n'
done
k apply -f - <<YAML
apiVersion: batch/v1
kind: Job
metadata:
  name: ${LOAD_JOB}
  namespace: ${NAMESPACE}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels:
        app.kubernetes.io/name: hybridmq-demo-load
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        runAsGroup: 10001
        seccompProfile:
          type: RuntimeDefault
      volumes:
        - name: tmp
          emptyDir: {}
        # TLS: the producers verify the CMs with the cluster CA (the operator's Secret for clients).
        - name: ca
          secret: {secretName: ${BROKER_CLUSTER}-cluster-ca-cert}
        - name: load
          configMap:
            name: ${LOAD_JOB}
      containers:
${containers}
YAML
info "the producers reach the CMs at ${BOOTSTRAP} (the Service's DNS name)"
k -n "${NAMESPACE}" wait pod -l "job-name=${LOAD_JOB}" --for=condition=Ready --timeout=3m
info "producers running; letting them warm up"
sleep "${WARMUP_SECONDS}"
k -n "${NAMESPACE}" get hpart

# --- 6. failover ------------------------------------------------------------------------------------
# The fixed partition the producer writes to (the longest log), among those whose primary MM may
# fail: with FAILURE=node, one sharing its node with neither the producers nor the operator (a node
# failure must take down neither the load nor the one operator that fails over; a standby operator
# takes over only once the dead one's peering record expires).
load_node="$(k -n "${NAMESPACE}" get pod -l "job-name=${LOAD_JOB}" -o jsonpath='{.items[0].spec.nodeName}')"
operator_node="$(k -n "${OPERATOR_NAMESPACE}" get pod -l app.kubernetes.io/instance="${RELEASE}" \
  --field-selector=status.phase=Running -o jsonpath='{.items[0].spec.nodeName}')"
partition=""
longest=-1
for candidate in $(k -n "${NAMESPACE}" get hpart -o jsonpath='{range .items[?(@.spec.type=="fixed")]}{.metadata.name}{" "}{end}'); do
  candidate_primary="$(k -n "${NAMESPACE}" get hpart "${candidate}" -o jsonpath='{.status.primary}')"
  [[ -n "${candidate_primary}" ]] || continue
  candidate_node="$(k -n "${NAMESPACE}" get pod "${candidate_primary}" -o jsonpath='{.spec.nodeName}')"
  if [[ "${FAILURE}" == node ]]; then
    [[ "${candidate_node}" != "${load_node}" && "${candidate_node}" != "${operator_node}" ]] || continue
  fi
  candidate_end="$(k -n "${NAMESPACE}" get hpart "${candidate}" -o jsonpath='{.status.logEndOffset}')"
  if ((${candidate_end:-0} > longest)); then
    partition="${candidate}"
    longest="${candidate_end:-0}"
  fi
done
[[ -n "${partition}" ]] ||
  die "no fixed partition with a primary away from the producers (${load_node}) and the operator (${operator_node})"
primary="$(k -n "${NAMESPACE}" get hpart "${partition}" -o jsonpath='{.status.primary}')"
epoch="$(k -n "${NAMESPACE}" get hpart "${partition}" -o jsonpath='{.status.epoch}')"
primary_node="$(k -n "${NAMESPACE}" get pod "${primary}" -o jsonpath='{.spec.nodeName}')"
k -n "${NAMESPACE}" get pods -o wide
if [[ "${FAILURE}" == node ]]; then
  step "stop the kind node ${primary_node} running the primary MM of ${partition} (${primary}, epoch ${epoch})"
else
  step "delete the primary MM of ${partition}: pod ${primary} on ${primary_node} (epoch ${epoch})"
fi

info "kubectl get hpart -w (every change of a partition's status is a line):"
# Background jobs run kubectl itself (not the k function), so that $! is kubectl's PID.
kubectl --context "${context}" -n "${NAMESPACE}" get hpart --watch-only --output-watch-events &
watch_pid="$!"
background_pids+=("${watch_pid}")
sleep 1

start_ms="$(now_ms)"
if [[ "${FAILURE}" == node ]]; then
  stopped_node="${primary_node}"
  docker stop --time 0 "${primary_node}" >/dev/null
else
  k -n "${NAMESPACE}" delete pod "${primary}" --wait=false
fi
new_primary="${primary}"
new_epoch="${epoch}"
deadline=$((SECONDS + 120))
while [[ "${new_primary}" == "${primary}" || "${new_epoch}" == "${epoch}" ]]; do
  ((SECONDS < deadline)) || die "no new primary for ${partition} after 120 s"
  sleep 0.2
  new_primary="$(k -n "${NAMESPACE}" get hpart "${partition}" -o jsonpath='{.status.primary}')"
  new_epoch="$(k -n "${NAMESPACE}" get hpart "${partition}" -o jsonpath='{.status.epoch}')"
done
elapsed_ms=$(($(now_ms) - start_ms))
status_updated_s="$((elapsed_ms / 1000)).$(printf '%03d' $((elapsed_ms % 1000)))"
# The producers resumed when the partition's log end (as the new primary reports it) grows.
end_at_failover="$(k -n "${NAMESPACE}" get hpart "${partition}" -o jsonpath='{.status.logEndOffset}')"
producers_resumed_s=none
while ((SECONDS < deadline)); do
  # Finished producers cannot resume: the load must outlast the failover (MESSAGES / RATE seconds).
  [[ -z "$(k -n "${NAMESPACE}" get job "${LOAD_JOB}" -o jsonpath='{.status.completionTime}')" ]] || break
  end_now="$(k -n "${NAMESPACE}" get hpart "${partition}" -o jsonpath='{.status.logEndOffset}')"
  if [[ -n "${end_now}" && "${end_now}" -gt "${end_at_failover:-0}" ]]; then
    resumed_ms=$(($(now_ms) - start_ms))
    producers_resumed_s="$((resumed_ms / 1000)).$(printf '%03d' $((resumed_ms % 1000)))"
    break
  fi
  sleep 0.2
done
info "producers resumed on ${partition} (its log end grew) ${producers_resumed_s} s after the ${FAILURE} failure"
info "failover: ${partition} primary ${primary} -> ${new_primary}, epoch ${epoch} -> ${new_epoch}," \
  "seen ${status_updated_s} s after the ${FAILURE} failure"
info "watching for ${WATCH_SECONDS} s more (the replacement backup, the on-demand drain and its garbage collection)"
sleep "${WATCH_SECONDS}"
kill "${watch_pid}" 2>/dev/null || true

k -n "${NAMESPACE}" get hpart -o wide
k -n "${NAMESPACE}" get events --field-selector involvedObject.kind=Partition --sort-by=.lastTimestamp |
  tail -n 20 || true

# --- 7. audit ---------------------------------------------------------------------------------------
step "wait for the producers to finish"
if ! k -n "${NAMESPACE}" wait "job/${LOAD_JOB}" --for=condition=Complete --timeout=15m; then
  k -n "${NAMESPACE}" logs "job/${LOAD_JOB}" --all-containers --tail=50 || true
  die "the load job did not complete"
fi
k -n "${NAMESPACE}" logs "job/${LOAD_JOB}" --all-containers --tail=5 --prefix || true

step "audit: per-producer order in fixed partitions, no acknowledged message lost, no duplicate"
# `python -m hybridmq.spark.audit` is `hybridmq audit`: a PySpark job, run from the project's venv
# on this machine against a CM reached through a port-forward. The port-forward goes to a Ready CM
# pod on a running node: `port-forward service/...` picks a pod of the Service by itself, and after
# a node failure that could be the CM on the stopped node (still listed, and even Ready, until the
# node controller notices), whose kubelet no longer answers: the port-forward was refused.
[[ -x "${AUDIT_PYTHON}" ]] || die "${AUDIT_PYTHON} not found: run \`make setup\` (or set AUDIT_PYTHON)"
local_port="${AUDIT_LOCAL_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
audit_cm=""
deadline=$((SECONDS + 180))
while [[ -z "${audit_cm}" ]]; do
  ((SECONDS < deadline)) || die "no Ready CM pod on a running node to reach for the audit"
  audit_cm="$(k -n "${NAMESPACE}" get pods -l "app.kubernetes.io/component=cm,app.kubernetes.io/instance=${BROKER_CLUSTER}" \
    -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.spec.nodeName}{" "}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    awk -v stopped="${stopped_node}" '$2 != stopped && $3 == "True" { print $1; exit }')"
  [[ -n "${audit_cm}" ]] || sleep 1
done
info "the audit reaches CM ${audit_cm} through a port-forward"
kubectl --context "${context}" -n "${NAMESPACE}" port-forward "pod/${audit_cm}" \
  "${local_port}:${CM_PORT}" >"${workdir}/port-forward.log" 2>&1 &
forward_pid="$!"
background_pids+=("${forward_pid}")
for _ in $(seq 1 100); do
  grep -q "Forwarding from" "${workdir}/port-forward.log" && break
  kill -0 "${forward_pid}" 2>/dev/null || break
  sleep 0.2
done
grep -q "Forwarding from" "${workdir}/port-forward.log" ||
  die "kubectl port-forward to ${audit_cm} did not start: $(tail -n 3 "${workdir}/port-forward.log")"
audit_status=0
# TLS: the CMs' certificate carries 127.0.0.1 (port-forward); the client verifies it with the CA.
kubectl --context "${context}" -n "${NAMESPACE}" get secret "${BROKER_CLUSTER}-cluster-ca-cert" \
  -o jsonpath='{.data.ca\.crt}' | base64 -d >"${workdir}/ca.crt"
HYBRIDMQ_TLS_CA="${workdir}/ca.crt" "${AUDIT_PYTHON}" -m hybridmq.spark.audit --bootstrap "127.0.0.1:${local_port}" \
  --report "${AUDIT_REPORT}" | tee "${workdir}/audit.log" || audit_status=$?
verdict="$(grep -E '^verdict=' "${workdir}/audit.log" | tail -n 1 || true)"

info "report: ${AUDIT_REPORT}"
if [[ "${DELETE_CLUSTER}" != 1 ]]; then
  info "cluster ${CLUSTER_NAME} kept (kind delete cluster --name ${CLUSTER_NAME}, or DELETE_CLUSTER=1 next time)"
fi
# The last line is the verdict, with the failover times.
times="status_updated_s=${status_updated_s} producers_resumed_s=${producers_resumed_s}"
printf '\n\033[1m%s %s\033[0m\n' "${verdict:-verdict=FAIL (the audit printed no verdict; exit status ${audit_status})}" "${times}"
[[ "${audit_status}" == 0 && "${verdict}" == verdict=PASS* ]]
