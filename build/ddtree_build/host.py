"""The build host: quiet commands, cross-process locks, and apt on Debian (root only)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from ddtree_build.errors import UserError, one_line
from ddtree_build.paths import CACHE_DIR


def run_quiet(cmd: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess:
    """Run quietly; a missing binary or a hang reads as a failed command, not an exception."""
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(cmd), 127, "", str(exc))


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return one_line(path.read_text(errors="replace"), lines)
    except OSError:
        return f"(no log at {path})"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (made if missing): concurrent processes take turns; the kernel
    releases it if one dies, so no stale lock is left behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def host_lock(name: str) -> contextlib.AbstractContextManager[None]:
    """Serialise set-up steps across concurrent `make` runs (apt and dockerd do not like twins)."""
    return file_lock(CACHE_DIR / "locks" / f"{name}.lock")


def is_root() -> bool:
    return os.geteuid() == 0


def is_debian() -> bool:
    return Path("/etc/debian_version").exists() and shutil.which("apt-get") is not None


def apt_install(packages: Sequence[str], log: Path) -> None:
    """apt-get update + install (no recommends), output to `log`; a failure shows the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with open(log, "a") as out:
        for cmd in (
            ["apt-get", "update"],
            ["apt-get", "install", "-y", "--no-install-recommends", *packages],
        ):
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
            if code != 0:
                raise UserError(f"`{' '.join(cmd)}` failed (exit {code}); log {log}: {log_tail(log, 8)}")
