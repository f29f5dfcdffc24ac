# Debian userland for the node-level pods that need one: kube-proxy (iptables, conntrack), the pod
# network (iproute2, Python) and the local-path helper (a shell).
ARG BASE_IMAGE=hybridmq.local/python:3.11-bookworm
FROM ${BASE_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      iptables nftables conntrack ipset iproute2 kmod >/dev/null \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/*
