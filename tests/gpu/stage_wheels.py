"""Stage the pinned wheels a GPU machine without network lacks, in parts small enough to carry one per call.

    .venv/bin/python -m tests.gpu.stage_wheels [--lock env/requirements-py312.lock] [--out .device]
    .venv/bin/python -m tests.gpu.stage_wheels --lock env/router.lock \
        --beside env/requirements-py312.lock --out .device/router     # sglang-router alone (one part)

The device has Python 3.12 with torch 2.11.0, Triton 3.6.0 and nvcc 13.0 already (its `pip freeze` is
tests/gpu/device-pip-2026-11-29.txt) but not SGLang and its other needs. This compares the project's
Python 3.12 lock with that list, downloads what is missing with `pip download --require-hashes` (every
wheel checked against the lock's sha256), packs the wheels in one tar and splits it into 48 MiB parts.
`--beside LOCK` leaves out the pins LOCK already stages (same name and version): env/router.lock is the
freeze's pins plus sglang-router, so beside the main lock it stages the router's wheel alone.

    OUT/parts/p00, p01, ...  carry one per call, in order: `cat OUT/parts/pNN >> /tmp/w.tar`
    OUT/w.tar.sha256         carry with the last part: `bash tests/gpu/install_wheels.sh OUT/w.tar.sha256`

tests/gpu/README.md has the whole recipe.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from ddtree.fsutil import atomic_write, sha256_file
from ddtree.lockfile import Pin, parse_pins, read_pins

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DEFAULT_LOCK = REPO_ROOT / "env" / "requirements-py312.lock"
DEVICE_PIP = HERE / "device-pip-2026-11-29.txt"
DEFAULT_OUT = REPO_ROOT / ".device"  # ignored by .gitignore, so only what a call carries travels
PART_BYTES = 48 * 1024 * 1024  # a call carries at most 64 MiB with the working tree (7.6 MiB on 2026-12-03e:
# 56 MiB parts no longer fit beside it)
PYTHON_VERSION = "3.12"
# sglang 0.5.13.post1 ships manylinux_2_34 wheels; pip matches each manylinux tag exactly, so name them all.
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
# Locked, but the device does without them.
SKIP: Mapping[str, str] = {
    "flashinfer-cubin": "prebuilt sm_100/sm_103 kernels; an H200 is sm_90 and flashinfer JIT-compiles",
    "nvidia-cuda-nvcc": "the device has its own nvcc 13.0",
    "nvidia-cuda-crt": "goes with the nvcc wheel",
    "nvidia-nvvm": "goes with the nvcc wheel",
    "nvidia-cuda-tileiras": "goes with the nvcc wheel",
}
# On the device, but at versions that break sglang 0.5.13.post1: the locked ones go into /tmp/site.
FORCE: Mapping[str, str] = {
    "transformers": "5.17 rejects sglang's configs ('qwen3_asr' is already used by a Transformers config)",
    "tokenizers": "goes with the locked transformers",
    "huggingface-hub": "goes with the locked transformers",
    "timm": "goes with the locked transformers",
    "python-dateutil": "the lock's version",
}


def needed(lock: Iterable[Pin], device: Mapping[str, str], beside: Iterable[Pin] = ()) -> list[Pin]:
    """The lock's pins the device lacks (or must replace), by name; SKIP left out, and those `beside`
    (another lock, staged on its own) already pins at the same version."""
    staged = {(pin.name, pin.version) for pin in beside}
    return [
        pin
        for pin in sorted(lock, key=lambda p: p.name)
        if pin.name not in SKIP
        and (pin.name not in device or pin.name in FORCE)
        and (pin.name, pin.version) not in staged
    ]


def requirements_text(pins: Iterable[Pin]) -> str:
    """A hash-locked requirements file: `name==version --hash=sha256:...` per pin, for --require-hashes."""
    lines = []
    for pin in pins:
        if not pin.hashes:
            raise SystemExit(f"error: {pin.source}:{pin.lineno}: {pin.name} has no --hash; run `make lock`")
        lines.append(" ".join([pin.requirement_line(), *(f"--hash={h}" for h in pin.hashes)]))
    return "\n".join(lines) + "\n"


def download(requirements: Path, wheels: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    command += ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += ["--dest", str(wheels), "-r", str(requirements)]
    if subprocess.run(command).returncode != 0:
        raise SystemExit(f"error: pip download -r {requirements} failed (needs network to PyPI; see above)")


def wheels_for(pins: Iterable[Pin], wheels: Path) -> list[str]:
    """The wheel file names in `wheels` that are these pins (the folder may hold others from earlier runs)."""
    from packaging.utils import parse_wheel_filename
    from packaging.version import Version

    wanted = {(pin.name, Version(pin.version or "0")) for pin in pins}
    return sorted(w.name for w in wheels.glob("*.whl") if parse_wheel_filename(w.name)[:2] in wanted)


def pack(wheels: Path, names: Iterable[str], tar_path: Path) -> None:
    """One tar of the wheels (sorted, under wheels/), written to a temporary name and renamed."""
    partial = tar_path.with_name(tar_path.name + ".partial")
    with tarfile.open(partial, "w") as tar:
        for name in sorted(names):
            tar.add(wheels / name, arcname=f"wheels/{name}")
    partial.replace(tar_path)


def split(tar_path: Path, parts: Path, part_bytes: int = PART_BYTES) -> list[Path]:
    """tar_path cut into parts/p00, p01, ... of part_bytes each (the last shorter); old parts removed."""
    parts.mkdir(parents=True, exist_ok=True)
    for old in parts.glob("p[0-9][0-9]"):
        old.unlink()
    written = []
    with open(tar_path, "rb") as source:
        while chunk := source.read(part_bytes):
            part = parts / f"p{len(written):02d}"
            atomic_write(part, chunk)
            written.append(part)
    return written


def stage(lock: Path, out: Path, beside: Path | None = None) -> list[Path]:
    device = {pin.name: pin.version or "" for pin in parse_pins(DEVICE_PIP.read_text(), str(DEVICE_PIP))}
    pins = needed(read_pins(lock), device, read_pins(beside) if beside else ())
    if not pins:
        raise SystemExit(
            f"error: {lock} adds nothing the device lacks" + (f" beside {beside}" if beside else "")
        )
    out.mkdir(parents=True, exist_ok=True)
    requirements = out / "need.txt"
    atomic_write(requirements, requirements_text(pins))
    wheels = out / "wheels"
    wheels.mkdir(exist_ok=True)
    print(f"{len(pins)} of the lock's distributions to stage ({requirements})", flush=True)
    download(requirements, wheels)
    names = wheels_for(pins, wheels)
    if len(names) != len(pins):
        raise SystemExit(f"error: {len(pins)} distributions asked for, {len(names)} wheels in {wheels}")
    tar_path = out / "w.tar"
    pack(wheels, names, tar_path)
    atomic_write(out / "w.tar.sha256", sha256_file(tar_path) + "\n")
    parts = split(tar_path, out / "parts")
    size = tar_path.stat().st_size
    print(f"{len(names)} wheels, {size / 2**20:.0f} MiB in {len(parts)} parts under {out / 'parts'}")
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, default=DEFAULT_LOCK, help="a Python 3.12 hash lock")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="an ignored folder of the checkout")
    parser.add_argument(
        "--beside", type=Path, help="a lock staged on its own: its pins (same version) are left out"
    )
    args = parser.parse_args(argv)
    parts = stage(args.lock, args.out, args.beside)
    out = os.path.relpath(args.out, REPO_ROOT)  # the path a device call carries, from the repo root
    last = f"{out}/parts/p{len(parts) - 1:02d}"
    # Staged beside the main tar: its own tar and unpack folder on the device (/tmp/wx keeps the main wheels).
    tar, install = "/tmp/w.tar", f"bash tests/gpu/install_wheels.sh {out}/w.tar.sha256"
    if args.beside:
        name = args.out.name
        tar = f"/tmp/{name}.tar"
        install = f"UNPACK_DIR=/tmp/{name}-wx bash tests/gpu/install_wheels.sh {out}/w.tar.sha256 {tar}"
    print(f"next: carry {out}/parts/pNN one per call, in order: `cat {out}/parts/pNN >> {tar}`;")
    print(f"      with {last} also {out}/w.tar.sha256: `{install}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
