#!/usr/bin/env bash
# HybridMQ on a laptop with Docker and kind: watch a failover.
#
#   hack/kind-demo.sh            create (or reuse) a kind cluster, build and load both images,
#                                install the chart, create a BrokerCluster (in a new namespace: an
#                                earlier run's is deleted first), start producers, delete
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
#                             worker holding the most primaries once the cluster is settled, ties: the
#                             leading operator's; the producers run on the control-plane node until
#                             each was acknowledged after the stop and the watch is over (MESSAGES
#                             is then not their count); the worker is started again at the end; see
#                             hack/kind/node_loss.py) or
#                             roll (no failure: a planned restart of every MM, then every CM, one at
#                             a time by the operator, through the restart annotation; the producers
#                             run until it is done; see hack/kind/roll.py)
#   LEASE_SECONDS=1           the MMs' lease (failureDetection.leaseDurationSeconds): a lost MM is
#                             noticed after it; on a machine loaded far beyond its cores a longer
#                             one keeps starved MMs from losing it (and failing over) again and again
#   AUDIT_REPORT=$TMPDIR/hybridmq-demo-audit.json    the audit's JSON report
#   LOGS_DIR=(none)           when the demo fails: every broker and operator pod's log (and its
#                             previous container's), the pods, events and partitions are saved there
#   SLOW_FAILOVER_S=(none)    FAILURE=pod: save them too when the producer resumed later than this
# The last line printed is the audit's verdict (verdict=PASS ... or verdict=FAIL ...) followed by the
# failover times. FAILURE=pod: status_updated_s (pod deleted -> the partition's status names a new
# primary at a new epoch) and producers_resumed_s (pod deleted -> the fixed producer's send that
# waited longest in the 30 s after is acknowledged: the send the failover held, from the
# acknowledgement times and waits the producer logs). FAILURE=node: status_updated_s (node stopped ->
# every partition whose primary was there names a new primary at a new epoch) and
# producers_resumed_s (node stopped -> every producer acknowledged again, from the acknowledgement
# times the producers log). FAILURE=roll: the sends' waits (from the producers' logs) in the MMs'
# part of the roll (max_stall_ms, p99_ms_during), before it (p99_ms_before) and in the CMs' part
# (max_stall_ms_cms, p99_ms_cms), and roll_s. The exit status is 0 only on PASS.
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
SLOW_FAILOVER_S="${SLOW_FAILOVER_S:-}"
LEASE_SECONDS="${LEASE_SECONDS:-1}"
DELETE_CLUSTER="${DELETE_CLUSTER:-0}"
LOGS_DIR="${LOGS_DIR:-}"
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
[[ "${FAILURE}" == pod || "${FAILURE}" == node || "${FAILURE}" == roll ]] || {
  echo "kind-demo: FAILURE must be pod, node or roll, not '${FAILURE}'" >&2
  exit 2
}

# Bold only on a terminal: in a file or a pipe the lines stay plain (grep '^verdict=PASS').
if [[ -t 1 ]]; then bold=$'\033[1m' plain=$'\033[0m'; else bold="" plain=""; fi
step_no=0
step() {
  # Each header says when the step began (seconds since the demo started): where a slow run went.
  step_no=$((step_no + 1))
  printf '\n%s==> %d. %s [at %d s]%s\n' "${bold}" "${step_no}" "$*" "${SECONDS}" "${plain}"
}
info() { printf '    %s\n' "$*"; }
die() {
  printf 'kind-demo: %s\n' "$*" >&2
  exit 1
}
k() { kubectl --context "${context}" "$@"; }
now_ms() { python3 -c 'import time; print(int(time.time() * 1000))' 2>/dev/null || echo "$(($(date +%s) * 1000))"; }

# Every container's log (and its previous one's) of the brokers and the operators, into LOGS_DIR.
save_logs() {
  local ns pod
  mkdir -p "${LOGS_DIR}"
  for ns in "${NAMESPACE}" "${OPERATOR_NAMESPACE}"; do
    k -n "${ns}" get pods -o wide >"${LOGS_DIR}/${ns}.pods.txt" 2>&1 || true
    k -n "${ns}" get events --sort-by=.lastTimestamp >"${LOGS_DIR}/${ns}.events.txt" 2>&1 || true
    for pod in $(k -n "${ns}" get pods -o name 2>/dev/null); do
      k -n "${ns}" logs "${pod}" --all-containers --timestamps >"${LOGS_DIR}/${ns}.${pod#pod/}.log" 2>&1 || true
      k -n "${ns}" logs "${pod}" --all-containers --timestamps --previous \
        >"${LOGS_DIR}/${ns}.${pod#pod/}.previous.log" 2>/dev/null || rm -f "${LOGS_DIR}/${ns}.${pod#pod/}.previous.log"
    done
  done
  k -n "${NAMESPACE}" get hpart -o yaml >"${LOGS_DIR}/partitions.yaml" 2>&1 || true
  # The assignment map: what the brokers follow ahead of the Partition statuses.
  k -n "${NAMESPACE}" get configmap "${BROKER_CLUSTER}-assignments" -o yaml \
    >"${LOGS_DIR}/assignment-map.yaml" 2>&1 || true
  echo "kind-demo: the pods' logs are in ${LOGS_DIR}" >&2
}

