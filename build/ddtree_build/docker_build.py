"""The BuildKit-capable docker client builds go through, and image builds with it.

The newest client first on PATH may want a buildx plugin that is not installed, while Debian's 20.10
client builds with its built-in BuildKit (`RUN --mount=type=cache|secret`); the docker SDK's
`images.build` uses the legacy builder. So builds use `docker_cli()` + `buildkit_env()` (or
`build_image()`).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ddtree_build.errors import UserError
from ddtree_build.host import log_tail, run_quiet

# The host's CA bundle: pip inside builds reads it from a BuildKit secret, never from a layer.
HOST_CA_BUNDLE = Path(os.environ.get("DDTREE_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))
# Clients from 23.0 on need the buildx plugin for BuildKit; older ones carry BuildKit built in.
FIRST_CLIENT_MAJOR_NEEDING_BUILDX = 23


def _client_major(client: str) -> int | None:
    """Major version of a docker client binary; the client prints it even when no daemon answers."""
    out = run_quiet([client, "version", "--format", "{{.Client.Version}}"], timeout=15)
    match = re.match(r"\s*(\d+)\.", out.stdout)
    return int(match.group(1)) if match else None


def _has_buildx(client: str) -> bool:
    return run_quiet([client, "buildx", "version"], timeout=15).returncode == 0


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
        raise UserError(f"docker build of {tag} failed (exit {code}); log {log}: {log_tail(log, 20)}")


def image_exists(tag: str) -> bool:
    """Whether the engine has `tag` locally (no registry is asked), so a build can be skipped or refused."""
    return run_quiet([docker_cli(), "image", "inspect", "--format", "{{.Id}}", tag]).returncode == 0
