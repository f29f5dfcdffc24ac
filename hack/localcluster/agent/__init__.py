"""The node agent: the one stand-in for the kubelet (there is no container runtime here).

It registers a Node and renews its lease; for every pod bound to it, it runs each container's
command as a local process with the pod's environment, its own loopback pod IP and its volumes
bind-mounted in a private mount namespace, runs probes, restarts containers by restart policy with
back-off and reports pod status. Which images it can run is decided by
`localcluster.agent.images.IMAGE_TABLE`.

Modules: `kube` (JSON REST client), `node` (Node + lease heartbeats), `agent` (pod watch),
`pods` (one worker per pod), `container` (one process per container), `env`, `volumes`,
`probes`, `images`, `ipam`, `status`, `quantity`, `hosts` (/etc/hosts in place of cluster DNS),
`events` (pod Events), `server` (the kubelet API subset behind `kubectl logs`).
"""
