"""env/router.lock: the router the image adds to the original host's stack, hash-locked, and nothing else.

The image installs it with --no-deps after the main lock, so every dependency in it must be exactly the
freeze's version (then pip adds only sglang-router and `pip check` holds); the dev venv's router, which the
router tests run, must be the same version.
"""

from __future__ import annotations

from pathlib import Path

from ddtree import lockfile
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def test_router_lock_adds_only_the_router_to_the_freeze() -> None:
    router = lockfile.read_lock(REPO / "env" / "router.lock")  # refuses an entry without --hash
    freeze = {pin.name: pin.version for pin in lockfile.read_pins(REPO / "env" / "freeze.txt")}
    extra = {name: version for name, version in router.items() if name not in freeze}
    assert extra == {"sglang-router": "0.3.2"}
    differ = {name: (v, freeze[name]) for name, v in router.items() if name in freeze and freeze[name] != v}
    assert differ == {}, "re-run `make router-lock` (it takes the freeze as constraints)"


def test_dev_venv_runs_the_routers_version() -> None:
    dev = {
        canonicalize_name(line.split("==")[0]): line.split("==")[1].strip()
        for line in (REPO / "requirements" / "dev.in").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    assert dev["sglang-router"] == lockfile.read_lock(REPO / "env" / "router.lock")["sglang-router"]
    router_in = (REPO / "env" / "router.in").read_text()
    assert "sglang-router==0.3.2" in router_in.splitlines()


def test_the_image_installs_the_router_lock_without_dependencies() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY env/router.lock /opt/ddtree/router.lock" in dockerfile
    step = dockerfile[dockerfile.index("COPY env/router.lock") :]
    assert "--require-hashes --no-deps -r /opt/ddtree/router.lock" in step
    assert 'if [ "${INSTALL_ROUTER}" = 1 ]' in step
