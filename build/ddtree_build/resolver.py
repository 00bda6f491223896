"""The one place that runs a dependency resolver (uv): freeze resolution and hash locking share it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ddtree_build.docker_build import HOST_CA_BUNDLE
from ddtree_build.errors import UserError, one_line

PYPI_INDEX = "https://pypi.org/simple"


def find_uv() -> str:
    """The uv beside this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return str(beside)
    found = shutil.which("uv")
    if not found:
        raise UserError("uv not found beside the interpreter or on PATH; run `make venv`")
    return found


def uv_version() -> str:
    out = subprocess.run([find_uv(), "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or "uv (unknown version)"


def compile_requirements(
    requirements: str,
    *,
    python: str,
    platform: str,
    exclude_newer: str | None = None,
    hashes: bool = False,
    index_url: str = PYPI_INDEX,
) -> tuple[str, list[str]]:
    """Resolve `requirements` (text) with `uv pip compile`; return (output text, argv for headers)."""
    with tempfile.TemporaryDirectory(prefix="ddtree-uv-") as tmp:
        source = Path(tmp) / "requirements.in"
        source.write_text(requirements, encoding="utf-8")
        output = Path(tmp) / "requirements.txt"
        shown = [
            "uv", "pip", "compile", "--python-version", python, "--python-platform", platform,
            "--index-url", index_url, "--no-header", "--no-annotate", "--no-config",
        ]  # fmt: skip
        if exclude_newer:
            shown += ["--exclude-newer", exclude_newer]
        if hashes:
            shown.append("--generate-hashes")
        env = dict(os.environ)
        # uv does not read pip's configuration; it needs the CA bundle through SSL_CERT_FILE.
        if HOST_CA_BUNDLE.is_file():
            env.setdefault("SSL_CERT_FILE", str(HOST_CA_BUNDLE))
        for name in ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_FIND_LINKS", "UV_EXCLUDE_NEWER"):
            env.pop(name, None)  # only the index and date given here count
        argv = [find_uv(), *shown[1:], "--quiet", str(source), "-o", str(output)]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise UserError("uv pip compile failed: " + one_line(done.stderr or done.stdout, 12))
        return output.read_text(encoding="utf-8"), shown
