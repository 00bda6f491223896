"""`ddtree-build capture`: record a serving host as a reproduction package (run on the source host).

The output has the layout of the original team's hand-made package, so `ddtree-build import` reads both:

    env/pip-freeze.txt     `pip freeze` of the serving interpreter
    env/python.txt         interpreter, version, sglang version and location
    env/os-release.txt     /etc/os-release
    env/cuda.txt           `nvcc --version` and the libcudart files found (or "absent")
    env/nvidia-smi.txt     driver and GPUs from an nvidia-smi query, topology (or "absent")
    env/environment.txt    NCCL_*, SGLANG_*, CUDA_*, TORCH_CUDA_*, FLASHINFER_* variables
    env/capture.json       the same facts, machine-readable
    env/weights.yaml       with --weights-target/--weights-drafter: the weights lock of the served weights
    patches/diffs/NNNN-*.diff   installed sglang versus the pristine wheel of its version, one file each
    patches/full/<path>    the changed files as installed
    services/<unit>        the systemd units given with --service
    REPRODUCE.md, MANIFEST.sha256

Missing tools (no GPU, no nvcc, no nvidia-smi) are recorded as absent, never a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ddtree.errors import UserError
from ddtree.os_release import parse_os_release

from ddtree_build import paths
from ddtree_build.patching import pristine
from ddtree_build.reproduction.manifest import write_manifest

DISTRIBUTION = "sglang"
ENV_PREFIXES = ("NCCL_", "SGLANG_", "CUDA_", "TORCH_CUDA_", "FLASHINFER_")
_UNIT_DIRS = (Path("/etc/systemd/system"), Path("/lib/systemd/system"), Path("/usr/lib/systemd/system"))
# Bytecode, metadata and compiled extensions (their names carry the CPython tag) are not compared.
_SKIP = re.compile(r"(^|/)__pycache__/|\.py[co]$|\.so(\.[0-9.]+)?$|\.dist-info/|\.data/")
NVCC_FALLBACKS: tuple[str, ...] = ("/usr/local/cuda/bin/nvcc",)
_GPU_QUERY = "index,name,pci.bus_id,driver_version,memory.total,compute_cap"

# Run inside the captured interpreter: metadata only, never `import sglang` (it pulls in torch and CUDA).
_PROBE = r"""
import json, sys, sysconfig
from importlib import metadata
info = {"executable": sys.executable, "version": sys.version.split()[0],
        "purelib": sysconfig.get_paths()["purelib"], "distributions": {}, "sglang": None}
for dist in metadata.distributions():
    name = dist.metadata.get("Name")
    if name:
        info["distributions"].setdefault(name, dist.version)
try:
    dist = metadata.distribution("sglang")
    info["sglang"] = {"version": dist.version, "root": str(dist.locate_file(""))}
except metadata.PackageNotFoundError:
    pass
