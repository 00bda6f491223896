"""Weights checks, measured: the fast check over 64 synthetic shards, and --full-hash against sha256sum.

    .venv/bin/python benchmarks/weights_bench.py [--shards 64] [--shard-mib 16] [--dir DIR] [--repeats 2]

Goals (issue 8): fast check under 1 s; full hash at least as fast as `sha256sum` over the same files,
using every core. Both hashers read the same files from the page cache (the files were just written),
so the figure compares hashing work, not the disk. Also shown: sha256sum run in parallel by xargs -P,
the best a shell one-liner does.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "entrypoint"), str(REPO)]

from ddtree.weights import folders as weights  # noqa: E402
from ddtree.weights import hashes as weights_hash  # noqa: E402

from tests.synthetic_weights import write_target  # noqa: E402


def timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def sha256sum(paths: list[Path], parallel: int = 1) -> dict[str, str]:
    if parallel == 1:
        out = subprocess.run(
            ["sha256sum", *map(str, paths)], capture_output=True, text=True, check=True
        ).stdout
    else:
        out = subprocess.run(
            ["xargs", "-0", "-n", "1", "-P", str(parallel), "sha256sum"],
            input="\0".join(map(str, paths)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return {Path(line.split(maxsplit=1)[1]).name: line.split()[0] for line in out.splitlines()}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--shard-mib", type=int, default=16, help="size of each shard (MiB)")
    parser.add_argument(
        "--dir", help="where to write the shards (default: a temporary folder, removed after)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="runs of each hasher; the best is kept")
    args = parser.parse_args()
    if shutil.which("sha256sum") is None:
        print("sha256sum is not installed (coreutils)", file=sys.stderr)
        return 2
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="weights-bench-"))
    folder = base / "target"
    cores = os.cpu_count() or 1
    try:
        t_write, paths = timed(
            lambda: write_target(
                folder, shards=args.shards, tensor_bytes=args.shard_mib << 19, random_data=True
            )
        )
        total = sum(p.stat().st_size for p in paths)
        print(f"wrote {len(paths)} shards, {total / 2**30:.2f} GiB, in {t_write:.1f} s ({folder})")

        fast = min(timed(lambda: weights.check_target(folder, "kimi_k25"))[0] for _ in range(5))
        print(
            f"fast check ({len(paths)} shards: config, index, every header and size): {fast * 1000:.1f} ms "
            f"[goal < 1000 ms: {'met' if fast < 1 else 'MISSED'}]"
        )

        ours = theirs = theirs_parallel = float("inf")
        digests = reference = {}
        for _ in range(args.repeats):
            t, report = timed(lambda: weights_hash.full_hash(folder, workers=cores, stream=io.StringIO()))
            ours, digests = min(ours, t), report.digests
            t, reference = timed(lambda: sha256sum(paths))
            theirs = min(theirs, t)
            t, _ = timed(lambda: sha256sum(paths, parallel=cores))
            theirs_parallel = min(theirs_parallel, t)
        if digests != reference:
            print("MISMATCH: ddtree's digests differ from sha256sum's", file=sys.stderr)
            return 1
        gb = total / 1e9
        rows = [
            (f"full hash, ddtree ({cores} threads)", ours),
            ("sha256sum (one process)", theirs),
            (f"sha256sum (xargs -P {cores})", theirs_parallel),
        ]
        for label, seconds in rows:
            print(f"{label:<34} {seconds:6.2f} s, {gb / seconds:5.2f} GB/s")
        ratio = theirs / ours
        print(
            f"ratio sha256sum / ddtree = {ratio:.2f}x [goal >= 1.0: {'met' if ratio >= 1 else 'MISSED'}]; "
            f"digests identical for all {len(paths)} shards"
        )
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
