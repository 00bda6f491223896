"""Digest pinning of the nvidia base, built for real.

No registry of the outside world is reachable here, so Debian's docker-registry (a real registry, on
127.0.0.1) stands in for Docker Hub and the registry-free base stands in for nvidia/cuda. The render for
an env/system.yaml that carries a digest must build from exactly that content even after the tag moves;
without the digest the build follows the moved tag (so the pin is what protects it); a wrong digest fails.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ddtree_build import base_image, docker_build, engine, host, image, render
from ddtree_build.errors import UserError
from ddtree_build.paths import CACHE_DIR, ENV_DIR

MARKER = "/moved-tag-marker"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    """A local registry on a free port; its storage persists under .cache so re-pushes are instant."""
    engine.ensure(lambda msg: None)
    binary = shutil.which("docker-registry")
    if binary is None:
        if not (host.is_root() and host.is_debian()):
            pytest.skip("docker-registry is not installed (Debian: apt-get install docker-registry)")
        host.apt_install(["docker-registry"], CACHE_DIR / "logs" / "apt-registry.log")
        binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    port = _free_port()
    folder = CACHE_DIR / "registry"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / f"config-{port}.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    with open(folder / "registry.log", "a") as log:
        proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"docker-registry did not answer on {port}; see {folder / 'registry.log'}")
                time.sleep(0.3)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        config.unlink(missing_ok=True)


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([docker_build.docker_cli(), *args], capture_output=True, text=True, timeout=600)
    if check and out.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {out.stderr[-2000:]}")
    return out


def _push(ref: str) -> str:
    _docker("push", ref)
    digests = json.loads(_docker("image", "inspect", "--format", "{{json .RepoDigests}}", ref).stdout)
    repo = ref.rsplit(":", 1)[0]
    return next(d.split("@", 1)[1] for d in digests if d.startswith(repo + "@"))


def _env_with_base(folder: Path, image_ref: str, tag: str, digest: str | None) -> Path:
    shutil.copytree(ENV_DIR, folder, ignore=shutil.ignore_patterns("reference"))
    system = yaml.safe_load((folder / "system.yaml").read_text())
    system["bases"]["nvidia"].update(image=image_ref, tag=tag, digest=digest)
    (folder / "system.yaml").write_text(yaml.safe_dump(system))
    return folder


def _build_base_stage(env_dir: Path, tmp: Path, tag: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Render nvidia for `env_dir`, build its base stage with the render's own ARG defaults."""
    monkeypatch.setattr(render, "ENV_DIR", env_dir)
    text = render.render("pro6000", "nvidia")
    context = tmp / f"context-{tag.replace(':', '-')}"
    dockerfile = image.stage_context(context, text, None)
    docker_build.build_image(
        context, tag, dockerfile=dockerfile, log=tmp / f"{tag.replace(':', '-')}.log",
        extra_args=["--target", "base"],
    )  # fmt: skip
    return text


def test_pinned_base_survives_a_moved_tag(
    registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = f"{registry}/ddtree-base"
    ref = f"{repo}:stand-in"
    _docker("tag", base_image.base_tag(), ref)
    digest = _push(ref)

    # Move the tag: same name, different content.
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "Dockerfile").write_text(f"FROM {base_image.base_tag()}\nRUN touch {MARKER}\n")
    docker_build.build_image(moved, ref, log=tmp_path / "moved.log")
    moved_digest = _push(ref)
    assert moved_digest != digest

    pinned_env = _env_with_base(tmp_path / "env-pinned", repo, "stand-in", digest)
    text = _build_base_stage(pinned_env, tmp_path, "ddtree-test:pinned-base", monkeypatch)
    assert f"ARG BASE_DIGEST={digest}" in text and "FROM ${BASE_IMAGE}@${BASE_DIGEST} AS base" in text
    unpinned_env = _env_with_base(tmp_path / "env-unpinned", repo, "stand-in", None)
    _build_base_stage(unpinned_env, tmp_path, "ddtree-test:unpinned-base", monkeypatch)
    try:
        pinned = _docker("run", "--rm", "ddtree-test:pinned-base", "test", "-e", MARKER, check=False)
        unpinned = _docker("run", "--rm", "ddtree-test:unpinned-base", "test", "-e", MARKER, check=False)
    finally:
        _docker("image", "rm", "ddtree-test:pinned-base", "ddtree-test:unpinned-base", ref, check=False)
    assert pinned.returncode == 1, "the pinned build must not see the moved tag's content"
    assert unpinned.returncode == 0, "without a digest the build follows the tag (control)"


def test_a_wrong_digest_fails_the_build(
    registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = f"{registry}/ddtree-base"
    wrong = "sha256:" + "0" * 64
    env_dir = _env_with_base(tmp_path / "env-wrong", repo, "stand-in", wrong)
    with pytest.raises(UserError, match="docker build of ddtree-test:wrong-digest failed"):
        _build_base_stage(env_dir, tmp_path, "ddtree-test:wrong-digest", monkeypatch)
    assert wrong in (tmp_path / "ddtree-test-wrong-digest.log").read_text()
