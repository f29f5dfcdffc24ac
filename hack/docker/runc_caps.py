#!/usr/bin/env python3
"""An OCI runtime in front of runc that drops the capabilities this host cannot grant.

`docker run --privileged` asks for every capability the engine knows. Where the capability bounding
set of the engine's own process lacks some of them (a sandboxed host without CAP_SYS_RESOURCE, say),
runc fails with "unable to apply caps: operation not permitted". This wrapper removes those
capabilities from the spec it is handed (the bundle's config.json for create/run, the --process file
for exec) and then execs runc with the same arguments. engine.sh registers it only on such hosts.

RUNC (environment) names the runc to exec; default: runc on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

# Linux capability numbers (include/uapi/linux/capability.h); the kernel ABI, fixed per number.
CAP_NAMES = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
]


def grantable() -> set[str]:
    """The CAP_* names in this process's bounding set (inherited from the engine)."""
    with open("/proc/self/status", encoding="ascii") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("CapBnd:"))
    return {f"CAP_{name}" for bit, name in enumerate(CAP_NAMES) if mask >> bit & 1}


def strip_process(process: dict[str, object], allowed: set[str]) -> bool:
    """Filters every capability list of an OCI process object in place; True when something changed."""
    caps = process.get("capabilities")
    if not isinstance(caps, dict):
        return False
    changed = False
    for kind, names in caps.items():
        if isinstance(names, list):
            kept = [name for name in names if name in allowed]
            changed |= len(kept) != len(names)
            caps[kind] = kept
    return changed


def rewrite(path: str, nested: bool) -> None:
    """Rewrites an OCI config.json (nested: the process is under "process") or a process file."""
    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    process = spec.get("process", {}) if nested else spec
    if strip_process(process, grantable()):
        tmp = f"{path}.caps"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(spec, handle)
        os.replace(tmp, path)


def option(args: list[str], *names: str) -> str | None:
    """The value of a runc subcommand option given as `--name value` or `--name=value`."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(f"{name}="):
                return arg.split("=", 1)[1]
    return None


def main(argv: list[str]) -> None:
    runc = os.environ.get("RUNC") or shutil.which("runc") or "/usr/sbin/runc"
    command = next((a for a in argv if a in ("create", "run", "exec")), None)
    if command is not None:
        sub = argv[argv.index(command) + 1 :]
        if command == "exec":
            process_file = option(sub, "--process", "-p")
            if process_file:
                rewrite(process_file, nested=False)
        else:
            bundle = option(sub, "--bundle", "-b") or os.getcwd()
            rewrite(os.path.join(bundle, "config.json"), nested=True)
    os.execv(runc, [runc, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
