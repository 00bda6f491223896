"""The compose `router` profile as the real `docker compose` (v2, from `make engine`) reads it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from ddtree_build.paths import REPO_ROOT


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
