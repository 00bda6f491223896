"""`ddtree-build image` pieces that need no engine: base choice, build arguments, context, secrets."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from ddtree_build import image, render
from ddtree_build.errors import UserError
from ddtree_build.paths import REPO_ROOT


def test_registry_probe_is_quick_and_says_why() -> None:
    start = time.monotonic()
    reason = image.registry_reachable("registry.invalid", timeout=2)
    assert reason is not None and reason.startswith("registry.invalid:443")
    assert time.monotonic() - start < 5


def test_auto_base_falls_back_to_the_registry_free_base_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr(image, "registry_reachable", lambda *a, **k: "registry-1.docker.io:443: no such host")
    assert image.choose_base("auto", said.append) == "bootstrap"
    assert "no container registry reachable" in said[0] and "registry-free" in said[0]
    monkeypatch.setattr(image, "registry_reachable", lambda *a, **k: None)
    assert image.choose_base("auto", said.append) == "nvidia"
    assert image.choose_base("bootstrap", said.append) == "bootstrap"


def test_build_args_come_from_git_and_env() -> None:
    ctx = render.build_context("pro6000", "bootstrap")
    args = image.build_args_for(ctx, ctx.lock_file, pip_check=True)
    assert list(args) == sorted(args)
    epoch = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True
    ).stdout.strip()
    assert args["SOURCE_DATE_EPOCH"] == epoch
    assert args["IMAGE_CREATED"] == image.rfc3339(int(epoch))
    assert args["LOCK_FILE"] == "env/requirements-py311.lock" and args["PIP_CHECK"] == "1"
    assert args["INSTALL_ROUTER"] == "1"  # the full stack carries the router (env/router.lock)
    subset = image.build_args_for(ctx, image.OVERRIDE_LOCK, pip_check=False)
    assert subset["INSTALL_ROUTER"] == "0"  # a subset lock lacks the router's dependencies
    assert args["PATCHES_SHA256"] == image.patch_series_digest()
    assert "BASE_DIGEST" not in args  # the bootstrap render has no digest argument
    assert image.rfc3339(0) == "1970-01-01T00:00:00Z"


def test_staged_context_holds_only_what_the_dockerfile_copies(tmp_path: Path) -> None:
    (tmp_path / "lock").write_text("six==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    folder = tmp_path / "context"
    dockerfile = image.stage_context(folder, "FROM scratch\n", tmp_path / "lock")
    assert dockerfile.read_text() == "FROM scratch\n"
    top = sorted(p.name for p in folder.iterdir())
    assert top == ["Dockerfile", "build-inputs", "entrypoint", "env", "patches"]
    assert sorted(p.name for p in (folder / "entrypoint").iterdir()) == ["ddtree"]
    assert not list(folder.rglob("__pycache__"))
    assert (folder / image.OVERRIDE_LOCK).read_text().startswith("six==")
    with pytest.raises(UserError, match="no such file"):
        image.stage_context(tmp_path / "c2", "FROM scratch\n", tmp_path / "missing.lock")


def test_hf_token_secret_is_private_and_removed(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a real bundle\n")
    with image.build_secrets("hf_secret_value", ca) as secrets:
        token_file = secrets["hf_token"]
        assert secrets["ca"] == ca
        assert token_file.read_text() == "hf_secret_value"
        assert (token_file.stat().st_mode & 0o777) == 0o600
    assert not token_file.exists()
    with image.build_secrets(None, ca) as secrets:
        assert set(secrets) == {"ca"}


def test_summary_lists_tags_digest_size_and_our_labels() -> None:
    result = image.ImageResult(
        tags=["ddtree:pro6000", "ddtree:pro6000-abc"],
        image_id="sha256:" + "1" * 64,
        size_bytes=10_700_000_000,
        labels={"io.ddtree.target": "pro6000", "org.ddtree.base.suite": "bookworm"},
        base="bootstrap",
        seconds=376.0,
        dockerfile=Path("Dockerfile"),
    )
    text = image.summary(result)
    assert "ddtree:pro6000-abc" in text and "sha256:111" in text and "10.70 GB" in text
    assert "io.ddtree.target=pro6000" in text and "org.ddtree.base.suite" not in text


def test_tag_suffix_follows_the_revision_label() -> None:
    assert image.tag_suffix("a" * 40) == "a" * 12
    assert image.tag_suffix("b" * 40 + "-dirty") == "b" * 12 + "-dirty"
    assert image.tag_suffix("unknown") == "nogit"
