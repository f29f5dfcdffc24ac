#!/usr/bin/env bash
# The Docker engine the project builds and tests its images with.
#
#   hack/docker/engine.sh start    reuse an engine that answers (DOCKER_HOST, /var/run/docker.sock),
#                                  else start a dockerd of our own; prints DOCKER_HOST=... to use
#   hack/docker/engine.sh status   prints DOCKER_HOST=... and "own" or "reused"; exit 1 if none answers
#   hack/docker/engine.sh stop     stops our own dockerd (never a reused engine) and removes its bridge
#   hack/docker/engine.sh install  apt-get installs docker.io when no engine answers and dockerd is missing
#
# Our own dockerd keeps everything under $HYBRIDMQ_CACHE/docker (default ~/.cache/hybridmq/docker):
# data root, exec root, socket, pid file, log. Its containers sit on a bridge of its own
# (HYBRIDMQ_DOCKER_BRIDGE=hmq0, HYBRIDMQ_DOCKER_CIDR=10.213.0.1/24) and user networks come from
# HYBRIDMQ_DOCKER_POOL=10.214.0.0/16; it masquerades them so builds reach the package registries.
# Where the capability bounding set lacks a capability privileged containers ask for, runc is reached
# through hack/docker/runc_caps.py, which drops those from each container's spec.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${HYBRIDMQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridmq}"
dir="${cache_root}/docker"
sock="${dir}/docker.sock"
own_host="unix://${sock}"
pidfile="${dir}/dockerd.pid"
log="${dir}/dockerd.log"
bridge="${HYBRIDMQ_DOCKER_BRIDGE:-hmq0}"
cidr="${HYBRIDMQ_DOCKER_CIDR:-10.213.0.1/24}"
pool="${HYBRIDMQ_DOCKER_POOL:-10.214.0.0/16}"
start_timeout="${HYBRIDMQ_DOCKER_START_TIMEOUT:-60}"

say() { echo "[docker-engine] $*" >&2; }
die() {
  say "$*"
  exit 1
}
answers() { command -v docker >/dev/null && timeout 10 docker -H "$1" version >/dev/null 2>&1; }
own_pid() {
  local pid
  [[ -f "${pidfile}" ]] || return 1
  pid="$(cat "${pidfile}")"
  [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null && echo "${pid}"
}

# The engine to reuse, if one answers: ours first, then DOCKER_HOST, then the system socket.
existing() {
  if own_pid >/dev/null && answers "${own_host}"; then
    echo "${own_host} own"
  elif [[ -n "${DOCKER_HOST:-}" ]] && answers "${DOCKER_HOST}"; then
    echo "${DOCKER_HOST} reused"
  elif [[ -S /var/run/docker.sock ]] && answers unix:///var/run/docker.sock; then
    echo "unix:///var/run/docker.sock reused"
  else
    return 1
  fi
}

# True when the bounding set lacks a capability that the kernel has (privileged containers ask for all).
needs_caps_wrapper() {
  local last bnd
  last="$(cat /proc/sys/kernel/cap_last_cap)"
  bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
  (((16#${bnd} & ((1 << (last + 1)) - 1)) != (1 << (last + 1)) - 1))
}

install_engine() {
  if existing >/dev/null || command -v dockerd >/dev/null; then
    return 0
  fi
  [[ $(id -u) == 0 ]] || die "no Docker engine answers and dockerd is missing: install docker.io (needs root)"
  say "installing docker.io (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
}

start() {
  local found
  if found="$(existing)"; then
    echo "DOCKER_HOST=${found% *}"
    return 0
  fi
  command -v dockerd >/dev/null || die "dockerd is missing: run 'hack/docker/engine.sh install' (or make docker-engine)"
  [[ $(id -u) == 0 ]] || die "starting our own dockerd needs root"
  mkdir -p "${dir}/data" "${dir}/run"
  if ! ip link show "${bridge}" >/dev/null 2>&1; then
    local taken
    taken="$(ip -4 route show match "${cidr%/*}" | grep -v '^default' || true)"
    [[ -z "${taken}" ]] || die "${cidr} collides with a route of this host (${taken}): set HYBRIDMQ_DOCKER_CIDR"
    ip link add "${bridge}" type bridge
    ip addr add "${cidr}" dev "${bridge}"
  fi
  ip link set "${bridge}" up
  # dockerd turns on IP forwarding and sets the FORWARD policy to DROP: remember them for stop.
  if [[ ! -f "${dir}/host-state" ]]; then
    printf '%s %s\n' "$(cat /proc/sys/net/ipv4/ip_forward)" \
      "$(iptables -S FORWARD 2>/dev/null | awk '$1 == "-P" {print $3; exit}')" >"${dir}/host-state"
  fi
  # An empty config file: a daemon.json of the host's engine must not leak into ours.
  echo '{}' >"${dir}/daemon.json"
  local args=(
    --config-file "${dir}/daemon.json"
    --host "${own_host}"
    --data-root "${dir}/data"
    --exec-root "${dir}/run"
    --pidfile "${pidfile}"
    --storage-driver overlay2
    --exec-opt native.cgroupdriver=cgroupfs
    --bridge "${bridge}"
    --default-address-pool "base=${pool},size=24"
    --iptables=true
    --ip-masq=true
  )
  if needs_caps_wrapper; then
    args+=(--add-runtime "runc-caps=${here}/runc_caps.py" --default-runtime runc-caps)
  fi
  say "starting dockerd (log: ${log})"
  setsid dockerd "${args[@]}" >>"${log}" 2>&1 </dev/null &
  local deadline=$((SECONDS + start_timeout))
  until answers "${own_host}"; do
    if ! kill -0 $! 2>/dev/null; then
      tail -20 "${log}" >&2
      die "dockerd exited while starting"
    fi
    ((SECONDS < deadline)) || die "dockerd did not answer within ${start_timeout}s (log: ${log})"
    sleep 0.5
  done
  echo "DOCKER_HOST=${own_host}"
}

stop() {
  local pid
  if pid="$(own_pid)"; then
    say "stopping dockerd ${pid}"
    kill -TERM "${pid}"
    for _ in $(seq 1 60); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "${pid}" 2>/dev/null; then
      say "dockerd ${pid} did not stop within 30s: killing it"
      kill -KILL "${pid}"
    fi
  fi
  rm -f "${pidfile}"
  # dockerd leaves its default network namespace bind-mounted under the exec root.
  local mnt
  awk -v root="${dir}/run/" 'index($5, root) == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r mnt; do umount "${mnt}" || true; done
  if ip link show "${bridge}" >/dev/null 2>&1; then
    ip link delete "${bridge}"
  fi
  if [[ -f "${dir}/host-state" ]]; then
    local forward policy
    read -r forward policy <"${dir}/host-state"
    echo "${forward}" >/proc/sys/net/ipv4/ip_forward
    [[ -z "${policy}" ]] || iptables -P FORWARD "${policy}"
    rm -f "${dir}/host-state"
  fi
}

status() {
  local found
  found="$(existing)" || {
    echo "no Docker engine answers"
    return 1
  }
  echo "DOCKER_HOST=${found% *} ${found#* }"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  install) install_engine ;;
  *) die "usage: $0 start|stop|status|install" ;;
esac
