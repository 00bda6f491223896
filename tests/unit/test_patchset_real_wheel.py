"""The patch tools against the real sglang wheels from PyPI (downloaded once into the cache, then offline).

- the project's own series applies to the pristine 0.5.13.post1 wheel and verifies (the acceptance check);
- a series touching model_executor/cuda_graph_runner.py, tried on the real 0.5.14 wheel, fails naming the
  file and where it moved (runner/decode_cuda_graph_runner.py);
- edit/refresh: a maintainer adds two patches, then changes the first; the second is rebased and
  re-hashed, and the whole series checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ddtree.errors import UserError
from ddtree.fsutil import sha256_bytes
from ddtree.patchset import series as series_mod
from ddtree.patchset import udiff
from ddtree.patchset.series import FileSpec, Patch, Series
from ddtree_build.patching import pristine
from ddtree_build.paths import CACHE_DIR, REPO_ROOT

RUNNER = "sglang/srt/model_executor/cuda_graph_runner.py"
MOVED_TO = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"


def _cli(*args: str, repo: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "DDTREE_CACHE": str(CACHE_DIR)}
    if repo is not None:
        env["DDTREE_REPO"] = str(repo)
    return subprocess.run(
        [sys.executable, "-m", "ddtree_build.cli", "patches", *args], capture_output=True, text=True, env=env
    )


@pytest.fixture(scope="module")
def base_wheel() -> Path:
    return pristine.ensure_wheel("sglang", "0.5.13.post1")


def test_project_series_checks_against_the_pinned_wheel(base_wheel: Path) -> None:
    done = _cli("check")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("patches check: OK"), done.stdout
    assert base_wheel.name in done.stdout


def _runner_series(folder: Path, wheel: Path) -> Series:
    """One trivial patch on the real 0.5.13.post1 cuda_graph_runner.py, written as refresh writes it."""
    reader = pristine.WheelReader(wheel)
    try:
        old = reader.read(RUNNER)
    finally:
        reader.close()
    assert old is not None
    new = old.replace(b"class CudaGraphRunner:\n", b"DDTREE_MARK = 1\n\n\nclass CudaGraphRunner:\n", 1)
    folder.mkdir(parents=True)
    (folder / "0001-mark.diff").write_bytes(udiff.make_file_diff(RUNNER, old, new))
    spec = FileSpec(RUNNER, sha256_bytes(old), sha256_bytes(new), ["DDTREE_MARK", "CudaGraphRunner"])
    series_mod.write(
        Series(
            folder / "series.yaml",
            "sglang",
            "0.5.13.post1",
            [Patch("mark", "test", "0001-mark.diff", [spec])],
        )
    )
    return series_mod.load(folder / "series.yaml")


def test_moved_cuda_graph_runner_is_named_against_0_5_14(tmp_path: Path, base_wheel: Path) -> None:
    series = _runner_series(tmp_path / "patches", base_wheel)
    ok = _cli("check", "--series", str(series.path))
    assert ok.returncode == 0, ok.stderr
    done = _cli("check", "--series", str(series.path), "--against", "0.5.14")
    assert done.returncode == 1, done
    assert f"missing target: {RUNNER}" in done.stderr
    assert f"moved to {MOVED_TO}" in done.stderr
    assert "wrong base version" in done.stderr and "sglang 0.5.14" in done.stderr


def test_project_series_against_0_5_14_names_the_moved_runner_when_it_touches_it() -> None:
    """Active once the project's series patches cuda_graph_runner.py (the acceptance criterion)."""
    data = yaml.safe_load((REPO_ROOT / "patches" / "series.yaml").read_text())
    touched = {f["path"] for p in data.get("patches") or [] for f in p["files"]}
    if RUNNER not in touched:
        pytest.skip("patches/series.yaml does not touch cuda_graph_runner.py yet (covered by the test above)")
    done = _cli("check", "--against", "0.5.14")
    assert done.returncode == 1
    assert RUNNER in done.stderr and MOVED_TO in done.stderr


