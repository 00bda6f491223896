"""capture on a GPU host: nvidia-smi, driver and nvcc are recorded, a pristine install has no diff.

Needs the sglang wheel for this interpreter in .cache/wheels (the device machine has no network: carry it).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree_build.patching import pristine
from ddtree_build.reproduction import capture

VERSION = "0.5.13.post1"


def test_capture_records_gpus_driver_and_cuda(tmp_path: Path) -> None:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = sorted(pristine.wheels_dir().glob(f"sglang-{VERSION}-{tag}-*.whl"))
    if not wheels:
        pytest.skip(f"no sglang {VERSION} {tag} wheel in {pristine.wheels_dir()} (carry .cache/wheels)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--find-links", str(wheels[0].parent), f"sglang=={VERSION}"],
        check=True,
    )  # fmt: skip
    out = tmp_path / "pkg"
    facts = capture.capture(out, python=str(python), wheel=wheels[0])
    assert facts.gpus, (out / "env" / "nvidia-smi.txt").read_text()
    assert facts.driver and all(g.get("compute_cap") for g in facts.gpus)
    assert "nvidia-smi" not in facts.absent
    if shutil.which("nvcc"):
        assert facts.nvcc and "nvcc" not in facts.absent
    assert (facts.changed, facts.added, facts.deleted) == ([], [], [])
    print(f"GPUs: {[g['name'] for g in facts.gpus]}, driver {facts.driver}, nvcc {facts.nvcc}")
