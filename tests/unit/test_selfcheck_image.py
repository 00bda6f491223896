"""The image and GPU-host checks of `ddtree selfcheck` (selfcheck/image.py), through the real framework.

Real parts: a synthetic site-packages with an `sglang` package patched by the real patch engine (found
through sys.path, as in the image), a hash-locked file read by the real lock parser against this
interpreter's distributions, synthetic weight folders, the real /dev/shm. nvidia-smi is a shell script on
PATH (no GPU here).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import sys
from pathlib import Path

import pytest
from ddtree.patchset import apply
from ddtree.selfcheck import checks as framework
from ddtree.selfcheck import image as selfcheck_image

from tests.synthetic_weights import write_drafter, write_target
from tests.unit.patchset_kit import RUNNER_PATH, make_tree, standard_series
from tests.unit.test_serve import H200_ROW, PRO6000_ROW, fake_nvidia_smi

REPO = Path(__file__).resolve().parents[2]
FAKE_HASH = "--hash=sha256:" + "0" * 64


def run(names: list[str], environ: dict[str, str], **options) -> dict[str, framework.CheckResult]:
    checks = [c for c in framework.REGISTRY if c.name in names]
    assert {c.name for c in checks} == set(names)
    ctx = framework.Context(offline=True, environ=environ, options=options)
    return {o.name: o.result for o in framework.run_checks(checks, ctx)}


@pytest.fixture
def base_env(tmp_path: Path) -> dict[str, str]:
    selfcheck_image._plan_cached.cache_clear()
    return {"DDTREE_TARGET": "pro6000", "DDTREE_ENV_DIR": str(REPO / "env"), "PATH": "/nonexistent"}


@pytest.fixture
def patched_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site-packages holding a patched sglang 0.5.13.post1, first on sys.path like the image's venv."""
    root = make_tree(tmp_path / "site")
    series = standard_series(tmp_path / "patches")
    apply(root, series)
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    assert "sglang" not in sys.modules
    return root


def test_target(base_env) -> None:
    result = run(["target"], base_env)["target"]
    assert result.status == "pass" and result.detail.startswith("pro6000: 8 x NVIDIA RTX PRO 6000")


def test_target_unknown(base_env) -> None:
    result = run(["target"], {**base_env, "DDTREE_TARGET": "h100"})["target"]
    assert result.status == "fail" and "unknown target 'h100'" in result.detail


