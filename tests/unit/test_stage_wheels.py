"""The GPU device's wheel recipe (tests/gpu/stage_wheels.py, tests/gpu/install_wheels.sh) without network
or a device: the need list from the real lock and the device's pip list, the parts, and the install script
on a wheel made here (a real `pip install --target`, standing in for the device's)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from ddtree.lockfile import parse_pins, read_pins

from tests.gpu import stage_wheels

INSTALL = Path(stage_wheels.HERE) / "install_wheels.sh"


def _device() -> dict[str, str]:
    pins = parse_pins(stage_wheels.DEVICE_PIP.read_text(), str(stage_wheels.DEVICE_PIP))
    return {p.name: p.version or "" for p in pins}


def test_the_device_gets_sglang_and_the_fixed_transformers_not_what_it_has() -> None:
    need = {p.name: p for p in stage_wheels.needed(read_pins(stage_wheels.DEFAULT_LOCK), _device())}
    assert "sglang" in need and "sglang-kernel" in need
    assert "transformers" in need  # present on the device, but at a version that breaks sglang
    assert "torch" not in need and "triton" not in need  # the device's own, the pinned versions
    assert not set(stage_wheels.SKIP) & set(need)
    text = stage_wheels.requirements_text(need.values())
    assert all("--hash=sha256:" in line for line in text.splitlines())
    assert len(text.splitlines()) == len(need)


def test_beside_the_main_lock_the_router_lock_stages_the_router_alone() -> None:
    """env/router.lock is the freeze's pins plus sglang-router: beside the main lock (already staged, or the
    device's own) only the router's wheel is left, so the device's secrets job can run the real router."""
    router_lock = stage_wheels.REPO_ROOT / "env" / "router.lock"
    beside = read_pins(stage_wheels.DEFAULT_LOCK)
    need = stage_wheels.needed(read_pins(router_lock), _device(), beside)
    assert [(p.name, p.version) for p in need] == [("sglang-router", "0.3.2")]
    assert len(stage_wheels.needed(read_pins(router_lock), _device())) > 1  # without --beside: its deps too


def test_a_pin_without_hash_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "bare.lock"
    lock.write_text("sglang==0.5.13.post1\n")
    try:
        stage_wheels.requirements_text(read_pins(lock))
    except SystemExit as exc:
        assert "bare.lock:1: sglang has no --hash" in str(exc)
    else:
        raise AssertionError("a pin without a hash was accepted")


def test_parts_put_back_together_give_the_tar(tmp_path: Path) -> None:
    tar = tmp_path / "w.tar"
    data = os.urandom(2500)
    tar.write_bytes(data)
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "p07").write_bytes(b"stale")  # from an earlier, longer run
    parts = stage_wheels.split(tar, tmp_path / "parts", part_bytes=1000)
    assert [p.name for p in parts] == ["p00", "p01", "p02"]
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == ["p00", "p01", "p02"]
    assert b"".join(p.read_bytes() for p in parts) == data


def _wheel(folder: Path, name: str = "tinypkg", version: str = "1.0") -> Path:
    """A minimal pure wheel pip installs."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={hashlib.sha256(body).hexdigest()},{len(body)}\n" for path, body in files.items()
    )
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, body in files.items():
            archive.writestr(path, body)
    return wheel


def _install(tmp_path: Path, sums: Path, tar: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "SITE_DIR": str(tmp_path / "site"),
        "UNPACK_DIR": str(tmp_path / "wx"),
        "PYTHON": sys.executable,
    }
    return subprocess.run(
        ["bash", str(INSTALL), str(sums), str(tar)], capture_output=True, text=True, env=env, timeout=120
    )


def test_install_script_checks_the_tar_and_installs_its_wheels(tmp_path: Path) -> None:
    wheels = tmp_path / "staged" / "wheels"
    wheels.mkdir(parents=True)
    wheel = _wheel(wheels)
    tar = tmp_path / "w.tar"
    stage_wheels.pack(wheels, stage_wheels.wheels_for(read_pins(_one_pin_lock(tmp_path, wheel)), wheels), tar)
    with tarfile.open(tar) as archive:
        assert archive.getnames() == [f"wheels/{wheel.name}"]
    sums = tmp_path / "w.tar.sha256"
    sums.write_text(hashlib.sha256(tar.read_bytes()).hexdigest() + "\n")
    out = _install(tmp_path, sums, tar)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "site" / "tinypkg" / "__init__.py").read_text() == "VALUE = 42\n"
    assert "installed 1 wheels" in out.stdout

    # A part missing or out of order: the checksum says so and nothing is installed.
    with open(tar, "ab") as handle:
        handle.write(b"a part appended twice")
    (tmp_path / "site" / "tinypkg" / "__init__.py").unlink()
    out = _install(tmp_path, sums, tar)
    assert out.returncode == 1
    assert "out of order" in out.stderr and not (tmp_path / "site" / "tinypkg" / "__init__.py").exists()


def _one_pin_lock(tmp_path: Path, wheel: Path) -> Path:
    lock = tmp_path / "one.lock"
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock.write_text(
        f"tinypkg==1.0 \\\n    --hash=sha256:{digest}\nother==2.0 \\\n    --hash=sha256:{'0' * 64}\n"
    )
    return lock
