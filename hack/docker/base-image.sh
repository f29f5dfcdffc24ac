#!/usr/bin/env bash
# The base image both Dockerfiles build FROM, made here when no registry can hand us one.
#
#   hack/docker/base-image.sh OFFICIAL   prints the image to pass as PYTHON_IMAGE: OFFICIAL when the
#                                        engine has it or can pull it, else a local equivalent
#                                        (LOCAL_BASE_IMAGE, built once and kept by the engine)
#
# The local equivalent is a Debian bookworm rootfs made by debootstrap (minbase) with Debian's
# Python 3.11 (python3, python3-venv, python-is-python3) and ca-certificates, `docker import`ed.
# It also trusts the certificate authorities added on this host (/usr/local/share/ca-certificates),
# so that pip inside a build works behind the same TLS-inspecting proxy the host sits behind, and it
# points pip at the system trust store (Debian's pip otherwise uses its own bundle).
#
# Settings: DEBIAN_MIRROR (default http://deb.debian.org/debian), LOCAL_BASE_IMAGE
# (default hybridmq.local/python:3.11-bookworm), PULL_TIMEOUT (seconds, default 20).
set -euo pipefail

official="${1:?usage: $0 OFFICIAL_IMAGE}"
local_image="${LOCAL_BASE_IMAGE:-hybridmq.local/python:3.11-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
say() { echo "[base-image] $*" >&2; }

has() { docker image inspect "$1" >/dev/null 2>&1; }

if has "${official}"; then
  echo "${official}"
  exit 0
fi
if timeout "${PULL_TIMEOUT:-20}" docker pull -q "${official}" >/dev/null 2>&1; then
  echo "${official}"
  exit 0
fi
if has "${local_image}"; then
  echo "${local_image}"
  exit 0
fi

say "${official} cannot be pulled: building ${local_image} with debootstrap"
command -v debootstrap >/dev/null || {
  say "installing debootstrap (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}
rootfs="$(mktemp -d "${TMPDIR:-/tmp}/hybridmq-rootfs.XXXXXX")"
trap 'rm -rf "${rootfs}"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
  bookworm "${rootfs}" "${mirror}" >&2
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "${rootfs}/usr/local/share/ca-certificates/"
  chroot "${rootfs}" update-ca-certificates >/dev/null
fi
# Nothing a build needs: package lists, caches, documentation.
chroot "${rootfs}" apt-get clean
rm -rf "${rootfs}"/var/lib/apt/lists/* "${rootfs}"/var/cache/* "${rootfs}"/usr/share/{doc,man,info}/*
tar --numeric-owner -C "${rootfs}" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["python3"]' \
  --message "Debian bookworm (debootstrap minbase) with Python 3.11: local stand-in for ${official}" \
  - "${local_image}" >/dev/null
echo "${local_image}"
