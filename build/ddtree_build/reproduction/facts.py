"""A reproduction package's facts (ddtree-build import): pip freeze -> pins, OS/CUDA/GPU texts -> system
facts, bench results -> the reference schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.fsutil import read_text, sha256_file
from ddtree.jsontext import load_file
from ddtree.lockfile import Pin, parse_pins
from ddtree.os_release import parse_os_release
from ddtree.receipts.reference import validate_reference

from ddtree_build.freeze import render_freeze
from ddtree_build.reproduction import smi as smi_capture


def find_freeze(pkg: Path) -> Path:
    for pattern in ("env/pip-freeze.txt", "env/*freeze*.txt", "env/requirements*.txt"):
        found = sorted(pkg.glob(pattern))
        if found:
            return found[0]
    raise UserError(f"{pkg}/env: no pip freeze (env/pip-freeze.txt); the package must record its environment")


def _python_version(pkg: Path) -> str:
    text = _read(pkg, "env/python.txt")
    match = re.search(r"^version:\s*(\S+)", text, re.M)
    return match.group(1) if match else "unknown (not recorded in the package)"


def import_freeze(pkg: Path) -> tuple[list[Pin], str]:
    path = find_freeze(pkg)
    pins = parse_pins(read_text(path), str(path))
    if not pins:
        raise UserError(f"{path}: no pins")
    header = {
        "source": f"imported from {pkg.name}/{path.relative_to(pkg).as_posix()} by ddtree-build import",
        "freeze-file-sha256": sha256_file(path),
        "python": _python_version(pkg),
        "platform": "linux x86_64 (the source host)",
        "distributions": str(len(pins)),
    }
    return pins, render_freeze(pins, header, "Reference environment (pip-freeze form). Written by a tool.")


def _read(pkg: Path, rel: str) -> str:
    path = pkg / rel
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def system_facts(pkg: Path) -> dict[str, Any]:
    """OS, CUDA, driver and GPUs parsed from the package's text files; absent values are null."""
    os_values = {k: v for k, v in parse_os_release(_read(pkg, "env/os-release.txt")).items() if v}
    cuda = _read(pkg, "env/cuda.txt")
    nvcc = re.search(r"\bV(\d+\.\d+\.\d+)", cuda)
    cudart = re.search(r"libcudart\.so\.(\d+\.\d+\.\d+)", cuda)
    smi = smi_capture.parse(_read(pkg, "env/nvidia-smi.txt"))
    gpus = {"model": smi.model, "count": smi.count, "compute_capability": smi.compute_capability}
    return {
        "schema": 1,
        "source": f"imported from {pkg.name}",
        "os": {
            "id": os_values.get("ID"),
            "version_id": os_values.get("VERSION_ID"),
            "pretty_name": os_values.get("PRETTY_NAME"),
        },
        "cuda": {"nvcc": nvcc.group(1) if nvcc else None, "libcudart": cudart.group(1) if cudart else None},
        "driver": smi.driver,
        "gpus": gpus,
    }


def _runs(data: Any) -> list[dict]:
    if isinstance(data, dict) and isinstance(data.get("runs"), list):
        return [r for r in data["runs"] if isinstance(r, dict)]
    if isinstance(data, list):
        return [r for r in data if isinstance(r, dict)]
    return [data] if isinstance(data, dict) else []


def import_results(pkg: Path, out_path: Path) -> dict[str, Any] | None:
    """bench/results/*.json -> the reference schema; None when the package has no results."""
    files = sorted((pkg / "bench" / "results").glob("*.json")) if (pkg / "bench" / "results").is_dir() else []
    results, contexts, concurrency = [], set(), set()
    for path in files:
        data = load_file(path, "fix or remove the results file")
        for index, run in enumerate(_runs(data)):
            figures = {
                k: run[k]
                for k in ("output_tokens_per_s", "aggregate_output_tokens_per_s", "acceptance_length")
                if k in run
            }
            if not figures:
                continue
            entry = {
                "id": str(run.get("label") or f"{path.stem}-{index}"),
                "algorithm": str(run.get("algorithm") or "unknown"),
                "concurrency": run.get("concurrency"),
                "context": run.get("context_tokens"),
                "source_file": f"bench/results/{path.name}",
                **figures,
            }
            results.append(entry)
            if isinstance(run.get("context_tokens"), int):
                contexts.add(run["context_tokens"])
            if isinstance(run.get("concurrency"), int):
                concurrency.add(run["concurrency"])
    if not results:
        return None
    data = {
        "schema": 1,
        "source": f"imported from {pkg.name}/bench/results by ddtree-build import",
        "results": results,
        "sweep": {"context_tokens": sorted(contexts), "concurrency": sorted(concurrency)},
    }
    validate_reference(data, out_path)
    return data
