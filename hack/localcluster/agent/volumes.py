"""Pod volumes as host directories, and the bind mounts that put them at each container's mountPath.

Every volume lives at `<pod dir>/volumes/<name>` except hostPath and PVC volumes, which are the
host path itself (for a PVC: the bound PersistentVolume's hostPath, as provisioned by
kube-controller-manager's host-path provisioner). configMap, secret, downwardAPI and projected
volumes (service-account token via the TokenRequest API, kube-root-ca.crt, namespace) are written
as files and refreshed periodically; they are mounted read-only, like the kubelet does.
"""

from __future__ import annotations

import base64
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster.agent.env import ConfigError, PodContext, expand, field_value, resource_value
from localcluster.agent.kube import JSON, Kube

READ_ONLY_KINDS = ("configMap", "secret", "downwardAPI", "projected")
TOKEN_REFRESH_SECONDS = 600.0


class VolumeNotReady(Exception):
    """A volume cannot be set up yet (e.g. its PVC is not bound); retried later."""


@dataclass(frozen=True)
class Mount:
    """A bind mount of `source` (host path) at `target` inside the container's mount namespace."""

    source: Path
    target: str
    read_only: bool


@dataclass
class Volume:
    name: str
    path: Path
    kind: str
    spec: JSON


@dataclass
class VolumeManager:
    """Sets up and refreshes the volumes of one pod."""

    kube: Kube
    pod_dir: Path
    volumes: dict[str, Volume] = field(default_factory=dict)
    _token_times: dict[str, float] = field(default_factory=dict)

    def setup(self, ctx: PodContext) -> None:
        """Create every volume of the pod (idempotent); raises VolumeNotReady or ConfigError."""
        for spec in ctx.pod["spec"].get("volumes", []):
            name = spec["name"]
            if name in self.volumes:
                continue
            self.volumes[name] = self._create(ctx, spec)

    def refresh(self, ctx: PodContext) -> None:
        """Rewrite the content of configMap/secret/downwardAPI/projected volumes."""
        for volume in self.volumes.values():
            if volume.kind in READ_ONLY_KINDS:
                self._write_content(ctx, volume)

    def _create(self, ctx: PodContext, spec: JSON) -> Volume:
        name = spec["name"]
        if "hostPath" in spec:
            host = spec["hostPath"]
            path = Path(host["path"])
            kind_of = host.get("type", "")
            if kind_of == "DirectoryOrCreate" or (kind_of == "" and not path.exists()):
                path.mkdir(parents=True, exist_ok=True)
            elif kind_of == "FileOrCreate" and not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            elif kind_of in ("Directory", "File", "Socket") and not path.exists():
                raise ConfigError(f"hostPath type check failed: {path} does not exist")
            return Volume(name, path, "hostPath", spec)
        if "persistentVolumeClaim" in spec:
            return Volume(name, self._pvc_path(ctx, spec["persistentVolumeClaim"]["claimName"]), "pvc", spec)
        path = self.pod_dir / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        kind = next((k for k in READ_ONLY_KINDS if k in spec), "emptyDir")
        volume = Volume(name, path, kind, spec)
        if kind in READ_ONLY_KINDS:
            self._write_content(ctx, volume)
        return volume

    def _pvc_path(self, ctx: PodContext, claim: str) -> Path:
        namespace = ctx.pod["metadata"]["namespace"]
        pvc = self.kube.get_or_none(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
        if pvc is None:
            raise VolumeNotReady(f'persistentvolumeclaim "{claim}" not found')
        volume_name = pvc.get("spec", {}).get("volumeName")
        if not volume_name or pvc.get("status", {}).get("phase") != "Bound":
            raise VolumeNotReady(f'persistentvolumeclaim "{claim}" is not bound')
        pv = self.kube.get(f"/api/v1/persistentvolumes/{volume_name}")
        source = pv["spec"].get("hostPath") or pv["spec"].get("local")
        if not source:
            raise ConfigError(f"persistentvolume {volume_name} is neither hostPath nor local")
        path = Path(source["path"])
        path.mkdir(parents=True, exist_ok=True)
        return path

    # ------------------------------------------------------------------------------ file content
    def _write_content(self, ctx: PodContext, volume: Volume) -> None:
        spec = volume.spec
        mode = int(spec.get(volume.kind, {}).get("defaultMode", 0o644))
        files: dict[str, tuple[bytes, int]] = {}
        if volume.kind == "configMap":
            files = self._object_files(ctx, "configmap", spec["configMap"], mode)
        elif volume.kind == "secret":
            source = dict(spec["secret"])
            source["name"] = source.get("secretName")
            files = self._object_files(ctx, "secret", source, mode)
        elif volume.kind == "downwardAPI":
            files = self._downward_files(ctx, spec["downwardAPI"].get("items", []), mode)
        elif volume.kind == "projected":
            for source in spec["projected"].get("sources", []):
                files.update(self._projected_files(ctx, source, volume.name, mode))
        for rel, (data, file_mode) in files.items():
            _write_file(volume.path / rel, data, file_mode)

    def _object_files(
        self, ctx: PodContext, kind: str, source: JSON, mode: int
    ) -> dict[str, tuple[bytes, int]]:
        namespace = ctx.pod["metadata"]["namespace"]
        name = source.get("name")
        obj = self.kube.get_or_none(f"/api/v1/namespaces/{namespace}/{kind}s/{name}")
        if obj is None:
            if source.get("optional"):
                return {}
            raise ConfigError(f'{kind} "{name}" not found')
        data: dict[str, bytes] = {}
        if kind == "secret":
            data = {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}
        else:
            data = {k: v.encode() for k, v in obj.get("data", {}).items()}
            data.update({k: base64.b64decode(v) for k, v in obj.get("binaryData", {}).items()})
        items = source.get("items")
        if not items:
            return {k: (v, mode) for k, v in data.items()}
        files = {}
        for item in items:
            if item["key"] not in data:
                if source.get("optional"):
                    continue
                raise ConfigError(f"configmap/secret {name} has no key {item['key']}")
            files[item["path"]] = (data[item["key"]], int(item.get("mode", mode)))
        return files

    def _downward_files(self, ctx: PodContext, items: list[JSON], mode: int) -> dict[str, tuple[bytes, int]]:
        files = {}
        for item in items:
            if "fieldRef" in item:
                value = field_value(ctx, item["fieldRef"]["fieldPath"])
            else:
                value = resource_value(ctx, item["resourceFieldRef"])
            files[item["path"]] = (value.encode(), int(item.get("mode", mode)))
        return files

    def _projected_files(
        self, ctx: PodContext, source: JSON, volume_name: str, mode: int
    ) -> dict[str, tuple[bytes, int]]:
        if "configMap" in source:
            return self._object_files(ctx, "configmap", source["configMap"], mode)
        if "secret" in source:
            return self._object_files(ctx, "secret", source["secret"], mode)
        if "downwardAPI" in source:
            return self._downward_files(ctx, source["downwardAPI"].get("items", []), mode)
        if "serviceAccountToken" in source:
            token_source = source["serviceAccountToken"]
            key = f"{volume_name}/{token_source['path']}"
            if time.monotonic() - self._token_times.get(key, -1e9) < TOKEN_REFRESH_SECONDS:
                return {}
            token = self._request_token(ctx, token_source)
            self._token_times[key] = time.monotonic()
            return {token_source["path"]: (token.encode(), mode)}
        return {}

    def _request_token(self, ctx: PodContext, source: JSON) -> str:
        meta = ctx.pod["metadata"]
        account = ctx.pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "audiences": [source["audience"]] if source.get("audience") else [],
            "expirationSeconds": int(source.get("expirationSeconds", 3607)),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        result = self.kube.post(
            f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token", body
        )
        return str(result["status"]["token"])

    # ---------------------------------------------------------------------------------- mounts
    def mounts_for(self, container: JSON, env: dict[str, str]) -> list[Mount]:
        """The bind mounts of `container` (volume paths + subPath) in mountPath order."""
        mounts = []
        for vm in container.get("volumeMounts", []):
            volume = self.volumes.get(vm["name"])
            if volume is None:
                raise ConfigError(f"volumeMount {vm['name']!r} refers to an unknown volume")
            source = volume.path
            sub = vm.get("subPath") or (expand(vm["subPathExpr"], env) if vm.get("subPathExpr") else "")
            if sub:
                source = source / sub
                if not source.exists():
                    source.mkdir(parents=True, exist_ok=True)
            read_only = bool(vm.get("readOnly")) or volume.kind in READ_ONLY_KINDS
            mounts.append(Mount(source, vm["mountPath"], read_only))
        return sorted(mounts, key=lambda m: m.target.count("/"))


def _write_file(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode & 0o777)
    os.replace(tmp, path)


def prepare_targets(mounts: list[Mount]) -> None:
    """Create mount points on the host filesystem (an empty directory or file at each target)."""
    for mount in mounts:
        target = Path(mount.target)
        if mount.source.is_dir():
            if not target.is_dir():
                target.mkdir(parents=True, exist_ok=True)
        elif not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()


# Sources are first bind-mounted here, then from here to their targets: a mount at a target such as
# /tmp would otherwise hide the sources of the mounts after it (the cluster directory may be in /tmp).
STAGING_ROOT = Path("/run/localcluster-staging")


def mount_script(mounts: list[Mount], workdir: str, enter_first: bool = False) -> str:
    """Shell commands that bind-mount everything, cd to `workdir` and exec the container's argv.

    `enter_first`: enter `workdir` before mounting. The default working directory lives in the
    pod's directory on the host, which a volume (an emptyDir at /tmp while the cluster directory
    is under /tmp) may hide; a process keeps a directory it is already in, hidden or not.
    """
    lines = ["set -e"]
    if enter_first:
        lines.append(f"cd {shlex.quote(workdir)}")
    if mounts:
        STAGING_ROOT.mkdir(parents=True, exist_ok=True)
        lines.append(f"stage=$(mktemp -d {shlex.quote(str(STAGING_ROOT))}/mounts.XXXXXX)")
    for i, mount in enumerate(mounts):
        src = shlex.quote(str(mount.source))
        kind = "-d" if mount.source.is_dir() else "-f"
        make = f'mkdir "$stage/{i}"' if kind == "-d" else f': > "$stage/{i}"'
        lines.append(make)
        lines.append(f'mount --bind {src} "$stage/{i}"')
    for i, mount in enumerate(mounts):
        dst = shlex.quote(mount.target)
        if mount.source.is_dir():  # a target inside an earlier mount may not exist there yet
            lines.append(f"[ -e {dst} ] || mkdir -p {dst}")
        lines.append(f'mount --bind "$stage/{i}" {dst}')
        if mount.read_only:
            lines.append(f"mount -o remount,bind,ro {dst}")
    for i in range(len(mounts)):
        lines.append(f'umount "$stage/{i}"')
    if mounts:
        lines.append('rm -rf "$stage"')
    if not enter_first:
        lines.append(f"cd {shlex.quote(workdir)}")
    lines.append('exec "$@"')
    return "\n".join(lines)
