"""GPU tier: the real nvidia-smi on the device machine (an H200, sm 9.0), judged against the pro6000 target.

The target expects compute capability 12.0, so the check must name the mismatch, and pass with the
override. No stand-ins: the real driver, the real nvidia-smi, the real committed profile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree import gpu
from ddtree.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def _selfcheck_gpu(**env: str) -> tuple[int, dict]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DDTREE_")}
    environ.update(
        DDTREE_TARGET="pro6000",
        DDTREE_ENV_DIR=str(REPO / "env"),
        DDTREE_TP="1",
        PYTHONPATH=os.pathsep.join([str(REPO / "entrypoint"), str(REPO)]),
        **env,
    )
    out = subprocess.run(
        [sys.executable, "-m", "ddtree.cli", "selfcheck", "--offline", "--json", "--only", "gpu", "shm"],
        capture_output=True,
        text=True,
        env=environ,
        check=False,
    )
    return out.returncode, json.loads(out.stdout)


def test_real_nvidia_smi_answers() -> None:
    gpus = gpu.query_gpus()
    assert gpus and all(g.compute_cap and g.driver_version for g in gpus)


def test_arch_mismatch_against_pro6000_then_override() -> None:
    found = gpu.query_gpus()
    if found[0].compute_cap == "12.0":
        pytest.skip("this device is an sm_120 card: no mismatch to show")
    with pytest.raises(UserError) as info:
        gpu.check_gpus(1, "12.0", allow_arch_mismatch=False)
    assert f"has compute capability {found[0].compute_cap}, the target expects 12.0" in str(info.value)
    passed = gpu.check_gpus(1, "12.0", allow_arch_mismatch=True)
    assert passed[0].name == found[0].name


def test_selfcheck_gpu_row_on_the_device() -> None:
    code, report = _selfcheck_gpu()
    row = next(c for c in report["checks"] if c["name"] == "gpu")
    assert code == 1 and row["status"] == "fail", report
    assert "the target expects 12.0" in row["detail"] and "DDTREE_ALLOW_ARCH_MISMATCH=1" in row["detail"]
    code, report = _selfcheck_gpu(DDTREE_ALLOW_ARCH_MISMATCH="1")
    rows = {c["name"]: c for c in report["checks"]}
    assert rows["gpu"]["status"] == "pass", report
    print("\n" + rows["gpu"]["detail"] + "\n" + rows["shm"]["detail"])