cleanup() {
  local status=$? pid
  for pid in "${background_pids[@]+"${background_pids[@]}"}"; do
    kill "${pid}" 2>/dev/null || true
  done
  # Before the stopped node runs again (its pods then restart): what a failed run needs explained.
  if [[ "${status}" != 0 && -n "${LOGS_DIR}" ]]; then
    save_logs || true
  fi
  # The stopped node (written before its docker stop) runs again.
  if [[ -s "${workdir}/stopped-node" ]]; then
    docker start "$(cat "${workdir}/stopped-node")" >/dev/null || true
  fi
  rm -rf "${workdir}"
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
if [[ -n "$(k -n "${NAMESPACE}" get hbc -o name 2>/dev/null)" ]]; then
  # An earlier run's brokers and partitions (perhaps half failed over, if it was interrupted): the
  # audit reads every partition of the namespace, so the run starts from an empty one.
  info "namespace ${NAMESPACE} holds an earlier run's BrokerCluster: deleting the namespace first"
  k delete namespace "${NAMESPACE}" --wait --timeout=5m
fi
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
  failureDetection:
    leaseDurationSeconds: ${LEASE_SECONDS}
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
load_count="${MESSAGES} messages each"
[[ "${FAILURE}" == pod ]] || load_count="until the demo stops them"
step "load: a fixed and an on-demand producer, ${load_count}, at about ${RATE}/s each"
# The producers (hack/kind/load.py, in a ConfigMap) await each message and log its
# acknowledgement's time. A queue keeps its records until they are consumed, so the audit reads
# every one of them (a topic without subscribers keeps none, and its audit would check nothing).
pause="$(awk -v rate="${RATE}" 'BEGIN { printf "%.3f", 50 / rate }')"
# FAILURE=roll: the producers run until the roll is done (the demo then creates STOP_FILE in their
# shared /tmp), however long it takes. FAILURE=node: until each was acknowledged after the stop
# and the watch is over (a fixed count at the rate took minutes more at load averages of 25).
load_messages="${MESSAGES}"
[[ "${FAILURE}" == pod ]] || load_messages=100000000
STOP_FILE=/tmp/stop
k -n "${NAMESPACE}" delete job "${LOAD_JOB}" --ignore-not-found --wait
k -n "${NAMESPACE}" create configmap "${LOAD_JOB}" --from-file=load.py=hack/kind/load.py \
  --dry-run=client -o yaml | k apply -f -
containers=""
for type in fixed on-demand; do
  containers+="$(
    cat <<CONTAINER
        - name: ${type}
          image: ${BROKER_IMAGE}
          imagePullPolicy: IfNotPresent
          command: ["python", "/load/load.py", "${type}"]
          env:
            - {name: HYBRIDMQ_BOOTSTRAP, value: "${BOOTSTRAP}"}
            - {name: HYBRIDMQ_TLS_CA, value: /ca/ca.crt}
            - {name: MESSAGES, value: "${load_messages}"}
            - {name: PAUSE, value: "${pause}"}
            - {name: STOP_FILE, value: "${STOP_FILE}"}
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
# With FAILURE=node the producers run on the control-plane node: any worker may then be stopped,
# and the producers (the clients, outside the failure) must all be acknowledged again.
placement=""
if [[ "${FAILURE}" != pod ]]; then
  # A roll starts from a settled cluster as well: no balancing move in flight.
  info "waiting until the cluster is settled (replicas in sync, primaries balanced)"
  python3 hack/kind/node_loss.py settle --context "${context}" --namespace "${NAMESPACE}" \
    --cluster "${BROKER_CLUSTER}" || die "the cluster did not settle"
fi
if [[ "${FAILURE}" == node ]]; then
  placement="$(
    cat <<'PLACEMENT'
      nodeSelector: {node-role.kubernetes.io/control-plane: ""}
      tolerations:
        - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
PLACEMENT
  )"
