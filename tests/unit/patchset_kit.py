"""Small synthetic trees and series for the patch-engine tests (fast: a few files, no wheel).

Series are produced with the engine's own diff writer and hashes, exactly as `refresh` would write them;
tests then break one thing at a time.
"""

from __future__ import annotations

from pathlib import Path

from ddtree.fsutil import sha256_bytes
from ddtree.patchset import series as series_mod
from ddtree.patchset import udiff
from ddtree.patchset.series import NEW, FileSpec, Patch, Series

BASE = "0.5.13.post1"

RUNNER = b"".join(
    f"# line {i}: filler so hunks have context\n".encode()
    if i % 7
    else f"def helper_{i}(x):\n    return x\n".encode()
    for i in range(1, 60)
) + (
    b"class CudaGraphRunner:\n"
    b"    def capture(self):\n"
    b"        self.graphs = {}\n"
    b"        return self.graphs\n"
    b"\n"
    b"    def replay(self, bs):\n"
    b"        return self.graphs[bs]\n"
)

WORKER = b'"""DFlash worker."""\n\n\ndef draft(tokens):\n    block = 8\n    return tokens[:block]\n'

RUNNER_PATH = "sglang/srt/model_executor/cuda_graph_runner.py"
WORKER_PATH = "sglang/srt/speculative/dflash_worker.py"
UTILS_PATH = "sglang/srt/speculative/ddtree_utils.py"


def make_tree(root: Path, version: str = BASE, files: dict[str, bytes] | None = None) -> Path:
    """A site-packages-like folder: sglang/ with a few files and a dist-info naming `version`."""
    files = files if files is not None else {RUNNER_PATH: RUNNER, WORKER_PATH: WORKER}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "sglang" / "__init__.py").write_bytes(b"")
    (root / "sglang" / "version.py").write_text(f'__version__ = "{version}"\n')
    meta = root / f"sglang-{version}.dist-info"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.4\nName: sglang\nVersion: {version}\n\nbody\n")
    return root


def write_series(
    folder: Path,
    pristine: dict[str, bytes | None],
    steps: list[tuple[str, dict[str, bytes], dict[str, list[str]]]],
) -> Series:
    """steps: [(patch id, {path: content after the patch}, {path: signatures})], in order."""
    folder.mkdir(parents=True, exist_ok=True)
    state: dict[str, bytes | None] = dict(pristine)
    patches = []
    for number, (patch_id, after, sigs) in enumerate(steps, 1):
        diff = b""
        files = []
        for rel in sorted(after):
            before = state.get(rel)
            diff += udiff.make_file_diff(rel, before, after[rel])
            files.append(
                FileSpec(
                    rel,
                    NEW if before is None else sha256_bytes(before),
                    sha256_bytes(after[rel]),
                    sigs.get(rel, []),
                )
            )
            state[rel] = after[rel]
        name = f"{number:04d}-{patch_id}.diff"
        (folder / name).write_bytes(diff)
        patches.append(Patch(patch_id, f"test patch {patch_id}", name, files))
    series = Series(folder / "series.yaml", "sglang", BASE, patches)
    series_mod.write(series)
    return series_mod.load(folder / "series.yaml")


def runner_fixed() -> bytes:
    return RUNNER.replace(
        b"        self.graphs = {}\n", b"        self.graphs = {}\n        self.ddtree_budget = 8\n"
    )


def runner_fixed_twice() -> bytes:
    return runner_fixed().replace(
        b"    def replay(self, bs):\n",
        b"    def replay(self, bs):\n        bs = max(bs, 1)  # ddtree_verify_bs\n",
    )


def standard_series(folder: Path) -> Series:
    """Two patches: ddtree-core (new utils file + runner change), graph-fix (runner again + worker)."""
    pristine = {RUNNER_PATH: RUNNER, WORKER_PATH: WORKER, UTILS_PATH: None}
    utils = b"def build_ddtree(scores, budget):\n    return sorted(scores)[:budget]\n"
    return write_series(
        folder,
        pristine,
        [
            (
                "ddtree-core",
                {UTILS_PATH: utils, RUNNER_PATH: runner_fixed()},
                {UTILS_PATH: ["build_ddtree"], RUNNER_PATH: ["ddtree_budget"]},
            ),
            (
                "graph-fix",
                {RUNNER_PATH: runner_fixed_twice(), WORKER_PATH: WORKER.replace(b"block = 8", b"block = 16")},
                {RUNNER_PATH: ["CudaGraphRunner.replay"], WORKER_PATH: ["draft"]},
            ),
        ],
    )


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root, for "nothing changed" assertions."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