print(json.dumps(info))
"""


@dataclass
class Capture:
    """What was found, for capture.json and the summary line."""

    python: dict = field(default_factory=dict)
    os_release: dict[str, str] = field(default_factory=dict)
    nvcc: str | None = None
    libcudart: list[str] = field(default_factory=list)
    gpus: list[dict[str, str]] = field(default_factory=list)
    driver: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    weights: dict[str, str] = field(default_factory=dict)


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str] | None:
    """Run a probe; None when the program is missing or fails to start (recorded as absent)."""
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False
        )
    except (FileNotFoundError, PermissionError, subprocess.TimeoutExpired, OSError):
        return None


def probe_python(python: str) -> tuple[dict, str]:
    """(interpreter facts, pip freeze text) of the interpreter that serves."""
    done = _run([python, "-c", _PROBE])
    if done is None or done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [""])[-1] if done else "cannot run it"
        raise UserError(f"--python {python}: not a working Python interpreter ({detail})")
    info = json.loads(done.stdout)
    # Plain `pip freeze` (no --all), as the original team recorded it: pip/setuptools/wheel are not the stack.
    freeze = _run([python, "-m", "pip", "freeze"])
    if freeze is not None and freeze.returncode == 0:
        return info, freeze.stdout
    # No pip in that environment (uv venvs): this tool's pip reads its site-packages instead.
    freeze = _run([sys.executable, "-m", "pip", "freeze", "--path", info["purelib"]])
    if freeze is not None and freeze.returncode == 0:
        return info, freeze.stdout
    # No pip at all: the same list from the interpreter's metadata.
    lines = [
        f"{name}=={version}"
        for name, version in sorted(info["distributions"].items(), key=lambda x: x[0].lower())
    ]
    return info, "# pip is not installed in this interpreter: listed from importlib.metadata\n" + "\n".join(
        lines
    ) + "\n"


def probe_os(os_release: Path) -> tuple[dict[str, str], str]:
    try:
        text = os_release.read_text(encoding="utf-8")
    except OSError:
        return {}, f"absent: {os_release} not readable\n"
    return parse_os_release(text), text


def probe_cuda(site_root: str | None) -> tuple[str | None, list[str], str]:
    """nvcc's version line, libcudart files (ldconfig and the nvidia wheels), and the text for cuda.txt."""
    lines = []
    fallbacks = [path for path in NVCC_FALLBACKS if Path(path).is_file()]
    nvcc_path = shutil.which("nvcc") or (fallbacks[0] if fallbacks else None)
    nvcc_version = None
    done = _run([nvcc_path, "--version"]) if nvcc_path else None
    if done is not None and done.returncode == 0:
        lines += [f"nvcc: {nvcc_path}", done.stdout.rstrip()]
        match = re.search(r"V(\d+\.\d+\.\d+)", done.stdout)
        nvcc_version = match.group(1) if match else done.stdout.strip().splitlines()[-1]
    else:
        lines.append("nvcc: absent")
    found: list[str] = []
    ldconfig = _run(["ldconfig", "-p"])
    if ldconfig is not None and ldconfig.returncode == 0:
        found += sorted(
            {line.split("=>")[-1].strip() for line in ldconfig.stdout.splitlines() if "libcudart.so" in line}
        )
    if site_root:
        found += sorted(str(p) for p in Path(site_root).glob("nvidia/*/lib/libcudart.so*"))
    lines.append("libcudart: " + (", ".join(found) if found else "absent"))
    return nvcc_version, found, "\n".join(lines) + "\n"


def probe_gpus() -> tuple[list[dict[str, str]], str | None, str]:
    smi = shutil.which("nvidia-smi")
    done = _run([smi, f"--query-gpu={_GPU_QUERY}", "--format=csv,noheader"]) if smi else None
    if done is None or done.returncode != 0:
        reason = "not installed" if not smi else (done.stderr.strip() if done else "failed")
        return [], None, f"nvidia-smi: absent ({reason})\n"
    keys = _GPU_QUERY.split(",")
    gpus = [
        dict(zip(keys, (v.strip() for v in row.split(",")), strict=False))
        for row in done.stdout.splitlines()
        if row.strip()
    ]
    topo = _run([smi, "topo", "-m"])
    text = f"query: {_GPU_QUERY}\n{done.stdout.rstrip()}\n"
    if topo is not None and topo.returncode == 0:
        text += "\n# nvidia-smi topo -m\n" + topo.stdout
    driver = gpus[0].get("driver_version") if gpus else None
    return gpus, driver, text


def probe_environment(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)}


def _package_dirs(names: list[str]) -> set[str]:
    """Top-level folders the wheel installs (sglang/, ...), so added files are searched only there."""
    return {name.split("/", 1)[0] for name in names if "/" in name and not _SKIP.search(name)}


