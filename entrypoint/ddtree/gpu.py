"""Host checks before launch: GPUs (count, arch, driver), /dev/shm and the port.

GPUs are read through `nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`, not
torch: the check must answer in a second, before CUDA is initialised, and must work when the driver is
too old for torch to load. The runner is injectable so tests can feed nvidia-smi's output.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddtree.errors import UserError

# CUDA 13.0 needs an R580 driver or newer.
MIN_DRIVER_MAJOR = 580
ARCH_OVERRIDE_ENV = "DDTREE_ALLOW_ARCH_MISMATCH"
# NCCL 2.28 with 8 ranks needs far more than Docker's default 64 MB /dev/shm; 1 GiB is a safe floor.
DEFAULT_MIN_SHM_BYTES = 1 << 30
QUERY = ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
GPU_HINT = (
    "run the container with GPUs (docker run --gpus all; compose reserves them) "
    "and the NVIDIA Container Toolkit"
)

Runner = Callable[[Sequence[str]], str]


@dataclass(frozen=True)
class Gpu:
    """One row of nvidia-smi's answer."""

    name: str
    compute_cap: str
    driver_version: str


def run_nvidia_smi(argv: Sequence[str]) -> str:
    """Run nvidia-smi; 'not there' and 'failed' both mean no usable GPU, with the reason."""
    if shutil.which(argv[0]) is None:
        raise UserError(f"no GPU visible: {argv[0]} is not on PATH in this container; {GPU_HINT}")
    try:
        # errors="replace": a driver's odd bytes must not become a traceback; the fields read are ASCII
        done = subprocess.run(
            list(argv), capture_output=True, text=True, errors="replace", timeout=30, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise UserError("no GPU answer: nvidia-smi hung for 30 s; check the driver on the host") from exc
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(
            f"no GPU visible: nvidia-smi failed ({reason[0] if reason else done.returncode}); {GPU_HINT}"
        )
    return done.stdout


def query_gpus(runner: Runner = run_nvidia_smi) -> list[Gpu]:
    """Parse nvidia-smi's csv rows; zero rows is an error, not an empty list."""
    rows = [line.strip() for line in runner(QUERY).splitlines() if line.strip()]
    if not rows:
        raise UserError(f"no GPU visible: nvidia-smi lists no devices; {GPU_HINT}")
    gpus = []
    for row in rows:
        parts = [p.strip() for p in row.rsplit(",", 2)]  # a name may hold commas; the last two fields do not
        if len(parts) != 3:
            raise UserError(f"unexpected nvidia-smi row {row!r}: expected name, compute_cap, driver_version")
        gpus.append(Gpu(*parts))
    return gpus


def driver_major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError as exc:
        raise UserError(f"unexpected driver version {version!r} from nvidia-smi") from exc


def check_gpus(
    tp: int,
    compute_cap: str | None,
    runner: Runner = run_nvidia_smi,
    allow_arch_mismatch: bool | None = None,
) -> list[Gpu]:
    """Enough GPUs for TP (a positive divisor of the visible count), the target's architecture (unless
    overridden), a CUDA 13 driver."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UserError(
            f"tensor parallel size {tp!r} is not a positive integer: set DDTREE_TP (8 as measured)"
        )
    gpus = query_gpus(runner)
    if len(gpus) < tp:
        raise UserError(
            f"too few GPUs: {len(gpus)} visible, tensor parallel size is {tp}; expose all GPUs "
            "(--gpus all, CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES) or lower --tp-size"
        )
    if len(gpus) % tp:
        fits = [n for n in range(1, len(gpus) + 1) if len(gpus) % n == 0]
        raise UserError(
            f"tensor parallel size {tp} does not divide the {len(gpus)} visible GPUs: set DDTREE_TP to one "
            f"of {', '.join(map(str, fits))}, or expose a multiple of {tp} GPUs (NVIDIA_VISIBLE_DEVICES)"
        )
    if allow_arch_mismatch is None:
        allow_arch_mismatch = os.environ.get(ARCH_OVERRIDE_ENV, "") == "1"
    if compute_cap and not allow_arch_mismatch:
        wrong = [g for g in gpus if g.compute_cap != compute_cap]
        if wrong:
            raise UserError(
                f"wrong GPU architecture: {wrong[0].name} has compute capability {wrong[0].compute_cap}, the "
                f"target expects {compute_cap}; pick the matching target (DDTREE_TARGET) or set "
                f"{ARCH_OVERRIDE_ENV}=1 to run anyway"
            )
    old = [g for g in gpus if driver_major(g.driver_version) < MIN_DRIVER_MAJOR]
    if old:
        raise UserError(
            f"driver {old[0].driver_version} is too old for CUDA 13: "
            f"install driver {MIN_DRIVER_MAJOR} or newer on the host"
        )
    return gpus


def describe(gpus: Sequence[Gpu], tp: int) -> str:
    """The GPUs a check found, in one line (serve's log and the self-check's detail say the same)."""
    first = gpus[0]
    return f"{len(gpus)} x {first.name} (sm {first.compute_cap}, driver {first.driver_version}), TP {tp}"


def shm_bytes(path: Path = Path("/dev/shm")) -> int:
    stats = os.statvfs(path)
    return stats.f_frsize * stats.f_blocks


def check_shm(
    min_bytes: int = DEFAULT_MIN_SHM_BYTES, path: Path = Path("/dev/shm"), size: int | None = None
) -> int:
    """/dev/shm is large enough for NCCL; `size` lets tests stand in for statvfs."""
    if size is None:
        try:
            size = shm_bytes(path)
        except OSError as exc:
            raise UserError(
                f"{path} is not available ({exc.strerror}): run with --ipc=host or --shm-size"
            ) from exc
    if size < min_bytes:
        raise UserError(
            f"{path} is {size / 2**20:.0f} MiB, NCCL needs at least {min_bytes / 2**20:.0f} MiB: run with "
            "--ipc=host (compose: ipc: host) or --shm-size=16g"
        )
    return size


def check_port(port: int, host: str = "0.0.0.0") -> None:
    """Nothing listens on the port yet (a bind test, released at once)."""
    if not 0 < port < 65536:
        raise UserError(f"port {port} is out of range: set DDTREE_PORT to 1..65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(
                    f"port {port} on {host} is in use: "
                    "stop the other server or set DDTREE_PORT to a free port"
                ) from exc
            raise UserError(
                f"port {port} on {host} cannot be bound ({exc.strerror}): set DDTREE_PORT"
            ) from exc
