"""The compose `router` profile as the real `docker compose` (v2, from `make engine`) reads it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from ddtree_build.paths import REPO_ROOT

from tests.docker.test_image_build import _ci_lock, build_with_ca


def test_router_profile_config_has_only_the_router_with_the_replica_urls(docker: str, tmp_path: Path) -> None:
    compose = shutil.which("docker") or docker
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()),
           # compose reads every service's variables; the router mounts neither folder
           "MODEL_DIR": str(tmp_path), "DRAFTER_DIR": str(tmp_path),
           "DDTREE_REPLICAS": "http://gpu-1:30000 http://gpu-2:30000"}  # fmt: skip
    cmd = [compose, "compose", "-f", str(REPO_ROOT / "docker-compose.yml"), "--profile", "router", "config"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    assert list(config["services"]) == ["ddtree-router"]
    service = config["services"]["ddtree-router"]
    assert service["entrypoint"] == ["ddtree", "router"] and service["image"] == "ddtree:pro6000"
    assert service["environment"]["DDTREE_REPLICAS"] == "http://gpu-1:30000 http://gpu-2:30000"
    assert service["ports"][0]["target"] == 30000 and service["ports"][0]["published"] == "30080"
    assert "volumes" not in service and "deploy" not in service


def test_the_images_router_lock_installs_and_the_router_answers_inside(docker: str, tmp_path: Path) -> None:
    """The Dockerfile's router step for real (INSTALL_ROUTER=1), on the registry-free base with the CI lock.

    The CI lock lacks the router's dependencies (the full stack has them at the same versions), so here
    `--no-deps -r env/router.lock` installs them too (no `pip check`: sglang's own dependencies are not
    in the CI lock); `ddtree router` then starts the router in a container without network, and its
    /health answers."""
    from ddtree_build import image, render

    ctx = render.build_context("pro6000", "bootstrap")
    folder = tmp_path / "context"
    dockerfile = image.stage_context(folder, render.render("pro6000", "bootstrap"), _ci_lock(tmp_path))
    args = {**image.build_args_for(ctx, image.OVERRIDE_LOCK, pip_check=False), "INSTALL_ROUTER": "1"}
    tag = "ddtree-test:router-issue18"
    # The runtime stage copies the SBOM from the context, as `ddtree-build image` stages it.
    image.write_image_sbom(folder, image.OVERRIDE_LOCK, ctx, args, tag, tmp_path / "sbom.cdx.json")
    log = tmp_path / "build.log"
    build_with_ca(folder, tag, dockerfile, args, log)
    url = "http://127.0.0.1:30000/health"
    probe = f"import urllib.request as u; print(u.urlopen('{url}', timeout=2).read().decode())"
    wait = f'for i in $(seq 100); do python -c "{probe}" 2>/dev/null && exit 0; sleep 0.2; done; exit 1'
    script = f"ddtree router & {wait}"
    try:
        out = subprocess.run(
            [docker, "run", "--rm", "--network=none", "-e", "DDTREE_REPLICAS=http://127.0.0.1:31999",
             "--entrypoint", "bash", tag, "-c", script],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        version = subprocess.run(
            [docker, "run", "--rm", "--network=none", "--entrypoint", "python", tag, "-c",
             "import importlib.metadata as m; print(m.version('sglang-router'))"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        subprocess.run([docker, "image", "rm", tag], capture_output=True, timeout=60)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert version.stdout.strip() == "0.3.2"
