"""kind, built from source at the pinned release by hack/kind/build.sh."""

from __future__ import annotations

import subprocess

import pytest
from docker_harness import REPO

# Cold: the Go module download and build of kind (under two minutes on 2 cores).
pytestmark = pytest.mark.timeout(1200)


def test_kind_built_at_the_pinned_release() -> None:
    built = subprocess.run(
        [str(REPO / "hack" / "kind" / "build.sh")], capture_output=True, text=True, timeout=1100
    )
    assert built.returncode == 0, built.stderr[-3000:]
    binary = built.stdout.strip().splitlines()[-1]
    version = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    assert version.stdout.split()[:2] == ["kind", "v0.33.0"], version.stdout
