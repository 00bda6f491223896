"""A Docker engine, a BuildKit-capable client and compose v2, set up on demand (`ddtree-build engine`).

Every target that talks to Docker (`make image`, `make test`) runs `ensure()` first, so a fresh Debian
machine needs no manual steps. On a machine where everything already answers, `ensure()` prints nothing.
This module starts the engine; the build client is docker_build.py, compose v2 compose.py, the host's
commands, locks and apt host.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ddtree_build.compose import ensure_compose
from ddtree_build.docker_build import docker_cli
from ddtree_build.errors import UserError
from ddtree_build.host import apt_install, host_lock, is_debian, is_root, log_tail
from ddtree_build.paths import CACHE_DIR

# What Debian installs for the engine. Recommends (apparmor, needrestart, git, ...) are left out.
DEBIAN_ENGINE_PACKAGES: tuple[str, ...] = ("docker.io",)
DOCKERD_LOG = Path(os.environ.get("DDTREE_DOCKERD_LOG", "/var/log/ddtree-dockerd.log"))
DOCKERD_PIDFILE = Path("/var/run/docker.pid")
DOCKERD_START_TIMEOUT_S = 90.0


# ---------------------------------------------------------------- the engine


def engine_answers(timeout: float = 5.0) -> bool:
    """True when the daemon named by DOCKER_HOST (default: the local socket) answers a ping."""
    try:
        import docker
    except ImportError as exc:
        raise UserError("the docker SDK is missing; run `make venv`") from exc
    try:
        client = docker.from_env(timeout=int(max(timeout, 1)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _dockerd_alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return False
    # A stale pidfile after a reboot may name a live process that is not dockerd.
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd"
    except OSError:
        return False


def _start_dockerd(log: Path) -> subprocess.Popen | None:
    """Start dockerd detached (it outlives this process), unless one is already starting."""
    if _dockerd_alive(DOCKERD_PIDFILE):
        return None
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if not Path(dockerd).exists():
        raise UserError("dockerd is not installed; install docker.io (Debian) or Docker Engine")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        out.write(f"--- ddtree-build starts dockerd at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
        out.flush()
        return subprocess.Popen(
            [dockerd],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for_engine(proc: subprocess.Popen | None, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine_answers(timeout=2):
            return
        if proc is not None and proc.poll() is not None:
            raise UserError(f"dockerd exited with code {proc.returncode}; log {log}: {log_tail(log)}")
        time.sleep(0.5)
    raise UserError(f"dockerd did not answer within {timeout_s:.0f} s; log {log}: {log_tail(log)}")


def ensure_engine(say: Callable[[str], None] = print) -> None:
    """Make a Docker engine answer: install docker.io and start dockerd when root on Debian."""
    if engine_answers():
        return
    with host_lock("engine"):
        if engine_answers():
            return
        if not (is_root() and is_debian()):
            raise UserError(
                "no Docker engine answers: install Docker Engine (Debian: apt-get install docker.io) "
                "and start dockerd, or run this as root on Debian to have it done"
            )
        if shutil.which("dockerd") is None:
            apt_log = CACHE_DIR / "logs" / "apt-engine.log"
            say(f"engine: installing {' '.join(DEBIAN_ENGINE_PACKAGES)} from Debian (log: {apt_log})")
            apt_install(DEBIAN_ENGINE_PACKAGES, apt_log)
            # The package's init script may have started a daemon already (no systemd here).
            if _dockerd_alive(DOCKERD_PIDFILE):
                with contextlib.suppress(UserError):
                    _wait_for_engine(None, DOCKERD_LOG, timeout_s=20)
            if engine_answers():
                return
        say(f"engine: starting dockerd in the background (log: {DOCKERD_LOG})")
        proc = _start_dockerd(DOCKERD_LOG)
        _wait_for_engine(proc, DOCKERD_LOG, DOCKERD_START_TIMEOUT_S)


def ensure(say: Callable[[str], None] = print) -> str:
    """Engine answering, a BuildKit-capable client, compose v2. Quiet when all is there.

    Returns the build client's path.
    """
    ensure_engine(say)
    client = docker_cli()
    ensure_compose(say)
    return client


# ---------------------------------------------------------------- CLI


def say_stderr(msg: str) -> None:
    """Progress lines of the CLIs: stderr, flushed, so stdout carries only a command's result (a tag, a
    summary) and a long build shows where it is."""
    print(msg, file=sys.stderr, flush=True)


def _cmd_ensure(args: argparse.Namespace) -> int:
    ensure(say_stderr)
    return 0


def _cmd_cli(args: argparse.Namespace) -> int:
    print(docker_cli())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("engine", help="Docker engine, BuildKit client and compose v2")
    sub = parser.add_subparsers(dest="engine_command", required=True, metavar="ACTION")
    ensure_parser = sub.add_parser(
        "ensure", help="make the engine answer (installs docker.io and starts dockerd as root on Debian)"
    )
    ensure_parser.set_defaults(func=_cmd_ensure)
    cli_parser = sub.add_parser("cli", help="print the docker client path that builds must use")
    cli_parser.set_defaults(func=_cmd_cli)
