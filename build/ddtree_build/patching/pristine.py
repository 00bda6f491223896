"""The pristine wheel of the pinned distribution: downloaded once with pip, cached, read or extracted.

The series is applied to exactly what PyPI ships (a cp312 manylinux_2_34 wheel, the image's interpreter
and platform), never to a locally installed copy that may already differ.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ddtree.fsutil import sha256_file
from ddtree.lockfile import read_pins

from ddtree_build.errors import UserError
from ddtree_build.paths import CACHE_DIR, ENV_DIR

PYTHON_VERSION = "3.12"
PLATFORM = "manylinux_2_34_x86_64"


def wheels_dir() -> Path:
    return CACHE_DIR / "wheels"


def _normalized(distribution: str) -> str:
    return distribution.replace("-", "_").lower()


def cached_wheel(distribution: str, version: str) -> Path | None:
    """The cached wheel for PYTHON_VERSION (or a pure one), so a wheel fetched for another interpreter
    (e.g. by a test) is never taken for the one the series is checked on."""
    py = "cp" + PYTHON_VERSION.replace(".", "")
    found = sorted(wheels_dir().glob(f"{_normalized(distribution)}-{version}-*.whl"))
    preferred = [w for w in found if f"-{py}-" in w.name or "-py3-" in w.name]
    return (preferred or [None])[0]


def lock_hashes(distribution: str, version: str) -> set[str]:
    """sha256s the project's hash locks (env/requirements*.lock) allow for distribution==version."""
    from packaging.utils import canonicalize_name  # lazily, as in ddtree.lockfile (start-up time)

    name = canonicalize_name(distribution)
    return {
        digest.split(":", 1)[1]
        for lock in sorted(ENV_DIR.glob("requirements*.lock"))
        for pin in read_pins(lock)
        if pin.name == name and pin.version == version
        for digest in pin.hashes
        if digest.startswith("sha256:")
    }


def check_against_lock(wheel: Path, distribution: str, version: str) -> None:
    """The wheel the series is checked on must be one the image installs: its sha256 is in the lock."""
    allowed = lock_hashes(distribution, version)
    if not allowed:
        return  # this version is not locked (e.g. `check --against` another release)
    digest = sha256_file(wheel)
    if digest not in allowed:
        raise UserError(
            f"{wheel}: sha256 {digest} is not among the {len(allowed)} hashes env/requirements*.lock pins "
            f"for {distribution}=={version}; delete the file to download it again, or re-lock"
        )


def ensure_wheel(distribution: str, version: str) -> Path:
    """The cached wheel (downloaded with `pip download --no-deps` on first use, atomically moved in),
    checked against the project's hash lock when that pins this version."""
    wheel = cached_wheel(distribution, version) or _download(distribution, version)
    check_against_lock(wheel, distribution, version)
    return wheel


def _download(distribution: str, version: str) -> Path:
    """`pip download` for PYTHON_VERSION/PLATFORM whatever this host runs (binary only, as pip requires
    with --platform): PyPI's wheel itself; moved into the cache only when whole."""
    wheels_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheels_dir(), prefix=".download-") as tmp:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            f"{distribution}=={version}",
            "--python-version",
            PYTHON_VERSION,
            "--platform",
            PLATFORM,
            "--only-binary=:all:",
            "--dest",
            tmp,
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(
                f"pip download {distribution}=={version} failed: {last} (needs network to PyPI once; "
                f"the wheel is then cached in {wheels_dir()})"
            )
        downloaded = sorted(Path(tmp).glob("*.whl"))
        if len(downloaded) != 1:
            raise UserError(
                f"pip download {distribution}=={version} gave {len(downloaded)} wheels, expected 1"
            )
        target = wheels_dir() / downloaded[0].name
        shutil.move(str(downloaded[0]), target)
    return target


def extract(wheel: Path, dest: Path, only: list[str] | None = None) -> Path:
    """Unpack the wheel into dest (a site-packages-like root). `only`: these paths (those the wheel has)
    plus its *.dist-info/ files; None or a path the wheel lacks means everything (a missing target needs
    the whole tree, so the engine can search it for where the file moved)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            if only is None or not set(only) <= names:
                archive.extractall(dest)
            else:
                meta = [n for n in names if n.split("/", 1)[0].endswith(".dist-info")]
                archive.extractall(dest, members=sorted(set(only) | set(meta)))
    except zipfile.BadZipFile:
        raise UserError(f"{wheel}: damaged wheel; delete it and run again to download it afresh") from None
    return dest


class WheelReader:
    """Read single files of the wheel without extracting it (for baselines)."""

    def __init__(self, wheel: Path) -> None:
        self.wheel = wheel
        self._zip = zipfile.ZipFile(wheel)
        self._names = set(self._zip.namelist())

    def read(self, path: str) -> bytes | None:
        return self._zip.read(path) if path in self._names else None

    def names(self) -> list[str]:
        return sorted(n for n in self._names if not n.endswith("/"))

    def close(self) -> None:
        self._zip.close()
