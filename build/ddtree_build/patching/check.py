"""`ddtree-build patches check`: apply the series strictly to the pristine wheel, verify it, and ask
`git apply --check` for a second opinion. No Docker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ddtree.patchset import engine, udiff
from ddtree.patchset import series as series_mod
from ddtree.patchset.series import Series

from ddtree_build.errors import UserError, one_line
from ddtree_build.patching import pristine
from ddtree_build.paths import PATCHES_DIR


def series_path() -> Path:
    return PATCHES_DIR / "series.yaml"


@dataclass
class CheckReport:
    series: Series
    wheel: Path
    seconds: float
    git_checked: bool
    result: engine.ApplyResult
    locked: bool = False

    def summary(self) -> str:
        git = "git apply --check agrees" if self.git_checked else "git not found: cross-check skipped"
        locked = " (sha256 in the hash lock)" if self.locked else ""
        return (
            f"patches check: OK: {len(self.series.patches)} patch(es), {len(self.result.files)} file(s) "
            f"applied strictly to pristine {self.wheel.name}{locked} "
            f"and verified; {git}; {self.seconds:.2f} s"
        )


def pristine_reference(series: Series):
    """A lazy reader of the base version's pristine files (downloads the wheel only when first needed):
    lets the engine recognise a moved target by its whole pre-image, not just the diff's context lines."""
    state: dict[str, pristine.WheelReader] = {}

    def read(rel: str) -> bytes | None:
        if "reader" not in state:
            try:
                state["reader"] = pristine.WheelReader(
                    pristine.ensure_wheel(series.distribution, series.version)
                )
            except UserError:
                return None
        return state["reader"].read(rel)

    return read


def check(path: Path | None = None, against: str | None = None) -> CheckReport:
    """Apply the series to a temporary extraction of the pristine wheel and verify it. No Docker.
    `against` names another version's wheel to try the series on (it fails unless that is the base)."""
    started = time.perf_counter()
    series = series_mod.load(path or series_path())
    wheel = pristine.ensure_wheel(series.distribution, against or series.version)
    reference = pristine_reference(series) if against else None
    # Only the files the series reads (targets that exist before it) plus the dist-info: the engine reads
    # nothing else, unless a target is missing, and then extract() unpacks everything.
    needed = [p for p in series.touched_paths() if series.pristine_hash(p) is not None]
    needed.append(f"{series.distribution}/version.py")
    with tempfile.TemporaryDirectory(prefix="ddtree-patches-check-") as tmp:
        root = pristine.extract(wheel, Path(tmp) / "site-packages", only=needed)
        result = engine.apply(root, series, write_bytecode=False, reference=reference)  # verifies too
    git_checked = _git_cross_check(series, wheel)
    locked = bool(pristine.lock_hashes(series.distribution, against or series.version))
    return CheckReport(series, wheel, time.perf_counter() - started, git_checked, result, locked)


def _git_cross_check(series: Series, wheel: Path) -> bool:
    """Second opinion from `git apply --check` on each patch's pre-images (when git is installed)."""
    git = shutil.which("git")
    if not git or not series.patches:
        return bool(git)
    reader = pristine.WheelReader(wheel)
    chain = engine.FileChain(reader.read)
    try:
        with tempfile.TemporaryDirectory(prefix="ddtree-git-check-") as tmp:
            for patch in series.patches:
                work = Path(tmp) / patch.id
                for fp, old in chain.files(patch):
                    if old is not None:
                        target = work / fp.path
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(old)
                work.mkdir(parents=True, exist_ok=True)
                done = subprocess.run(
                    [git, "apply", "--check", str(series.folder / patch.diff)],
                    cwd=work,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "GIT_DIR": str(Path(tmp) / "no-repo")},
                )
                if done.returncode != 0:
                    raise UserError(f"git apply --check rejects {patch.diff}: {one_line(done.stderr)}")
                for fp, old in chain.files(patch):
                    chain.contents[fp.path] = udiff.apply_file(old, fp, patch.diff)
    finally:
        reader.close()
    return True
