"""`ddtree profiles` and DDTREE_TARGET=auto with the project's real profiles (env/targets).

There is no GPU here: the GPU query is faked. nvidia-smi's csv rows come from a function (unit level) or a
stand-in nvidia-smi script on PATH (the serve and CLI paths), printing what the real one prints for each card.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ddtree import cli, gpu
from ddtree.errors import UserError
from ddtree.serve import launch as serve_launch
from ddtree.serve import profiles

from tests.unit.test_serve import fake_nvidia_smi

TARGETS = Path(__file__).resolve().parents[2] / "env" / "targets"
PRO6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.82.07"
B300 = "NVIDIA B300 SXM6 AC, 10.3, 580.82.07"
H100 = "NVIDIA H100 80GB HBM3, 9.0, 580.95.05"


def faked(rows: list[str]) -> gpu.Runner:
    """The GPU query, faked: nvidia-smi's answer for these cards."""
    return lambda argv: "".join(f"{row}\n" for row in rows)


@pytest.mark.parametrize(("rows", "expected"), [([PRO6000] * 8, "pro6000"), ([B300] * 8, "b300")])
def test_auto_picks_the_profile_for_each_fleet(rows: list[str], expected: str) -> None:
    assert profiles.choose_name(TARGETS, faked(rows)) == expected


def test_unknown_gpu_refused_in_one_line() -> None:
    with pytest.raises(UserError) as info:
        profiles.choose_name(TARGETS, faked([H100] * 8))
    message = str(info.value)
    assert info.value.exit_code == 2 and "\n" not in message
    assert message.startswith("DDTREE_TARGET=auto: no target profile fits 8 x NVIDIA H100 80GB HBM3 (sm 9.0)")
    assert "b300 needs sm 10.3, here sm 9.0" in message and "pro6000 needs sm 12.0, here sm 9.0" in message


def test_too_few_gpus_refused() -> None:
    with pytest.raises(UserError, match="pro6000 needs 8 GPUs for TP 8, 4 here"):
        profiles.choose_name(TARGETS, faked([PRO6000] * 4))


def test_mixed_architectures_fit_nothing() -> None:
    with pytest.raises(UserError, match=r"here sm 10\.3, 12\.0"):
        profiles.choose_name(TARGETS, faked([PRO6000] * 4 + [B300] * 4))


def test_auto_in_a_pro6000_image_on_b300_swaps_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's ENV carries pro6000's settings; auto on B300 replaces them and drops the PCIe ones."""
    baked = {"NCCL_P2P_DISABLE": "1", "SGLANG_ENABLE_JIT_DEEPGEMM": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    environ = {
        "DDTREE_TARGET": "auto",
        "DDTREE_IMAGE_TARGET": "pro6000",
        "TORCH_CUDA_ARCH_LIST": "12.0",
        **baked,
    }
    launch = serve_launch.plan(environ, env_dir=str(TARGETS.parent), gpu_runner=faked([B300] * 8))
    assert launch.target.name == "b300" and "--disable-custom-all-reduce" not in launch.server_args
    assert launch.environment["TORCH_CUDA_ARCH_LIST"] == "10.3"
    assert launch.unset == ("NCCL_P2P_DISABLE", "SGLANG_ENABLE_JIT_DEEPGEMM")
    # A value the caller chose (not the image's baked one) still wins.
    mine = serve_launch.plan(
        {**environ, "TORCH_CUDA_ARCH_LIST": "10.0"}, env_dir=str(TARGETS.parent), gpu_runner=faked([B300] * 8)
    )
    assert mine.environment["TORCH_CUDA_ARCH_LIST"] == "10.0"


def test_serve_auto_dry_run_through_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "bin", [B300] * 8)))
    monkeypatch.setenv("DDTREE_TARGET", "auto")
    assert cli.main(["serve", "--env-dir", str(TARGETS.parent), "--dry-run"]) == 0
    assert "# ddtree serve --dry-run: target b300" in capsys.readouterr().out
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "h100", [H100] * 8)))
    assert cli.main(["serve", "--env-dir", str(TARGETS.parent), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("ddtree: error: DDTREE_TARGET=auto: no target profile fits") and err.count("\n") == 1
    )


def test_profiles_command_lists_gpus_and_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "bin", [PRO6000] * 8)))
    assert cli.main(["profiles", "--env-dir", str(TARGETS.parent)]) == 0
    out = capsys.readouterr().out
    assert "b300     8 x NVIDIA B300 (sm 10.3), TP 8, nvlink  [no: needs sm 10.3, here sm 12.0]" in out
    assert "[fits]" in out and "GPUs here: 8 x NVIDIA RTX PRO 6000" in out
    assert out.rstrip().endswith("DDTREE_TARGET=auto picks: pro6000")
    assert cli.main(["profiles", "--env-dir", str(TARGETS.parent), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["chosen"] == "pro6000" and document["fits"]["b300"]["fits"] is False
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert cli.main(["profiles", "--env-dir", str(TARGETS.parent)]) == 1
    assert "DDTREE_TARGET=auto: none (no GPU visible" in capsys.readouterr().out
