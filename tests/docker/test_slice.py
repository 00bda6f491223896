"""Vertical slice: the in-image package installed FROM the registry-free base, run in a real container.

Built with the BuildKit client (docker_build.build_image: the CA bundle as a secret, a pip cache mount), run
through testcontainers; the assertions read what `ddtree` reports from inside the container.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from ddtree import __version__
from ddtree.fsutil import sha256_bytes, sha256_file
from ddtree_build import docker_build
from ddtree_build.paths import REPO_ROOT
from testcontainers.core.container import DockerContainer

SLICE_DIR = Path(__file__).resolve().parent / "slice"
SLICE_NAME = "ddtree-slice"
# Only what `pip install` of the project needs; the checkout (with .venv and .cache) stays out.
PROJECT_FILES = ("pyproject.toml", "README.md")
PROJECT_PACKAGES = ("entrypoint/ddtree", "build/ddtree_build")


def _digest_of_tree(root: Path, salt: str) -> str:
    """Content address of the build context: concurrent runs of different trees never share a tag."""
    entries = [salt]
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        entries.append(f"{path.relative_to(root)}:{sha256_file(path)}")
    return sha256_bytes("\n".join(entries).encode())[:12]


def _context(root: Path) -> Path:
    context = root / "context"
    src = context / "src"
    src.mkdir(parents=True)
    shutil.copy(SLICE_DIR / "Dockerfile", context / "Dockerfile")
    for name in PROJECT_FILES:
        shutil.copy(REPO_ROOT / name, src / name)
    for package in PROJECT_PACKAGES:
        shutil.copytree(
            REPO_ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return context


@pytest.fixture(scope="module")
def slice_image(base_image_tag: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("slice")
    context = _context(root)
    tag = f"{SLICE_NAME}:{_digest_of_tree(context, base_image_tag)}"
    docker_build.build_image(
        context,
        tag,
        build_args={"BASE_IMAGE": base_image_tag},
        secrets={"ca": docker_build.HOST_CA_BUNDLE},
        log=root / "build.log",
    )
    yield tag
    # Each tree gets its own tag; drop it so tags do not pile up (BuildKit's cache makes a rebuild quick).
    subprocess.run([docker_build.docker_cli(), "image", "rm", tag], capture_output=True, check=False)


def _run(image: str, command: list[str] | None = None, **kwargs: object) -> tuple[int, str, str]:
    """Start a container, wait for it to exit, return (exit code, stdout, stderr); it is removed after."""
    with DockerContainer(image, command=command, network_disabled=True, **kwargs) as container:
        status = container.get_wrapped_container().wait(timeout=120)
        stdout, stderr = container.get_logs()
    return int(status["StatusCode"]), stdout.decode(), stderr.decode()


def test_version(slice_image: str) -> None:
    code, stdout, stderr = _run(slice_image, ["--version"])
    assert code == 0, stderr
    assert stdout.strip() == f"ddtree {__version__}"


def test_selfcheck_offline_json(slice_image: str) -> None:
    code, stdout, stderr = _run(slice_image, ["selfcheck", "--offline", "--json"])
    assert code == 0, stdout + stderr
    report = json.loads(stdout)
    print(json.dumps(report, indent=1))  # shown by pytest when an assertion below fails
    checks = {c["name"]: c for c in report["checks"]}
    assert report["status"] == "pass" and report["offline"] is True
    assert report["version"] == __version__ == checks["package"]["data"]["version"]
    assert checks["package"]["data"]["location"].startswith("/opt/ddtree/")

    py_code, image_python, _ = _run(
        slice_image, ["-c", "import platform; print(platform.python_version())"], entrypoint="python3"
    )
    assert py_code == 0
    assert checks["python"]["data"]["version"] == image_python.strip()
    assert checks["python"]["data"]["version"].startswith("3.11.")  # bookworm's CPython
    assert checks["python"]["data"]["executable"].startswith("/opt/ddtree/bin/python")
    assert checks["platform"]["data"]["os"] == "Debian GNU/Linux 12 (bookworm)"
    assert checks["platform"]["data"]["machine"] == platform.machine()
    assert checks["dependencies"]["status"] == "pass"


def test_selfcheck_failure_reaches_the_exit_code(slice_image: str) -> None:
    """Unknown check names are a could-not-run (2), seen from outside the container."""
    code, _, stderr = _run(slice_image, ["selfcheck", "--offline", "--only", "nonexistent"])
    assert code == 2 and "nonexistent" in stderr


def test_ca_secret_left_no_trace(slice_image: str) -> None:
    code, stdout, stderr = _run(
        slice_image, ["-c", "test ! -e /run/secrets/ca && test ! -e /src && echo clean"], entrypoint="sh"
    )
    assert (code, stdout.strip()) == (0, "clean"), stderr
