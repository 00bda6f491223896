"""Both CLIs start and report their version."""

import subprocess
import sys


def test_ddtree_version() -> None:
    out = subprocess.run([sys.executable, "-m", "ddtree.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("ddtree "), out


def test_ddtree_build_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ddtree_build.cli", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("ddtree-build "), out
