"""The image table: which container images the agent can "run", and how.

There is no container runtime. An image is run as a local process whose command is the container's
`command` + `args` (or the image's default entrypoint below), with a PATH that puts the image's
executables first. The table is keyed by the *repository suffix* of the image reference, so any
registry and any tag match:

=====================  ==================================================================
repository ends with    runs as
=====================  ==================================================================
``hybridmq/broker``    the project's environment: ``<repo>/.venv/bin`` first on PATH, so
                       ``hybridmq ...`` and ``python -m ...`` resolve there; default
                       command ``hybridmq``
``hybridmq/operator``  same environment; default command ``hybridmq-operator``
=====================  ==================================================================

e.g. ``ghcr.io/hybridmq/broker:0.1.0``, ``hybridmq/operator:dev`` and
``localhost:5000/hybridmq/broker@sha256:...`` all match. Any other image gets the waiting reason
``ErrImagePull`` with a message saying that it has no local mapping; the agent keeps serving other
pods. Extra mappings can be added at runtime with the environment variable
``LOCALCLUSTER_IMAGES`` (JSON: ``{"repo/suffix": {"path": ["/dir"], "command": ["cmd"]}}``) of
the agent process.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from localcluster.binaries import REPO_ROOT


def project_bin_dir() -> Path:
    """`<repo>/.venv/bin` if it exists, else the bin directory of the running interpreter."""
    venv = REPO_ROOT / ".venv" / "bin"
    return venv if venv.is_dir() else Path(sys.executable).parent


@dataclass(frozen=True)
class ImageMapping:
    """How to run an image locally: directories prepended to PATH and the default entrypoint."""

    path: tuple[str, ...]
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def _project(command: str) -> ImageMapping:
    return ImageMapping(path=(str(project_bin_dir()),), command=(command,), env={"PYTHONUNBUFFERED": "1"})


#: repository suffix -> mapping (see the module docstring)
IMAGE_TABLE: dict[str, ImageMapping] = {
    "hybridmq/broker": _project("hybridmq"),
    "hybridmq/operator": _project("hybridmq-operator"),
}


def repository(image: str) -> str:
    """The repository part of an image reference (no tag, no digest)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return name


def _table() -> dict[str, ImageMapping]:
    table = dict(IMAGE_TABLE)
    extra = os.environ.get("LOCALCLUSTER_IMAGES")
    if extra:
        for suffix, spec in json.loads(extra).items():
            table[suffix] = ImageMapping(
                path=tuple(spec.get("path", ())),
                command=tuple(spec.get("command", ())),
                env=spec.get("env", {}),
            )
    return table


def resolve(image: str) -> ImageMapping | None:
    """The mapping for `image`, or None if the image has no local mapping."""
    repo = repository(image)
    for suffix, mapping in _table().items():
        if repo == suffix or repo.endswith("/" + suffix):
            return mapping
    return None


def image_id(image: str) -> str:
    """A stable, digest-shaped image ID for container statuses."""
    digest = hashlib.sha256(repository(image).encode()).hexdigest()
    return f"localcluster://{repository(image)}@sha256:{digest}"