fi
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
${placement}
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
# `kubectl wait -l` fails at once while no pod matches, and the Job controller may not have created
# the pod yet (seen on a loaded machine): wait for the pod to exist first.
for _ in $(seq 180); do
  [[ -z "$(k -n "${NAMESPACE}" get pod -l "job-name=${LOAD_JOB}" -o name)" ]] || break
  sleep 1
done
k -n "${NAMESPACE}" wait pod -l "job-name=${LOAD_JOB}" --for=condition=Ready --timeout=3m
load_pod="$(k -n "${NAMESPACE}" get pods -l "job-name=${LOAD_JOB}" -o jsonpath='{.items[0].metadata.name}')"
info "producers running; letting them warm up"
sleep "${WARMUP_SECONDS}"
k -n "${NAMESPACE}" get hpart

# --- 6. failover ------------------------------------------------------------------------------------
watch_hpart() {
  info "kubectl get hpart -w (every change of a partition's status is a line):"
  # Background jobs run kubectl itself (not the k function), so that $! is kubectl's PID.
  kubectl --context "${context}" -n "${NAMESPACE}" get hpart --watch-only --output-watch-events &
  watch_pid="$!"
  background_pids+=("${watch_pid}")
  sleep 1
}
value_of() { grep -o "$1=[^ ]*" "$2" | tail -n 1 | cut -d= -f2; }
# FAILURE=roll and node: the producers stop at their next pause once STOP_FILE is in their /tmp.
stop_producers() {
  k -n "${NAMESPACE}" exec "${load_pod}" -c fixed -- python -c "open('${STOP_FILE}', 'w').close()"
}
producers_resumed_s=none
if [[ "${FAILURE}" == roll ]]; then
  k -n "${NAMESPACE}" get pods -o wide
  step "roll every broker pod of ${BROKER_CLUSTER} through the operator (annotation hybridmq.io/restartedAt)"
  info "each MM: its primaries handed over (epoch + 1), its replicas moved off, its pod deleted, the new"
  info "pod Ready and every partition in sync, then the next; then the CMs, one at a time"
  watch_hpart
  python3 hack/kind/roll.py run --context "${context}" --namespace "${NAMESPACE}" \
    --cluster "${BROKER_CLUSTER}" | tee "${workdir}/roll.log" || die "the roll: $(tail -n 3 "${workdir}/roll.log")"
  kill "${watch_pid}" 2>/dev/null || true
  k -n "${NAMESPACE}" describe hbc "${BROKER_CLUSTER}" | sed -n "/^Status:/,/^Events:/p"
  stop_producers
  info "roll done; the producers stop"
elif [[ "${FAILURE}" == node ]]; then
  # The worker holding the most fixed primaries once the cluster is settled (no balancing move in
  # flight), ties: the one running the leading operator (hack/kind/node_loss.py); the demo waits
  # until every partition whose primary was there has a new one.
  k -n "${NAMESPACE}" get pods -o wide
  step "stop the kind node holding the most primaries of ${BROKER_CLUSTER} (docker stop)"
  watch_hpart
  python3 hack/kind/node_loss.py stop --context "${context}" --namespace "${NAMESPACE}" \
    --cluster "${BROKER_CLUSTER}" --operator-namespace "${OPERATOR_NAMESPACE}" --release "${RELEASE}" \
    --load-job "${LOAD_JOB}" --stopped-file "${workdir}/stopped-node" | tee "${workdir}/node-loss.log" ||
    die "node loss: $(tail -n 3 "${workdir}/node-loss.log")"
  stopped_node="$(cat "${workdir}/stopped-node")"
  start_ms="$(value_of stop_ms "${workdir}/node-loss.log")"
  status_updated_s="$(value_of partitions_failed_over_s "${workdir}/node-loss.log")"
  info "every partition whose primary was on ${stopped_node} has a new one ${status_updated_s} s after the stop"
