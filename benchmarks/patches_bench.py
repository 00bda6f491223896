"""Time the patch tools: `ddtree-build patches check` (warm wheel cache) and `verify` on an installed tree.

Goals (issue 4): check under 5 s warm, verify under 1 s.

Two series are timed: the project's patches/series.yaml as it is now, and a synthetic series of N patches
(one per file, on the N largest sglang/srt modules of the pinned wheel, written as `refresh` writes them),
so the figures mean something while the real series is still short. Each figure is the median of --runs
runs; "cli" is the wall time of the command as a user runs it (interpreter start included), "engine" the
time inside the function.

    .venv/bin/python benchmarks/patches_bench.py [--runs 5] [--synthetic 12]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from ddtree.fsutil import sha256_bytes
from ddtree.patchset import apply, udiff, verify
from ddtree.patchset import series as series_mod
from ddtree.patchset.series import FileSpec, Patch, Series
from ddtree_build.patching import check as patch_check
from ddtree_build.patching import pristine
from ddtree_build.paths import PATCHES_DIR

GOAL_CHECK_S = 5.0
GOAL_VERIFY_S = 1.0


def _median_time(func, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        func()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _cli(args: list[str]) -> None:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {done.stderr.strip()}")


def synthetic_series(folder: Path, wheel: Path, count: int) -> Path:
    """N one-line patches on the N largest sglang/srt .py files, each with a signature."""
    with zipfile.ZipFile(wheel) as archive:
        infos = [
            i
            for i in archive.infolist()
            if i.filename.startswith("sglang/srt/") and i.filename.endswith(".py")
        ]
        largest = sorted(infos, key=lambda i: -i.file_size)[:count]
        patches = []
        for number, info in enumerate(largest, 1):
            old = archive.read(info.filename)
            new = old + f"\n\nDDTREE_BENCH_{number} = {number}\n".encode()
            name = f"{number:04d}-bench-{number}.diff"
            (folder / name).write_bytes(udiff.make_file_diff(info.filename, old, new))
            spec = FileSpec(info.filename, sha256_bytes(old), sha256_bytes(new), [f"DDTREE_BENCH_{number}"])
            patches.append(Patch(f"bench-{number}", "benchmark patch", name, [spec]))
    path = folder / "series.yaml"
    series_mod.write(Series(path, "sglang", "0.5.13.post1", patches))
    return path


def bench(label: str, series_path: Path, wheel: Path, runs: int) -> list[tuple[str, float, float]]:
    loaded = series_mod.load(series_path)
    size = sum(len(p.files) for p in loaded.patches)
    rows = []
    check_engine = _median_time(lambda: patch_check.check(series_path), runs)
    check_cli = _median_time(
        lambda: _cli(["-m", "ddtree_build.cli", "patches", "check", "--series", str(series_path)]), runs
    )
    rows.append(
        (
            f"{label}: patches check, warm cache ({len(loaded.patches)} patches, {size} files)",
            check_cli,
            check_engine,
        )
    )
    with tempfile.TemporaryDirectory(prefix="ddtree-bench-") as tmp:
        root = pristine.extract(wheel, Path(tmp) / "site-packages")
        apply(root, loaded)
        verify_engine = _median_time(lambda: verify(root).raise_if_failed(), runs)
        verify_cli = _median_time(
            lambda: _cli(["-m", "ddtree.patchset", "verify", "--root", str(root)]), runs
        )
        rows.append((f"{label}: verify on an installed tree (manifest, .pyc)", verify_cli, verify_engine))
        for cache in root.rglob("__pycache__"):
            shutil.rmtree(cache)
        verify_engine = _median_time(lambda: verify(root).raise_if_failed(), runs)
        verify_cli = _median_time(
            lambda: _cli(["-m", "ddtree.patchset", "verify", "--root", str(root)]), runs
        )
        rows.append((f"{label}: verify, no .pyc (compiles the sources)", verify_cli, verify_engine))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--synthetic", type=int, default=12, help="files in the synthetic series (0: skip)")
    args = parser.parse_args()
    real = PATCHES_DIR / "series.yaml"
    base = series_mod.load(real)
    wheel = pristine.ensure_wheel(base.distribution, base.version)  # warms the cache before timing
    rows = bench("project series", real, wheel, args.runs)
    if args.synthetic:
        with tempfile.TemporaryDirectory(prefix="ddtree-bench-series-") as tmp:
            path = synthetic_series(Path(tmp), wheel, args.synthetic)
            rows += bench("synthetic series", path, wheel, args.runs)
    print(f"patches benchmark: median of {args.runs} runs; wheel {wheel.name}")
    print(f"{'what':<78} {'cli s':>7} {'engine s':>9}  goal")
    for what, cli_s, engine_s in rows:
        goal = GOAL_CHECK_S if "check" in what else GOAL_VERIFY_S
        verdict = "ok" if cli_s < goal else "OVER"
        print(f"{what:<78} {cli_s:7.2f} {engine_s:9.3f}  < {goal:.0f} s {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
