"""Slow tier (`make test-slow`, CI's second step): a plain `make image` builds the full image, then the stack
is checked inside: torch and SGLang import (sgl_kernel is not imported: it needs a GPU driver), nvcc is
where CUDA_HOME says, the patch series verifies, the offline self-check passes with the full lock, the
labels describe the stack, and a second `make image` reuses the result.

The image is the one users get: `make image` with the Makefile's defaults (target pro6000, base auto, tag
ddtree), so after CI a `make image` on the same engine finds it built. Nothing of the calling make
(MAKEFLAGS, TARGET=...) reaches that `make image`. Its time and size are printed and written to
.cache/measurements/full-image.json; a warm build cache makes it seconds (README, Test tiers).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from ddtree.fsutil import atomic_write, sha256_file
from ddtree_build import docker_build, image, render
from ddtree_build.paths import CACHE_DIR, ENV_DIR, REPO_ROOT

TAG = f"{image.DEFAULT_NAME}:{render.DEFAULT_TARGET}"  # what a plain `make image` tags
# Make and its variables, as a parent make passes them down; a person typing `make image` has none of them.
_PARENT_MAKE_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TARGET", "BASE", "TAG")


def make_image(log: Path) -> float:
    """Run a plain `make image` as a person would; its seconds. Fails the test with the log's tail."""
    env = {key: value for key, value in os.environ.items() if key not in _PARENT_MAKE_ENV}
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.run(
            ["make", "image"], cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=3 * 3600
        ).returncode
    seconds = time.monotonic() - start
    assert code == 0, f"make image failed (exit {code}); log {log}:\n" + log.read_text()[-5000:]
    return seconds


@pytest.fixture(scope="module")
def full_image() -> dict:
    log = CACHE_DIR / "logs" / "make-image-full.log"
    seconds = make_image(log)
    info = image.inspect_image(TAG)
    record = {
        "command": "make image",
        "tag": TAG,
        "seconds": round(seconds, 1),
        "size_bytes": int(info["Size"]),
        "image_id": info["Id"],
        "labels": info["Config"]["Labels"],
        "log": str(log),
    }
    out_file = CACHE_DIR / "measurements" / "full-image.json"
    atomic_write(out_file, json.dumps(record, indent=2))
    print(f"\nfull image {TAG}: {seconds:.0f} s, {record['size_bytes'] / 1e9:.2f} GB ({out_file})")
    return record


def _in_image(*args: str, entrypoint: str = "python") -> subprocess.CompletedProcess:
    cmd = [docker_build.docker_cli(), "run", "--rm", "--network=none", "--entrypoint", entrypoint, TAG]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=600)


def test_the_pinned_stack_imports(full_image: dict) -> None:
    code = (
        "import torch, sglang; from sglang.srt.server_args import ServerArgs; "
        "print(torch.__version__, torch.version.cuda, sglang.__version__)"
    )
    out = _in_image("-c", code)
    assert out.returncode == 0, out.stderr[-3000:]
    torch_version, cuda, sglang_version = out.stdout.split()
    assert torch_version.startswith("2.11.0") and cuda.startswith("13.")
    assert sglang_version == full_image["labels"]["io.ddtree.sglang.version"]


def test_nvcc_is_where_cuda_home_points(full_image: dict) -> None:
    """flashinfer JIT-compiles sm_120 kernels: the image carries nvcc (the devel base's, or the PyPI
    wheel's on the registry-free base) and g++ for it."""
    out = _in_image("-c", '"$CUDA_HOME/bin/nvcc" --version && g++ --version | head -1', entrypoint="bash")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "release 13." in out.stdout


def test_patches_verify_and_selfcheck_pass_with_the_full_lock(full_image: dict) -> None:
    site = "/opt/venv/lib/python3.11/site-packages"
    verify = _in_image("-m", "ddtree.patchset", "verify", "--root", site)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    report = _in_image("selfcheck", "--offline", "--json", entrypoint="ddtree")
    checks = {c["name"]: c for c in json.loads(report.stdout)["checks"]}
    failing = [c for c in checks.values() if c["status"] in ("fail", "error")]
    assert report.returncode == 0 and not failing, json.dumps(failing, indent=1)
    # The full lock, not the small CI one: every pin of the base's lock is installed at its version.
    assert checks["lock"]["status"] == "pass", checks["lock"]
    ctx = render.build_context(render.DEFAULT_TARGET, full_image["labels"]["io.ddtree.base"])
    in_image = _in_image("-c", "sha256sum /opt/ddtree/requirements.lock", entrypoint="bash")
    assert in_image.stdout.split()[0] == sha256_file(REPO_ROOT / ctx.lock_file), ctx.lock_file


def test_labels_describe_the_full_stack(full_image: dict) -> None:
    labels = full_image["labels"]
    base = labels["io.ddtree.base"]
    assert base in render.BASES and labels["io.ddtree.target"] == render.DEFAULT_TARGET
    ctx = render.build_context(render.DEFAULT_TARGET, base)
    assert labels["io.ddtree.freeze.sha256"] == sha256_file(ENV_DIR / "freeze.txt")
    assert labels["io.ddtree.patches.sha256"] == image.patch_series_digest()
    assert labels["io.ddtree.python.version"] == ctx.python_version
    assert labels["io.ddtree.sglang.version"] == ctx.sglang_version
    assert labels["io.ddtree.cuda.version"] == ctx.cuda_version
    revision = labels["org.opencontainers.image.revision"]
    assert revision == image.commit_facts()[0]
    # The commit tag names the same image as the moving one.
    commit_tag = image.inspect_image(f"{TAG}-{image.tag_suffix(revision)}")
    assert commit_tag["Id"] == full_image["image_id"]


def test_a_later_make_image_reuses_it(full_image: dict) -> None:
    """What CI built is what `make image` then finds: the build cache answers, the image id is unchanged."""
    seconds = make_image(CACHE_DIR / "logs" / "make-image-again.log")
    assert image.inspect_image(TAG)["Id"] == full_image["image_id"]
    print(f"\nmake image again: {seconds:.1f} s")


def test_whole_tree_identity_matches_the_label(full_image: dict) -> None:
    """`selfcheck --offline --full`: every installed file against RECORD and the tree digest against the
    label, on the full stack; its time goes to .cache/measurements/tree-identity.json (goal: under 15 s on
    two idle cores; the scan's CPU time is in the report too)."""
    start = time.monotonic()
    report = _in_image("selfcheck", "--offline", "--full", "--only", "tree", "--json", entrypoint="ddtree")
    seconds = time.monotonic() - start
    check = json.loads(report.stdout)["checks"][0]
    assert report.returncode == 0 and check["status"] == "pass", check["detail"]
    assert check["data"]["digest"] == full_image["labels"]["io.ddtree.tree.sha256"]
    record = {key: check["data"][key] for key in ("files", "bytes", "distributions", "patched", "seconds")}
    atomic_write(CACHE_DIR / "measurements" / "tree-identity.json", json.dumps({**record, "wall_s": seconds}))
    print(
        f"\ntree identity: {record['files']} files, {record['bytes'] / 1e9:.1f} GB in {record['seconds']} s"
    )
