"""GPU, /dev/shm and port checks.

There is no GPU here, so nvidia-smi's answer is fed through the injectable runner (a stand-in for the
real binary, whose csv format these strings copy). The port and /dev/shm checks use the real socket
layer and the real statvfs.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path

import pytest
from ddtree import gpu
from ddtree.errors import UserError

PRO6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.82.07"
H200 = "NVIDIA H200, 9.0, 580.95.05"


def runner_for(*rows: str):
    def run(argv: Sequence[str]) -> str:
        assert list(argv) == gpu.QUERY
        return "".join(f"{row}\n" for row in rows)

    return run


def _error(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        call(*args, **kwargs)
    assert info.value.exit_code == 1
    assert "\n" not in str(info.value)
    return str(info.value)


def test_eight_pro6000_pass() -> None:
    gpus = gpu.check_gpus(8, "12.0", runner_for(*[PRO6000] * 8), allow_arch_mismatch=False)
    assert len(gpus) == 8 and gpus[0].compute_cap == "12.0"


def test_no_gpu_empty_answer() -> None:
    message = _error(gpu.check_gpus, 8, "12.0", runner_for())
    assert message.startswith("no GPU visible: nvidia-smi lists no devices") and "--gpus all" in message


def test_no_gpu_binary_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    message = _error(gpu.check_gpus, 8, "12.0")
    assert message.startswith("no GPU visible: nvidia-smi is not on PATH")


def test_no_gpu_nvidia_smi_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "nvidia-smi"
    failure = "NVIDIA-SMI has failed because it could not communicate with the driver"
    fake.write_text(f"#!/bin/sh\necho '{failure}' >&2\nexit 9\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    message = _error(gpu.check_gpus, 1, None)
    assert "nvidia-smi failed (NVIDIA-SMI has failed because it could not communicate" in message


def test_too_few_gpus() -> None:
    message = _error(gpu.check_gpus, 8, "12.0", runner_for(*[PRO6000] * 4))
    assert message.startswith("too few GPUs: 4 visible, tensor parallel size is 8")


def test_wrong_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpu.ARCH_OVERRIDE_ENV, raising=False)
    message = _error(gpu.check_gpus, 1, "12.0", runner_for(H200))
    assert "NVIDIA H200 has compute capability 9.0, the target expects 12.0" in message
    assert "DDTREE_ALLOW_ARCH_MISMATCH=1" in message


def test_wrong_arch_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gpu.ARCH_OVERRIDE_ENV, "1")
    assert gpu.check_gpus(1, "12.0", runner_for(H200))[0].name == "NVIDIA H200"


def test_old_driver() -> None:
    message = _error(gpu.check_gpus, 1, "12.0", runner_for("NVIDIA RTX PRO 6000, 12.0, 575.51.03"))
    assert message.startswith("driver 575.51.03 is too old for CUDA 13: install driver 580")


def test_malformed_row() -> None:
    assert "unexpected nvidia-smi row" in _error(gpu.check_gpus, 1, None, runner_for("garbage"))


def test_small_shm() -> None:
    message = _error(gpu.check_shm, 1 << 30, Path("/dev/shm"), 64 << 20)
    assert message.startswith("/dev/shm is 64 MiB, NCCL needs at least 1024 MiB") and "--ipc=host" in message


def test_shm_real_statvfs() -> None:
    size = gpu.shm_bytes(Path("/dev/shm"))
    assert size > 0
    assert gpu.check_shm(1, Path("/dev/shm")) == size


def test_shm_missing_path(tmp_path: Path) -> None:
    assert "is not available" in _error(gpu.check_shm, 1, tmp_path / "nope")


def test_port_in_use() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        message = _error(gpu.check_port, port, "127.0.0.1")
    assert message == (
        f"port {port} on 127.0.0.1 is in use: stop the other server or set DDTREE_PORT to a free port"
    )


def test_port_free() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gpu.check_port(port, "127.0.0.1")


def test_port_out_of_range() -> None:
    assert "out of range" in _error(gpu.check_port, 70000)
