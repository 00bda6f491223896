"""capture on a real venv with the pinned sglang wheel installed --no-deps and edited by the test.

Real parts: a venv, the real sglang 0.5.13.post1 wheel (PyPI, cached under .cache/wheels), pip freeze,
the pristine-wheel reader, `git apply` and `sha256sum -c` as second opinions. No GPU here, so nvidia-smi
is recorded as absent; nvcc absence is forced by emptying PATH and the fallback list.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree.errors import UserError
from ddtree.patchset import udiff
from ddtree_build.patching import pristine
from ddtree_build.reproduction import capture
from ddtree_build.reproduction.manifest import check_manifest, read_manifest

VERSION = "0.5.13.post1"
EDITED = "sglang/srt/speculative/dflash_worker.py"
ADDED = "sglang/srt/speculative/ddtree_utils.py"


def _wheel_for_this_python() -> Path:
    """The sglang wheel for this interpreter's tag (for the venv), downloaded once into the cache."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    folder = pristine.wheels_dir()
    found = sorted(folder.glob(f"sglang-{VERSION}-{tag}-*.whl"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--only-binary=:all:",
         "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
         "--platform", "manylinux_2_34_x86_64", f"sglang=={VERSION}", "--dest", str(folder)],
        check=True,
    )  # fmt: skip
    return sorted(folder.glob(f"sglang-{VERSION}-{tag}-*.whl"))[0]


@pytest.fixture(scope="module")
def served_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(python, site-packages) of a venv with sglang installed --no-deps, one file edited, one added."""
    wheel = _wheel_for_this_python()
    root = tmp_path_factory.mktemp("venv") / "v"
    # --without-pip and uv keep this fast; capture then reads the venv with the host tool's pip.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    subprocess.run(
        [str(Path(sys.executable).parent / "uv"), "pip", "install", "--quiet", "--python", str(python),
         "--no-deps", "--no-index", "--find-links", str(wheel.parent), f"sglang=={VERSION}"],
        check=True,
    )  # fmt: skip
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    target = site / EDITED
    text = target.read_text()
    assert "class DFlashWorker" in text
    target.write_text(
        text.replace("class DFlashWorker", "# DDTree: tree drafts\nclass DFlashWorker", 1) + "# end\n"
    )
    (site / ADDED).write_text("def build_ddtree(budget: int) -> int:\n    return budget + 1\n")
    return python, site


@pytest.fixture(scope="module")
def captured(
    served_venv: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, capture.Capture]:
    python, _ = served_venv
    unit = tmp_path_factory.mktemp("units") / "sglang-ddtree.service"
    unit.write_text("[Service]\nExecStart=/opt/venv/bin/python -m sglang.launch_server --tp 8\n")
    out = tmp_path_factory.mktemp("cap") / "pkg"
    facts = capture.capture(
        out,
        python=str(python),
        services=[str(unit)],
        environ={"NCCL_P2P_DISABLE": "1", "SGLANG_ENABLE_JIT_DEEPGEMM": "0", "HOME": "/root"},
    )
    return out, facts


def test_layout_and_facts(captured: tuple[Path, capture.Capture]) -> None:
    out, facts = captured
    assert facts.changed == [EDITED] and facts.added == [ADDED] and facts.deleted == []
    for rel in ("env/pip-freeze.txt", "env/os-release.txt", "env/cuda.txt", "env/nvidia-smi.txt",
                "env/environment.txt", "env/capture.json", "REPRODUCE.md", "services/sglang-ddtree.service",
                f"patches/full/{EDITED}", f"patches/full/{ADDED}"):  # fmt: skip
        assert (out / rel).is_file(), rel
    assert f"sglang=={VERSION}" in (out / "env/pip-freeze.txt").read_text().splitlines()
    assert (out / "env/environment.txt").read_text() == "NCCL_P2P_DISABLE=1\nSGLANG_ENABLE_JIT_DEEPGEMM=0\n"
    if shutil.which("nvidia-smi") is None:
        assert "nvidia-smi" in facts.absent
        assert (out / "env/nvidia-smi.txt").read_text().startswith("nvidia-smi: absent")


def test_captured_diffs_apply_back_to_a_pristine_copy(
    captured: tuple[Path, capture.Capture], served_venv, tmp_path: Path
) -> None:
    out, _ = captured
    _, site = served_venv
    diffs = sorted((out / "patches" / "diffs").glob("*.diff"))
    assert len(diffs) == 2
    reader = pristine.WheelReader(pristine.ensure_wheel("sglang", VERSION))
    copy_root = tmp_path / "pristine"
    for rel in (EDITED,):
        (copy_root / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy_root / rel).write_bytes(reader.read(rel))
    for diff in diffs:
        (patch,) = udiff.parse(diff.read_bytes(), str(diff))
        old = reader.read(patch.path)
        assert udiff.apply_file(old, patch, str(diff)) == (site / patch.path).read_bytes()
    reader.close()
    if shutil.which("git"):  # second opinion from another implementation
        for diff in diffs:
            subprocess.run(["git", "apply", "-p1", str(diff)], cwd=copy_root, check=True)
        for rel in (EDITED, ADDED):
            assert (copy_root / rel).read_bytes() == (site / rel).read_bytes()


def test_manifest_lists_every_file_and_sha256sum_agrees(captured: tuple[Path, capture.Capture]) -> None:
    out, _ = captured
    listed = read_manifest(out)
    assert f"patches/full/{EDITED}" in listed and "MANIFEST.sha256" not in listed
    assert check_manifest(out).ok
    if shutil.which("sha256sum"):
        done = subprocess.run(["sha256sum", "--quiet", "-c", "MANIFEST.sha256"], cwd=out, capture_output=True)
        assert done.returncode == 0, done.stdout


def test_no_nvcc_and_no_gpu_are_recorded_as_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(capture, "NVCC_FALLBACKS", ())
    version, _, text = capture.probe_cuda(None)
    assert version is None and "nvcc: absent" in text
    gpus, driver, smi = capture.probe_gpus()
    assert (gpus, driver) == ([], None) and smi.startswith("nvidia-smi: absent")


def test_refuses_a_non_empty_out_and_an_interpreter_without_sglang(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(UserError, match=r"busy: exists and is not empty"):
        capture.capture(tmp_path / "busy")
    with pytest.raises(UserError, match=r"sglang is not installed there"):
        capture.capture(tmp_path / "new", python=sys.executable)
    assert not (tmp_path / "new").exists()


def test_unknown_unit_is_a_clear_error() -> None:
    with pytest.raises(UserError, match=r"--service no-such-unit-xyz: no such unit"):
        capture.find_unit("no-such-unit-xyz")