else
  # The fixed partition the producer writes to (the longest log).
  partition=""
  longest=-1
  for candidate in $(k -n "${NAMESPACE}" get hpart -o jsonpath='{range .items[?(@.spec.type=="fixed")]}{.metadata.name}{" "}{end}'); do
    [[ -n "$(k -n "${NAMESPACE}" get hpart "${candidate}" -o jsonpath='{.status.primary}')" ]] || continue
    candidate_end="$(k -n "${NAMESPACE}" get hpart "${candidate}" -o jsonpath='{.status.logEndOffset}')"
    if ((${candidate_end:-0} > longest)); then
      partition="${candidate}"
      longest="${candidate_end:-0}"
    fi
  done
  [[ -n "${partition}" ]] || die "no fixed partition with a primary"
  primary="$(k -n "${NAMESPACE}" get hpart "${partition}" -o jsonpath='{.status.primary}')"
  epoch="$(k -n "${NAMESPACE}" get hpart "${partition}" -o jsonpath='{.status.epoch}')"
  primary_node="$(k -n "${NAMESPACE}" get pod "${primary}" -o jsonpath='{.spec.nodeName}')"
  k -n "${NAMESPACE}" get pods -o wide
  step "delete the primary MM of ${partition}: pod ${primary} on ${primary_node} (epoch ${epoch})"
  watch_hpart
  # One watch on the Partition (a line per change of its status, no polling) until it names a new
  # primary at a new epoch. When the producers resumed comes from their own log, after they finish.
  exec {watch_fd}< <(exec timeout 120 kubectl --context "${context}" -n "${NAMESPACE}" get hpart \
    "${partition}" --watch -o jsonpath='{.status.primary} {.status.epoch}{"\n"}')
  partition_watch_pid="$!"
  background_pids+=("${partition_watch_pid}")
  start_ms="$(now_ms)"
  k -n "${NAMESPACE}" delete pod "${primary}" --wait=false
  new_primary=""
  new_epoch="${epoch}"
  while read -r -u "${watch_fd}" seen_primary seen_epoch; do
    [[ -n "${seen_primary}" && "${seen_primary}" != "${primary}" && "${seen_epoch}" != "${epoch}" ]] || continue
    elapsed_ms=$(($(now_ms) - start_ms))
    status_updated_s="$((elapsed_ms / 1000)).$(printf '%03d' $((elapsed_ms % 1000)))"
    new_primary="${seen_primary}"
    new_epoch="${seen_epoch}"
    break
  done
  kill "${partition_watch_pid}" 2>/dev/null || true
  exec {watch_fd}<&-
  [[ -n "${new_primary}" ]] || die "no new primary for ${partition} after 120 s"
  info "failover: ${partition} primary ${primary} -> ${new_primary}, epoch ${epoch} -> ${new_epoch}," \
    "seen ${status_updated_s} s after the pod deletion"
fi
if [[ "${FAILURE}" != roll ]]; then
  info "watching for ${WATCH_SECONDS} s more (the replacement backup, the on-demand drain and its garbage collection)"
  sleep "${WATCH_SECONDS}"
  kill "${watch_pid}" 2>/dev/null || true
fi
if [[ "${FAILURE}" == node ]]; then
  # Each producer's newest acknowledgement is later than the stop (or 150 s went by: the audit's
  # check of the acknowledgement times then says which producer was not acknowledged again).
  deadline=$((SECONDS + 150))
  for type in fixed on-demand; do
    while ((SECONDS < deadline)); do
      newest="$(k -n "${NAMESPACE}" logs "${load_pod}" -c "${type}" --tail=4 |
        awk '$1 == "acked" { t = $3 } END { print t + 0 }')"
      ((newest < start_ms)) || break
      sleep 1
    done
  done
  stop_producers
  info "both producers acknowledged after the stop; they stop"
fi

k -n "${NAMESPACE}" get hpart -o wide
k -n "${NAMESPACE}" get events --field-selector involvedObject.kind=Partition --sort-by=.lastTimestamp |
  tail -n 20 || true

# --- 7. audit ---------------------------------------------------------------------------------------
step "wait for the producers to finish"
# Complete, or Failed (a producer gave up: no point waiting out the 15 minutes).
job_state=""
deadline=$((SECONDS + 900))
while [[ -z "${job_state}" ]] && ((SECONDS < deadline)); do
  job_state="$(k -n "${NAMESPACE}" get job "${LOAD_JOB}" \
    -o jsonpath='{.status.conditions[?(@.status=="True")].type}' | grep -oE 'Complete|Failed' || true)"
  [[ -n "${job_state}" ]] || sleep 2
done
if [[ "${job_state}" != Complete ]]; then
  k -n "${NAMESPACE}" logs "job/${LOAD_JOB}" --all-containers --tail=50 || true
  die "the load job did not complete (${job_state:-still running after 15 min})"
