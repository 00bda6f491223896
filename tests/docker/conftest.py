"""Docker tier fixtures: a real engine (make test sets it up), the registry-free base image, a build client.

Containers run through testcontainers with its reaper (Ryuk) off: Ryuk's image lives on Docker Hub, which
no build host here can reach; each test removes its own containers instead.
"""

from __future__ import annotations

import os

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from collections.abc import Iterator

import pytest
from ddtree_build import base_image, engine


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The build client's path, once a real engine answers; never skips: the tier must run."""
    if not engine.engine_answers():
        pytest.fail("no Docker engine answers; run `make engine` (make test does it first)")
    return engine.docker_cli()


@pytest.fixture(scope="session")
def base_image_tag(docker_engine: str) -> Iterator[str]:
    """The registry-free base image (built here only if `make test` did not build it already)."""
    yield base_image.ensure_base_image(say=lambda msg: print(msg, flush=True))