def test_edit_refresh_new_patches_then_change_the_first(tmp_path: Path, base_wheel: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "patches").mkdir(parents=True)
    (repo / "patches" / "series.yaml").write_text(
        "base: {distribution: sglang, version: 0.5.13.post1}\npatches: []\n"
    )
    work = repo / ".work" / "patches"

    done = _cli("edit", "core", "--new", repo=repo)
    assert done.returncode == 0, done.stderr
    runner = work / "core" / "tree" / RUNNER
    text = runner.read_text()
    runner.write_text(
        text.replace("class CudaGraphRunner:\n", "DDTREE_CORE = 1\n\n\nclass CudaGraphRunner:\n", 1)
    )
    utils = work / "core" / "tree" / "sglang/srt/speculative/ddtree_utils.py"
    utils.write_text("def build_ddtree(budget):\n    return budget\n")

    done = _cli("refresh", "core", repo=repo)
    assert done.returncode == 1 and 'needs --purpose "one line' in done.stderr, done

    done = _cli(
        "refresh",
        "core",
        "--purpose",
        "DDTree core",
        "--signatures",
        "ddtree_utils.py=build_ddtree",
        repo=repo,
    )
    assert done.returncode == 0, done.stderr
    assert "patches check: OK: 1 patch(es), 2 file(s)" in done.stdout
    assert "warning: sglang/srt/model_executor/cuda_graph_runner.py has no signatures" in done.stdout

    # A second patch, lower in the same file.
    done = _cli("edit", "graph-fix", "--new", repo=repo)
    assert done.returncode == 0, done.stderr
    runner2 = work / "graph-fix" / "tree" / RUNNER
    adapter = "class DeepEPCudaGraphRunnerAdapter:\n"  # module level, near the end of the file
    runner2.write_text(runner2.read_text().replace(adapter, "DDTREE_GRAPH_FIX = True\n\n\n" + adapter, 1))
    done = _cli(
        "refresh",
        "graph-fix",
        "--purpose",
        "graph fix",
        "--signatures",
        f"{RUNNER}=DDTREE_GRAPH_FIX",
        repo=repo,
    )
    assert done.returncode == 0, done.stderr

    series = series_mod.load(repo / "patches" / "series.yaml")
    assert [p.id for p in series.patches] == ["core", "graph-fix"]
    for written in (series.path, repo / "patches" / "0001-core.diff"):
        assert written.stat().st_mode & 0o777 == 0o644  # readable in the image (COPY keeps modes)
    assert not list((repo / "patches").glob(".*"))  # no lock or temp files in patches/
    assert [p.diff for p in series.patches] == ["0001-core.diff", "0002-graph-fix.diff"]
    old_second = series.patches[1].spec(RUNNER)

    # Change the first patch: two more lines above the second patch's hunk.
    done = _cli("edit", "core", repo=repo)
    assert done.returncode == 1 and "--force" in done.stderr  # its work tree still exists
    done = _cli("edit", "core", "--force", repo=repo)
    assert done.returncode == 0, done.stderr
    runner = work / "core" / "tree" / RUNNER
    assert "DDTREE_CORE = 1" in runner.read_text() and "DDTREE_GRAPH_FIX" not in runner.read_text()
    runner.write_text(
        runner.read_text().replace("DDTREE_CORE = 1\n", "DDTREE_CORE = 1\nDDTREE_CORE_2 = 2\n\n")
    )
    done = _cli("refresh", "core", repo=repo)
    assert done.returncode == 0, done.stderr
    assert "rebased later patches (same change, new line numbers): graph-fix" in done.stdout
    assert "patches check: OK: 2 patch(es), 2 file(s)" in done.stdout

    series = series_mod.load(repo / "patches" / "series.yaml")
    new_second = series.patches[1].spec(RUNNER)
    assert new_second.pre == series.patches[0].spec(RUNNER).post
    assert new_second.pre != old_second.pre and new_second.post != old_second.post
    assert series.patches[0].purpose == "DDTree core"
    assert series.patches[0].spec("sglang/srt/speculative/ddtree_utils.py").signatures == ["build_ddtree"]
    listing = _cli("list", repo=repo)
    assert "1. core: DDTree core [0001-core.diff]" in listing.stdout

    # A patch inserted in the middle; refresh with nothing changed; refresh without edit.
    done = _cli("refresh", "ghost", "--new", "--purpose", "x", repo=repo)
    assert done.returncode == 1 and "run `ddtree-build patches edit ghost --new` first" in done.stderr
    done = _cli("edit", "mid", "--new", "--after", "core", repo=repo)
    assert done.returncode == 0, done.stderr
    done = _cli("refresh", "mid", "--purpose", "middle", repo=repo)
    assert done.returncode == 1 and "nothing to write" in done.stderr
    worker = work / "mid" / "tree" / "sglang/srt/speculative/dflash_worker.py"
    worker.write_text(worker.read_text() + "\n\nDDTREE_MID = 1\n")
    done = _cli("refresh", "mid", "--new", "--after", "graph-fix", "--purpose", "m", repo=repo)
    assert done.returncode == 1 and "was made by `edit mid --new --after core`" in done.stderr
    sigs = "dflash_worker.py=DDTREE_MID"
    done = _cli(
        "refresh", "mid", "--new", "--after", "core", "--purpose", "middle", "--signatures", sigs, repo=repo
    )
    assert done.returncode == 0, done.stderr
    series = series_mod.load(repo / "patches" / "series.yaml")
    assert [p.id for p in series.patches] == ["core", "mid", "graph-fix"]
    assert series.patches[1].diff == "0003-mid.diff"


def test_wheel_must_match_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_wheel: Path) -> None:
    """The series is checked on the very wheel the image installs: a cached wheel whose sha256 the hash
    lock does not list is refused. (A fake lock in a temporary env/ folder stands in for a re-lock.)"""
    assert sha256_bytes(base_wheel.read_bytes()) in pristine.lock_hashes("sglang", "0.5.13.post1")
    env = tmp_path / "env"
    env.mkdir()
    (env / "requirements-py312.lock").write_text(
        "packaging==25.0 \\\n    --hash=sha256:" + "1" * 64 + "\nsglang==0.5.13.post1 \\\n"
        "    --hash=sha256:" + "0" * 64 + " \\\n    --hash=sha256:" + "f" * 64 + "\n"
    )
    monkeypatch.setattr(pristine, "ENV_DIR", env)
    assert pristine.lock_hashes("sglang", "0.5.13.post1") == {"0" * 64, "f" * 64}
    with pytest.raises(UserError, match=r"is not among the 2 hashes env/requirements\*\.lock pins"):
        pristine.ensure_wheel("sglang", "0.5.13.post1")
