"""The registry-free base image: what the recipe lists is installed, and a second ensure reuses it."""

from __future__ import annotations

import json
import subprocess
import time

from ddtree_build import base_image
from testcontainers.core.container import DockerContainer


def test_recipe_labels_and_packages(base_image_tag: str, docker: str) -> None:
    recipe = base_image.Recipe()
    assert base_image_tag == recipe.tag()
    inspect = subprocess.run(
        [docker, "image", "inspect", "--format", "{{json .Config.Labels}}", base_image_tag],
        capture_output=True,
        text=True,
        check=True,
    )
    labels = json.loads(inspect.stdout)
    assert labels["org.ddtree.base.recipe-digest"] == recipe.digest()
    query = "dpkg-query -W -f='${Package} ${db:Status-Status}\\n' " + " ".join(sorted(base_image.PACKAGES))
    with DockerContainer(base_image_tag, command=["sh", "-c", query], network_disabled=True) as container:
        status = container.get_wrapped_container().wait(timeout=60)
        stdout, stderr = container.get_logs()
    assert status["StatusCode"] == 0, stderr.decode()
    installed = dict(line.split() for line in stdout.decode().splitlines())
    assert installed == dict.fromkeys(base_image.PACKAGES, "installed")


def _must_not_build(message: str) -> None:
    raise AssertionError(f"the base image was rebuilt: {message}")


def test_second_ensure_reuses_the_image(base_image_tag: str) -> None:
    start = time.monotonic()
    again = base_image.ensure_base_image(say=_must_not_build)
    assert again == base_image_tag
    assert time.monotonic() - start < 10
