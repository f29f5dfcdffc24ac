"""The docker CLI for the image tests: the session's engine, labelled containers, the image tags."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "hack" / "docker" / "engine.sh"
BUILD = REPO / "hack" / "docker" / "build-images.sh"
OPERATOR_IMAGE = "ghcr.io/hybridmq/operator:dev"
BROKER_IMAGE = "ghcr.io/hybridmq/broker:dev"
LABEL = "hybridmq.test-session"


@dataclass(frozen=True)
class Docker:
    """The docker CLI pointed at the session's engine; every container it runs carries the label."""

    env: dict[str, str]
    session: str

    def run(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", *args],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def container(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``docker run --label ...`` with the given options, image and command."""
        return self.run("run", "--label", f"{LABEL}={self.session}", *args, timeout=timeout, env=env)

    def remove_containers(self) -> None:
        ids = self.run("ps", "-aq", "--filter", f"label={LABEL}={self.session}").stdout.split()
        if ids:
            self.run("rm", "-f", *ids)
