"""JIT caches keyed by the image's identity: one folder per image, the caller's settings kept.

The image is stood in for by a labels file (what the build bakes at /opt/ddtree/image-labels.json). Whether
a second server start really skips compilation needs a GPU; that measurement is the device's (README).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ddtree.errors import UserError
from ddtree.serve import jit_cache
from ddtree.serve import launch as serve_launch

TARGETS_ENV = Path(__file__).resolve().parents[2] / "env"
LABELS = {
    "io.ddtree.target": "pro6000",
    "io.ddtree.tree.sha256": "c" * 64,
    "org.opencontainers.image.revision": "r1",
}


def image(tmp_path: Path, labels: dict[str, str], name: str = "labels.json") -> dict[str, str]:
    path = tmp_path / name
    path.write_text(json.dumps(labels))
    return {"DDTREE_IMAGE_LABELS": str(path), jit_cache.ROOT_ENV: str(tmp_path / "volume")}


def test_caches_point_into_the_image_keyed_folder(tmp_path: Path) -> None:
    environ = image(tmp_path, LABELS)
    env = jit_cache.environment(environ)
    root = jit_cache.keyed_root(environ)
    assert root is not None and root.parent == tmp_path / "volume" and len(root.name) == jit_cache.KEY_DIGITS
    assert env["TRITON_CACHE_DIR"] == str(root / "triton")
    assert env["FLASHINFER_WORKSPACE_BASE"] == str(root / "flashinfer")
    assert env["CUDA_CACHE_PATH"] == str(root / "cuda") and int(env["CUDA_CACHE_MAXSIZE"]) >= 1 << 30
    assert jit_cache.prepare(environ) == root
    assert sorted(p.name for p in root.iterdir()) == sorted([*jit_cache.FOLDERS.values(), "identity.json"])
    assert json.loads((root / "identity.json").read_text())["labels"]["io.ddtree.tree.sha256"] == "c" * 64


def test_a_new_image_gets_a_new_folder(tmp_path: Path) -> None:
    first = jit_cache.keyed_root(image(tmp_path, LABELS, "a.json"))
    rebuilt = jit_cache.keyed_root(image(tmp_path, {**LABELS, "io.ddtree.tree.sha256": "d" * 64}, "b.json"))
    same = jit_cache.keyed_root(image(tmp_path, {**LABELS, "org.opencontainers.image.title": "x"}, "c.json"))
    assert first != rebuilt and first == same  # only identifying labels count


def test_nothing_redirected_without_a_folder_or_an_image(tmp_path: Path) -> None:
    assert jit_cache.environment({}) == {}
    assert (
        jit_cache.environment({jit_cache.ROOT_ENV: str(tmp_path), "DDTREE_IMAGE_LABELS": str(tmp_path / "x")})
        == {}
    )


def test_caller_setting_wins_and_unwritable_volume_is_one_line(tmp_path: Path) -> None:
    environ = {**image(tmp_path, LABELS), "TRITON_CACHE_DIR": "/mine"}
    assert jit_cache.environment(environ)["TRITON_CACHE_DIR"] == "/mine"
    (tmp_path / "volume").write_text("a file, not a folder")
    with pytest.raises(
        UserError, match=r"cannot write .*; mount a writable volume there or unset DDTREE_JIT_CACHE_DIR"
    ):
        jit_cache.prepare(environ)


def test_serve_exports_the_cache_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {**image(tmp_path, LABELS), "DDTREE_TARGET": "pro6000"}
    launch = serve_launch.plan(environ, env_dir=str(TARGETS_ENV))
    assert launch.environment["TRITON_CACHE_DIR"].startswith(str(tmp_path / "volume"))
    assert launch.environment["NCCL_P2P_DISABLE"] == "1"  # the profile's own environment is still there
    assert os.environ.get("TRITON_CACHE_DIR") != launch.environment["TRITON_CACHE_DIR"]