def diff_against_pristine(
    site_root: Path, wheel: Path
) -> tuple[dict[str, bytes], list[str], list[str], list[str]]:
    """({path: unified diff}, changed, added, deleted) of the installed tree versus the pristine wheel."""
    from ddtree.patchset import udiff  # here, not at the top: every ddtree-build start imports this module

    reader = pristine.WheelReader(wheel)
    try:
        names = [n for n in reader.names() if not _SKIP.search(n)]
        diffs: dict[str, bytes] = {}
        changed, deleted = [], []
        for name in names:
            installed = site_root / name
            if not installed.is_file():
                deleted.append(name)
                continue
            old, new = reader.read(name), installed.read_bytes()
            if old != new:
                changed.append(name)
                if b"\0" not in old + new:  # a binary change is listed but cannot be a text diff
                    diffs[name] = udiff.make_file_diff(name, old, new)
        known = set(names)
        added = []
        for top in sorted(_package_dirs(names)):
            for path in sorted((site_root / top).rglob("*")):
                rel = path.relative_to(site_root).as_posix()
                if path.is_file() and rel not in known and not _SKIP.search(rel):
                    added.append(rel)
                    data = path.read_bytes()
                    if b"\0" not in data:
                        diffs[rel] = udiff.make_file_diff(rel, None, data)
        return diffs, changed, added, deleted
    finally:
        reader.close()


def find_unit(unit: str) -> tuple[str, str]:
    """(file name, text) of a systemd unit given as a path or a name (`systemctl cat` when available)."""
    path = Path(unit)
    if path.is_file():
        return path.name, path.read_text(encoding="utf-8")
    name = unit if "." in unit else f"{unit}.service"
    for folder in _UNIT_DIRS:
        if (folder / name).is_file():
            return name, (folder / name).read_text(encoding="utf-8")
    done = _run(["systemctl", "cat", name])
    if done is not None and done.returncode == 0 and done.stdout.strip():
        return name, done.stdout
    raise UserError(f"--service {unit}: no such unit file or systemd unit; give the .service file's path")


def _flat(path: str) -> str:
    return path.replace("/", "-")