fi
k -n "${NAMESPACE}" logs "job/${LOAD_JOB}" --all-containers --tail=5 --prefix || true
# Each producer's log: its acknowledgements (`acked ...`) and its send log (`<producer id>,<sequence>`
# per acknowledged message), which the audit checks against what the cluster stores.
mkdir -p "${workdir}/send-logs"
for type in fixed on-demand; do
  k -n "${NAMESPACE}" logs "job/${LOAD_JOB}" -c "${type}" >"${workdir}/${type}"
  grep -E '^[0-9]+(\.[0-9]+)?,[0-9]+$' "${workdir}/${type}" >"${workdir}/send-logs/${type}.csv" ||
    die "the ${type} producer logged no acknowledged message"
done
if [[ "${FAILURE}" == node ]]; then
  # Every producer acknowledged again after the stop: its first acknowledgement logged after it.
  python3 hack/kind/node_loss.py acks --since-ms "${start_ms}" "${workdir}/fixed" "${workdir}/on-demand" |
    tee "${workdir}/acks.log" || die "a producer was not acknowledged after the node stopped"
  producers_resumed_s="$(value_of producers_acked_s "${workdir}/acks.log")"
elif [[ "${FAILURE}" == pod ]]; then
  # The fixed producer writes to the partition that failed over: its send held by the failover, one
  # in flight before the status named the new primary (a second's slack for the CMs to learn it).
  sent_within_s="$(awk -v t="${status_updated_s}" 'BEGIN { printf "%.3f", t + 1 }')"
  python3 hack/kind/node_loss.py stall --since-ms "${start_ms}" --sent-within-s "${sent_within_s}" \
    "${workdir}/fixed" |
    tee "${workdir}/stall.log" || die "the fixed producer logged no acknowledgement after the deletion"
  producers_resumed_s="$(value_of producers_resumed_s "${workdir}/stall.log")"
  info "the fixed producer resumed ${producers_resumed_s} s after the pod deletion" \
    "(its longest wait: $(value_of producer_longest_wait_ms "${workdir}/stall.log") ms)"
  # A slow failover that still passed: its logs explain where the time went.
  if [[ -n "${SLOW_FAILOVER_S}" && -n "${LOGS_DIR}" ]] &&
    awk -v t="${producers_resumed_s}" -v limit="${SLOW_FAILOVER_S}" 'BEGIN { exit !(t > limit) }'; then
    info "slower than ${SLOW_FAILOVER_S} s: saving the pods' logs"
    save_logs || true
  fi
fi
times=""
if [[ "${FAILURE}" == roll ]]; then
  # How long each send waited, by the phase of the roll it began in (hack/kind/roll.py stalls).
  python3 hack/kind/roll.py stalls --start-ms "$(value_of roll_start_ms "${workdir}/roll.log")" \
    --mms-done-ms "$(value_of mms_done_ms "${workdir}/roll.log")" \
    --end-ms "$(value_of roll_done_ms "${workdir}/roll.log")" "${workdir}/fixed" "${workdir}/on-demand" |
    tee "${workdir}/stalls.log" || die "no send during the roll"
  times="$(tail -n 1 "${workdir}/stalls.log") roll_s=$(value_of roll_s "${workdir}/roll.log")"
fi

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
  --send-log "${workdir}/send-logs" --report "${AUDIT_REPORT}" | tee "${workdir}/audit.log" || audit_status=$?
verdict="$(grep -E '^verdict=' "${workdir}/audit.log" | tail -n 1 || true)"

info "report: ${AUDIT_REPORT}"
if [[ "${DELETE_CLUSTER}" != 1 ]]; then
  info "cluster ${CLUSTER_NAME} kept (kind delete cluster --name ${CLUSTER_NAME}, or DELETE_CLUSTER=1 next time)"
fi
# The last line is the verdict, with the failover times (the roll's stalls).
[[ -n "${times}" ]] || times="status_updated_s=${status_updated_s} producers_resumed_s=${producers_resumed_s}"
if [[ "${FAILURE}" == node ]]; then
  # The node loss's own figures again, on the one line no background watch can interleave with.
  times="${times} $(grep -oE '\b(primaries_by_node|operator_leader_stopped|operator_nodes|stopped_node|partitions_lost|failed_over_partitions)=[^ ]*' \
    "${workdir}/node-loss.log" | tr '\n' ' ')"
fi
printf '\n%s%s %s%s\n' "${bold}" "${verdict:-verdict=FAIL (the audit printed no verdict; exit status ${audit_status})}" \
  "${times}" "${plain}"
[[ "${audit_status}" == 0 && "${verdict}" == verdict=PASS* ]]