def test_lock_pass_and_fail(base_env, tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    packaging = importlib.metadata.version("packaging")
    lock.write_text(f"packaging=={packaging} \\\n    {FAKE_HASH}\n")
    result = run(["lock"], {**base_env, "DDTREE_LOCK": str(lock)})["lock"]
    assert result.status == "pass" and result.detail.startswith("1 distributions installed exactly")
    lock.write_text(
        f"packaging=={packaging} {FAKE_HASH}\nnot-installed-dist==1.0 {FAKE_HASH}\npyyaml==0.1 {FAKE_HASH}\n"
    )
    result = run(["lock"], {**base_env, "DDTREE_LOCK": str(lock)})["lock"]
    assert result.status == "fail"
    assert "2 of 3 distributions differ" in result.detail
    assert (
        "not-installed-dist: missing (lock pins 1.0)" in result.detail
        and "pyyaml: installed" in result.detail
    )


def test_lock_checks_the_installed_router_against_the_router_lock(base_env, tmp_path: Path) -> None:
    """The dev venv has sglang-router (the router tests run it); router.lock beside the lock pins it."""
    lock = tmp_path / "requirements.lock"
    packaging = importlib.metadata.version("packaging")
    lock.write_text(f"packaging=={packaging} \\\n    {FAKE_HASH}\n")
    router = importlib.metadata.version("sglang-router")
    absent = f"not-installed-dist==1.0 {FAKE_HASH}\n"  # an image without the router has none of it
    (tmp_path / "router.lock").write_text(f"sglang-router=={router} {FAKE_HASH}\n{absent}")
    result = run(["lock"], {**base_env, "DDTREE_LOCK": str(lock)})["lock"]
    assert result.status == "pass", result.detail
    (tmp_path / "router.lock").write_text(f"sglang-router==0.0.1 {FAKE_HASH}\n{absent}")
    result = run(["lock"], {**base_env, "DDTREE_LOCK": str(lock)})["lock"]
    assert result.status == "fail" and "sglang-router: installed" in result.detail


def test_lock_absent_skips(base_env, tmp_path: Path) -> None:
    result = run(["lock"], {**base_env, "DDTREE_LOCK": str(tmp_path / "none.lock")})["lock"]
    assert result.status == "skip"


def test_patches_verified_then_tampered(base_env, patched_site: Path) -> None:
    results = run(["patches", "patched-files"], base_env)
    assert results["patches"].status == "pass", results["patches"].detail
    assert results["patches"].detail.startswith("verified 3 patched file(s)")
    assert results["patched-files"].status == "pass"
    with open(patched_site / RUNNER_PATH, "ab") as handle:
        handle.write(b"def broken(:\n")
    results = run(["patches", "patched-files"], base_env)
    assert results["patches"].status == "fail"
    assert f"tampered post-image: {patched_site / RUNNER_PATH}" in results["patches"].detail
    assert results["patched-files"].status == "fail"
    assert f"{patched_site / RUNNER_PATH}:" in results["patched-files"].detail


def test_patches_without_manifest(base_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    result = run(["patches"], base_env)["patches"]
    assert result.status == "fail" and "no patch manifest" in result.detail


def _labels(patched_site: Path, **changes: str) -> dict[str, str]:
    manifest = json.loads((patched_site / ".ddtree-patchset" / "manifest.json").read_text())
    labels = {
        "io.ddtree.target": "pro6000",
        "io.ddtree.python.version": f"{sys.version_info.major}.{sys.version_info.minor}",
        "io.ddtree.sglang.version": "0.5.13.post1",
        "io.ddtree.freeze.sha256": hashlib.sha256((REPO / "env" / "freeze.txt").read_bytes()).hexdigest(),
        "io.ddtree.patches.sha256": manifest["series_digest"],
        "org.opencontainers.image.title": "ddtree-pro6000",
    }
    labels.update(changes)
    return labels


def test_labels_agree(base_env, patched_site: Path, tmp_path: Path) -> None:
    path = tmp_path / "image-labels.json"
    path.write_text(json.dumps(_labels(patched_site)))
    result = run(["labels"], {**base_env, "DDTREE_IMAGE_LABELS": str(path)})["labels"]
    assert result.status == "pass", result.detail
    assert result.detail.startswith("5 labels agree")


def test_labels_docker_inspect_form_and_mismatch(base_env, patched_site: Path, tmp_path: Path) -> None:
    path = tmp_path / "inspect.json"
    labels = _labels(patched_site, **{"io.ddtree.target": "b300"})
    path.write_text(json.dumps([{"Config": {"Labels": labels}}]))
    result = run(["labels"], {**base_env, "DDTREE_IMAGE_LABELS": str(path)})["labels"]
    assert result.status == "fail"
    assert "io.ddtree.target='b300', here 'pro6000'" in result.detail


def test_labels_absent_skip(base_env) -> None:
    assert run(["labels"], base_env)["labels"].status == "skip"


def test_gpu(base_env, tmp_path: Path) -> None:
    assert run(["gpu"], base_env)["gpu"].status == "skip"  # no nvidia-smi: a build-host run
    path = str(fake_nvidia_smi(tmp_path / "bin", [H200_ROW] * 8))
    result = run(["gpu"], {**base_env, "PATH": path})["gpu"]
    assert result.status == "fail" and "the target expects 12.0" in result.detail
    result = run(["gpu"], {**base_env, "PATH": path, "DDTREE_ALLOW_ARCH_MISMATCH": "1"})["gpu"]
    assert result.status == "pass" and result.detail.startswith("8 x NVIDIA H200")
    path = str(fake_nvidia_smi(tmp_path / "bin2", [PRO6000_ROW] * 4))
    result = run(["gpu"], {**base_env, "PATH": path})["gpu"]
    assert result.status == "fail" and "too few GPUs: 4 visible" in result.detail
    result = run(["gpu"], {**base_env, "PATH": path, "DDTREE_SKIP_CHECKS": "gpu"})["gpu"]
    assert result.status == "skip" and "DDTREE_SKIP_CHECKS" in result.detail


def test_shm(base_env, tmp_path: Path) -> None:
    assert run(["shm"], base_env)["shm"].status == "skip"
    path = str(fake_nvidia_smi(tmp_path / "bin", [PRO6000_ROW] * 8))
    assert run(["shm"], {**base_env, "PATH": path})["shm"].status == "pass"
    result = run(["shm"], {**base_env, "PATH": path, "DDTREE_MIN_SHM_GIB": "4000"})["shm"]
    assert result.status == "fail" and "--ipc=host" in result.detail
    result = run(["shm"], {**base_env, "PATH": path, "DDTREE_MIN_SHM_GIB": "inf"})["shm"]
    assert result.status != "pass" and "DDTREE_MIN_SHM_GIB 'inf' is not a number > 0" in result.detail


@pytest.fixture
def models(tmp_path: Path, base_env) -> dict[str, str]:
    write_target(tmp_path / "target", shards=4)
    write_drafter(tmp_path / "drafter")
    return {
        **base_env,
        "DDTREE_MODEL_DIR": str(tmp_path / "target"),
        "DDTREE_DRAFTER_DIR": str(tmp_path / "drafter"),
    }


def test_weights_and_drafter(models, tmp_path: Path) -> None:
    results = run(["weights", "drafter"], models)
    assert (
        results["weights"].status == "pass" and "kimi_k25, 61 layers, 4 shards" in results["weights"].detail
    )
    assert results["drafter"].status == "pass" and "block size 8" in results["drafter"].detail
    shard = tmp_path / "target" / "model-00002-of-00004.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1])
    results = run(["weights", "drafter"], models)
    assert results["weights"].status == "fail" and f"shard {shard} is truncated" in results["weights"].detail
    assert results["drafter"].status == "pass"


def test_weights_not_mounted_skip(base_env, tmp_path: Path) -> None:
    env = {**base_env, "DDTREE_MODEL_DIR": str(tmp_path / "nope"), "DDTREE_DRAFTER_DIR": str(tmp_path / "no")}
    results = run(["weights", "drafter"], env)
    assert results["weights"].status == "skip" and "is not mounted here" in results["weights"].detail
    assert results["drafter"].status == "skip"


def test_weights_empty_mount_fails(base_env, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = run(["weights"], {**base_env, "DDTREE_MODEL_DIR": str(tmp_path / "empty")})["weights"]
    assert result.status == "fail" and "is empty" in result.detail


def test_full_hash(models, tmp_path: Path) -> None:
    assert run(["weights-hash"], models)["weights-hash"].status == "skip"
    result = run(["weights-hash"], models, full_hash=True)["weights-hash"]
    assert result.status == "pass" and "4 shards hashed" in result.detail
    digests = result.data["digests"]
    manifest = tmp_path / "weights.sha256"
    manifest.write_text("".join(f"{d}  {n}\n" for n, d in digests.items()))
    result = run(["weights-hash"], models, full_hash=True, weights_manifest=str(manifest))["weights-hash"]
    assert result.status == "pass" and f"4 shards match {manifest}" in result.detail
    first = sorted(digests)[0]
    manifest.write_text(manifest.read_text().replace(digests[first], "f" * 64))
    result = run(["weights-hash"], models, full_hash=True, weights_manifest=str(manifest))["weights-hash"]
    assert result.status == "fail" and f"shard {tmp_path / 'target' / first} does not match" in result.detail


def test_cli_offline_json_on_a_checkout(tmp_path: Path) -> None:
    """Through the real CLI: on a plain checkout every image/host check skips and the run passes."""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "ddtree.cli", "selfcheck", "--offline", "--json"],
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": f"{REPO / 'entrypoint'}:{REPO}",
            "DDTREE_TARGET": "pro6000",
            "DDTREE_MODEL_DIR": str(tmp_path / "none"),
        },
        check=False,
    )
    report = json.loads(out.stdout)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert out.returncode == 0, out.stdout
    assert statuses["target"] == "pass" and statuses["weights"] == "skip" and statuses["gpu"] == "skip"
    for name in ("lock", "patches", "patched-files", "labels", "shm", "drafter", "weights-hash"):
        assert name in statuses


def test_cli_full_hash_flags(models, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """--full-hash and --weights-manifest reach the check through the real argument parser."""
    from ddtree import cli

    for key, value in models.items():
        monkeypatch.setenv(key, value)
    manifest = tmp_path / "w.sha256"
    manifest.write_text(f"{'0' * 64}  model-00001-of-00004.safetensors\n")
    code = cli.main(
        [
            "selfcheck",
            "--offline",
            "--json",
            "--only",
            "weights-hash",
            "--full-hash",
            "--weights-manifest",
            str(manifest),
        ]
    )
    row = json.loads(capsys.readouterr().out)["checks"][0]
    assert code == 1 and row["status"] == "fail" and "does not match" in row["detail"]
