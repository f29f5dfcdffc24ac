"""The images built and run on a real Docker engine (one build per session).

The session fixture runs ``hack/docker/build-images.sh`` (which starts the project's own dockerd when
no engine answers, and makes the base image when the official one cannot be pulled). At the end it
removes every container this session labelled and stops the engine if the session started it.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from docker_harness import BUILD, ENGINE, REPO, Docker


@pytest.fixture(scope="session")
def docker() -> Iterator[Docker]:
    engine_was_up = subprocess.run([str(ENGINE), "status"], capture_output=True, timeout=60).returncode == 0
    built = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1800, cwd=REPO)
    try:
        assert built.returncode == 0, built.stderr[-4000:]
        host = built.stdout.strip().splitlines()[-1].removeprefix("DOCKER_HOST=")
        client = Docker(env=dict(os.environ, DOCKER_HOST=host), session=uuid.uuid4().hex[:12])
        yield client
        client.remove_containers()
    finally:
        if not engine_was_up:
            subprocess.run([str(ENGINE), "stop"], capture_output=True, timeout=120)