def capture(
    out: Path,
    python: str = sys.executable,
    services: list[str] | None = None,
    os_release: Path = Path("/etc/os-release"),
    environ: dict[str, str] | None = None,
    wheel: Path | None = None,
    weights: dict[str, Path] | None = None,
) -> Capture:
    """Write a reproduction package of this host into `out` (a new folder, moved into place at the end).

    `weights` (role -> folder: target, drafter) adds env/weights.yaml: the revision, sizes and sha256 of
    the served weights (ddtree.weights.capture; nothing copied), which `import` carries into env/.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: exists and is not empty; give a new folder")
    for role, folder in (weights or {}).items():
        if not Path(folder).is_dir():
            raise UserError(f"--weights-{role} {folder}: not a folder; give the {role} weights folder")
    facts = Capture()
    info, freeze_text = probe_python(python)
    facts.python = {k: v for k, v in info.items() if k != "distributions"}
    sg = info.get("sglang")
    if not sg:
        raise UserError(f"--python {python}: sglang is not installed there; pass the interpreter that serves")
    facts.os_release, os_text = probe_os(os_release)
    facts.nvcc, facts.libcudart, cuda_text = probe_cuda(info.get("purelib"))
    facts.gpus, facts.driver, smi_text = probe_gpus()
    facts.environment = probe_environment(dict(os.environ if environ is None else environ))
    facts.absent = [
        what
        for what, present in (
            ("nvcc", facts.nvcc),
            ("libcudart", facts.libcudart),
            ("nvidia-smi", facts.gpus),
        )
        if not present
    ]
    wheel = Path(wheel) if wheel else pristine.ensure_wheel(DISTRIBUTION, sg["version"])
    diffs, facts.changed, facts.added, facts.deleted = diff_against_pristine(Path(sg["root"]), wheel)

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        env = staging / "env"
        env.mkdir()
        header = (
            f"# captured by ddtree-build capture from {info['executable']} "
            f"(Python {info['version']}) on {platform.node()}\n"
        )
        (env / "pip-freeze.txt").write_text(header + freeze_text, encoding="utf-8")
        (env / "python.txt").write_text(
            f"executable: {info['executable']}\nversion: {info['version']}\n"
            f"sglang: {sg['version']} at {sg['root']}\npristine wheel: {wheel.name}\n",
            encoding="utf-8",
        )
        (env / "os-release.txt").write_text(os_text, encoding="utf-8")
        (env / "cuda.txt").write_text(cuda_text, encoding="utf-8")
        (env / "nvidia-smi.txt").write_text(smi_text, encoding="utf-8")
        (env / "environment.txt").write_text(
            "".join(f"{k}={v}\n" for k, v in facts.environment.items()), encoding="utf-8"
        )
        for number, rel in enumerate(sorted(diffs), start=1):
            target = staging / "patches" / "diffs" / f"{number:04d}-{_flat(rel)}.diff"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(diffs[rel])
            full = staging / "patches" / "full" / rel
            full.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(sg["root"]) / rel, full)
        for unit in services or []:
            name, text = find_unit(unit)
            (staging / "services").mkdir(exist_ok=True)
            (staging / "services" / name).write_text(text, encoding="utf-8")
            facts.services.append(name)
        if weights:
            from ddtree.weights import capture as weights_capture

            facts.weights = {role: str(folder) for role, folder in weights.items()}
            weights_capture.capture_lock(
                env / "weights.yaml",
                weights,
                base=paths.ENV_DIR / "weights.yaml",
                source=f"captured by ddtree-build capture on {platform.node()}",
            )
        (env / "capture.json").write_text(
            json.dumps(facts.__dict__, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        (staging / "REPRODUCE.md").write_text(_readme(facts, sg["version"]), encoding="utf-8")
        for path in staging.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        write_manifest(staging)
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return facts


def _readme(facts: Capture, version: str) -> str:
    gpus = ", ".join(sorted({g.get("name", "?") for g in facts.gpus})) or "absent"
    return (
        "# Reproduction package (captured)\n\n"
        f"Written by `ddtree-build capture`. sglang {version}, Python {facts.python.get('version')}, "
        f"OS {facts.os_release.get('PRETTY_NAME', 'unknown')}, nvcc {facts.nvcc or 'absent'}, "
        f"driver {facts.driver or 'absent'}, GPUs: {gpus} x{len(facts.gpus)}.\n\n"
        f"Changed files versus the pristine wheel: {len(facts.changed)}; added: {len(facts.added)}; "
        f"deleted: {len(facts.deleted)}. Units: {', '.join(facts.services) or 'none'}.\n\n"
        "Import into a checkout with `ddtree-build import THIS_FOLDER --out DIR`; check the files with "
        "`sha256sum -c MANIFEST.sha256`.\n"
    )


def _cmd_capture(args: argparse.Namespace) -> int:
    weights = {
        role: folder
        for role, folder in (("target", args.weights_target), ("drafter", args.weights_drafter))
        if folder
    }
    facts = capture(
        Path(args.out), python=args.python, services=args.service, wheel=args.wheel, weights=weights or None
    )
    absent = f"; absent: {', '.join(facts.absent)}" if facts.absent else ""
    print(
        f"captured {args.out}: sglang {len(facts.changed)} changed / {len(facts.added)} added / "
        f"{len(facts.deleted)} deleted file(s), {len(facts.gpus)} GPU(s), "
        f"{len(facts.services)} unit(s){absent}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("capture", help="record this serving host as a reproduction package")
    parser.add_argument("--out", required=True, help="new folder to write the package into")
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter that serves (default: this one)"
    )
    parser.add_argument(
        "--service", action="append", default=[], help="systemd unit name or file (repeatable)"
    )
    parser.add_argument(
        "--wheel", type=Path, help="pristine sglang wheel to diff against (default: download/cache)"
    )
    for role in ("target", "drafter"):
        parser.add_argument(
            f"--weights-{role}",
            type=Path,
            metavar="DIR",
            help=f"the served {role} weights (plain folder or Hugging Face cache repo) -> env/weights.yaml",
        )
    parser.set_defaults(func=_cmd_capture)
