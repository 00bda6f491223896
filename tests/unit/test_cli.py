"""Both CLIs start and report their version; ddtree-build starts without its heavy dependencies."""

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


def test_ddtree_build_start_leaves_heavy_modules_unloaded() -> None:
    """`--help`/`--version` import every command module; these stay out until a command needs them
    (together they were ~80 ms of a ~380 ms start). A module-level import of one of them fails here."""
    heavy = ("docker", "jinja2", "ssl", "urllib.request", "packaging.markers", "packaging.requirements",
             "ddtree.patchset", "ddtree_build.patch_workflow")  # fmt: skip
    probe = (
        "import sys\nimport ddtree_build.cli as cli\ncli.build_parser()\n"
        f"print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [], f"imported at start: {out.stdout.strip()}"
