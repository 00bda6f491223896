"""The patch engine on small synthetic trees: success, idempotence, and every refusal a maintainer can meet.

Each error test asserts the message names what the maintainer needs (file, hashes, versions, the fix) and
that the tree is byte-for-byte unchanged afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree.errors import UserError
from ddtree.fsutil import sha256_bytes
from ddtree.patchset import apply, load, verify
from ddtree.patchset import series as series_mod

from tests.unit.patchset_kit import (
    RUNNER,
    RUNNER_PATH,
    UTILS_PATH,
    WORKER,
    WORKER_PATH,
    make_tree,
    runner_fixed,
    snapshot,
    standard_series,
    write_series,
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "site-packages")


@pytest.fixture
def series(tmp_path: Path):
    return standard_series(tmp_path / "patches")


def test_apply_then_verify_then_idempotent(tree: Path, series) -> None:
    result = apply(tree, series)
    assert result.status == "applied"
    assert sorted(result.files) == sorted([RUNNER_PATH, UTILS_PATH, WORKER_PATH])
    assert b"ddtree_verify_bs" in (tree / RUNNER_PATH).read_bytes()
    assert (tree / UTILS_PATH).exists()
    report = verify(tree, series)
    assert report.ok, report.problems
    # MANIFEST.sha256: `sha256  path`, sorted, matching the files.
    lines = (tree / ".ddtree-patchset" / "MANIFEST.sha256").read_text().splitlines()
    assert lines == sorted(lines, key=lambda line: line.split("  ", 1)[1])
    for line in lines:
        digest, rel = line.split("  ", 1)
        assert sha256_bytes((tree / rel).read_bytes()) == digest
    data = json.loads((tree / ".ddtree-patchset" / "manifest.json").read_text())
    assert data["base_version"] == "0.5.13.post1" and data["series_digest"] == series.digest()
    # No staging leftovers.
    assert not [p for p in tree.rglob("*") if ".ddtree-stage" in p.name]
    before = snapshot(tree)
    again = apply(tree, series)
    assert again.status == "already applied"
    assert "already applied" in again.summary()
    assert snapshot(tree) == before
    # verify without a series uses the tree's own manifest (the in-container self-check's way).
    assert verify(tree).ok


def test_pre_image_mismatch_names_file_hashes_and_installed_version(tmp_path: Path, series) -> None:
    other = RUNNER.replace(b"return self.graphs[bs]", b"return self.graphs.get(bs)")
    root = make_tree(tmp_path / "sp", version="0.5.12", files={RUNNER_PATH: other, WORKER_PATH: WORKER})
    before = snapshot(root)
    with pytest.raises(UserError) as err:
        apply(root, series)
    message = str(err.value)
    assert "pre-image mismatch" in message
    assert RUNNER_PATH in message
    assert sha256_bytes(other) in message and sha256_bytes(RUNNER) in message
    assert "installed sglang is 0.5.12" in message and "0.5.13.post1" in message
    assert "ddtree-core's hunks for it would still fit exactly" in message  # the edit is elsewhere
    assert snapshot(root) == before


def test_pre_image_mismatch_on_base_version_says_not_pristine(tmp_path: Path, series) -> None:
    other = RUNNER + b"# local edit\n"
    root = make_tree(tmp_path / "sp", files={RUNNER_PATH: other, WORKER_PATH: WORKER})
    with pytest.raises(UserError, match="pre-image mismatch") as err:
        apply(root, series)
    assert "installed sglang" not in str(err.value)  # same version: no version note
    assert "not pristine sglang 0.5.13.post1" in str(err.value)
    shifted = b"# one more line on top\n" + RUNNER
    root = make_tree(tmp_path / "sp2", files={RUNNER_PATH: shifted, WORKER_PATH: WORKER})
    with pytest.raises(UserError, match="ddtree-core's hunks for it fit only at an offset"):
        apply(root, series)


def test_moved_target_is_found_by_name_and_content(tmp_path: Path, series) -> None:
    moved = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
    decoy = "sglang/srt/model_executor/runner/base_cuda_graph_runner.py"
    files = {moved: RUNNER, decoy: b"class BaseCudaGraphRunner:\n    pass\n", WORKER_PATH: WORKER}
    root = make_tree(tmp_path / "sp", files=files)
    before = snapshot(root)
    with pytest.raises(UserError) as err:
        apply(root, series)
    message = str(err.value)
    assert f"missing target: {RUNNER_PATH}" in message
    assert f"moved to {moved}" in message
    assert f"rebase the patch onto {moved}" in message
    assert snapshot(root) == before


def test_missing_target_without_candidates(tmp_path: Path, series) -> None:
    root = make_tree(tmp_path / "sp", files={WORKER_PATH: WORKER})
    with pytest.raises(UserError, match="no file of a similar name exists under sglang/"):
        apply(root, series)


def test_wrong_base_version_even_when_files_match(tmp_path: Path, series) -> None:
    root = make_tree(tmp_path / "sp", version="0.5.14")
    before = snapshot(root)
    with pytest.raises(UserError) as err:
        apply(root, series)
    assert "wrong base version" in str(err.value)
    assert "sglang 0.5.14" in str(err.value) and "based on 0.5.13.post1" in str(err.value)
    assert snapshot(root) == before


def test_series_in_wrong_order(tmp_path: Path, series) -> None:
    text = series.path.read_text()
    first = text.index("  - id: ddtree-core")
    second = text.index("  - id: graph-fix")
    swapped = text[:first] + text[second:] + text[first:second]
    series.path.write_text(swapped)
    with pytest.raises(UserError) as err:
        load(series.path)
    assert "wrong order" in str(err.value)
    assert "graph-fix" in str(err.value) and "ddtree-core" in str(err.value)


def test_partially_patched_tree(tmp_path: Path, tree: Path, series) -> None:
    # Apply only the first patch (a series of its first entry), then the full series.
    first = series_mod.load(series.path)
    first.patches = first.patches[:1]
    partial = tmp_path / "partial.yaml"
    series_mod.write(series_mod.Series(partial, "sglang", "0.5.13.post1", first.patches))
    for patch in first.patches:
        shutil.copy(series.folder / patch.diff, tmp_path / patch.diff)
    apply(tree, load(partial))
    before = snapshot(tree)
    with pytest.raises(UserError) as err:
        apply(tree, series)
    message = str(err.value)
    assert "partially patched tree" in message
    assert "up to ddtree-core" in message and WORKER_PATH in message
    assert "reinstall pristine sglang==0.5.13.post1" in message
    assert snapshot(tree) == before


def test_tampered_post_image_is_caught_by_verify(tree: Path, series) -> None:
    apply(tree, series)
    target = tree / RUNNER_PATH
    target.write_bytes(target.read_bytes() + b"# tampered\n")
    for report in (verify(tree, series), verify(tree)):
        assert not report.ok
        assert any("tampered post-image" in p and RUNNER_PATH in p for p in report.problems), report.problems
    with pytest.raises(UserError, match="tampered post-image"):
        verify(tree).raise_if_failed()
    # apply refuses too: the tree is neither pristine nor patched.
    with pytest.raises(UserError, match=r"pre-image mismatch|partially patched"):
        apply(tree, series)


def test_verify_catches_edited_manifest_and_unpatched_tree(tree: Path, series) -> None:
    unpatched = verify(tree, series)
    assert any("is not patched" in p for p in unpatched.problems)
    apply(tree, series)
    sha = tree / ".ddtree-patchset" / "MANIFEST.sha256"
    sha.write_text(sha.read_text().replace("a", "b", 1))
    assert any("MANIFEST.sha256 does not match" in p for p in verify(tree, series).problems)


def test_failure_in_a_later_patch_writes_nothing(tmp_path: Path, tree: Path) -> None:
    # The second patch's signature is absent from its post-image: everything is refused, nothing written.
    series = write_series(
        tmp_path / "patches",
        {RUNNER_PATH: RUNNER, WORKER_PATH: WORKER},
        [
            ("first", {RUNNER_PATH: runner_fixed()}, {RUNNER_PATH: ["ddtree_budget"]}),
            (
                "second",
                {WORKER_PATH: WORKER + b"# ddtree_flag in a comment only\n"},
                {WORKER_PATH: ["ddtree_flag"]},
            ),
        ],
    )
    before = snapshot(tree)
    with pytest.raises(UserError) as err:
        apply(tree, series)
    assert "signature(s) not found in the code: ddtree_flag" in str(err.value)
    assert "nothing was changed" in str(err.value)
    assert snapshot(tree) == before


def test_post_image_that_does_not_parse_is_refused(tmp_path: Path, tree: Path) -> None:
    series = write_series(
        tmp_path / "patches",
        {RUNNER_PATH: RUNNER},
        [("broken", {RUNNER_PATH: RUNNER + b"def oops(:\n"}, {})],
    )
    with pytest.raises(UserError, match=r"does not parse: line \d+"):
        apply(tree, series)


def test_diff_edited_without_refresh_is_refused(tree: Path, series) -> None:
    diff = series.folder / series.patches[1].diff
    diff.write_bytes(diff.read_bytes().replace(b"+        bs = max(bs, 1)", b"+        bs = max(bs, 2)"))
    with pytest.raises(UserError) as err:
        apply(tree, load(series.path))
    assert "the diff changed without `ddtree-build patches refresh graph-fix`" in str(err.value)


def test_offset_and_fuzz_are_refused(tree: Path, series) -> None:
    diff = series.folder / series.patches[1].diff
    original = diff.read_bytes()
    header = next(line for line in original.splitlines() if line.startswith(b"@@") and b"+" in line)
    start = int(header.split(b" ")[1][1:].split(b",")[0])
    diff.write_bytes(
        original.replace(header, header.replace(f"-{start},".encode(), f"-{start + 2},".encode(), 1))
    )
    with pytest.raises(UserError) as err:
        apply(tree, load(series.path))
    assert "offset of -2 lines" in str(err.value) and "allows no offset" in str(err.value)
    # Fuzz: the first context line of that hunk no longer matches the file.
    lines = original.splitlines(keepends=True)
    at = lines.index(header + b"\n") + 1
    lines[at] = b" # a context line that is not in the file\n"
    diff.write_bytes(b"".join(lines))
    with pytest.raises(UserError) as err:
        apply(tree, load(series.path))
    assert "would need fuzz 1" in str(err.value) and "allows no fuzz" in str(err.value)


def test_corrupted_diff_is_refused_at_load(series) -> None:
    diff = series.folder / series.patches[0].diff
    lines = diff.read_bytes().splitlines(keepends=True)
    body = next(i for i, line in enumerate(lines) if line.startswith(b"+def build_ddtree"))
    del lines[body]  # the hunk now has fewer lines than its header says
    diff.write_bytes(b"".join(lines))
    with pytest.raises(UserError, match="corrupted diff"):
        load(series.path)


def test_series_and_diff_must_list_the_same_files(series) -> None:
    text = series.path.read_text().replace(WORKER_PATH, "sglang/srt/speculative/other.py")
    series.path.write_text(text)
    with pytest.raises(UserError, match=r"files list and 0002-graph-fix\.diff disagree"):
        load(series.path)


def test_hash_fields_must_be_written_by_the_tool(series) -> None:
    text = series.path.read_text()
    post = series.patches[0].files[0].post
    series.path.write_text(text.replace(post, "TODO", 1))
    with pytest.raises(UserError, match="written by `ddtree-build patches refresh`"):
        load(series.path)


def test_stray_file_where_the_series_creates_one(tree: Path, series) -> None:
    (tree / UTILS_PATH).write_bytes(b"# someone else's file\n")
    with pytest.raises(UserError, match="exists but patch ddtree-core creates it"):
        apply(tree, series)


def test_root_must_hold_the_package(tree: Path, series) -> None:
    with pytest.raises(UserError, match="pass its parent"):
        apply(tree / "sglang", series)


def _can_mount_read_only() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return done.returncode == 0


def test_read_only_tree(tree: Path, series) -> None:
    """A real read-only file system (a read-only bind mount in a private mount namespace) when running as
    root, where permission bits alone would not stop writes; a chmod'ed tree otherwise."""
    before = snapshot(tree)
    command = [
        sys.executable,
        "-m",
        "ddtree.patchset",
        "apply",
        "--root",
        str(tree),
        "--series",
        str(series.path),
    ]
    if _can_mount_read_only():
        script = f'mount --bind "{tree}" "{tree}" && mount -o remount,bind,ro "{tree}" && exec "$@"'
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", script, "sh", *command], capture_output=True, text=True
        )
    elif os.geteuid() != 0:
        for path in [tree, *tree.rglob("*")]:
            if path.is_dir():
                path.chmod(0o555)
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        finally:
            for path in [tree, *tree.rglob("*")]:
                if path.is_dir():
                    path.chmod(0o755)
    else:
        pytest.skip("running as root without mount namespaces: cannot make a read-only tree here")
    assert done.returncode == 1, done
    assert "read-only tree" in done.stderr and "nothing was changed" in done.stderr, done.stderr
    assert done.stderr.startswith("ddtree.patchset: error: ")
    assert snapshot(tree) == before


def test_module_cli_apply_and_verify(tree: Path, series) -> None:
    base = [sys.executable, "-m", "ddtree.patchset"]
    done = subprocess.run(
        [*base, "apply", "--root", str(tree), "--series", str(series.path)], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith("applied:"), done
    done = subprocess.run(
        [*base, "apply", "--root", str(tree), "--series", str(series.path)], capture_output=True, text=True
    )
    assert done.returncode == 0 and "already applied" in done.stdout, done
    done = subprocess.run([*base, "verify", "--root", str(tree)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("verified 3 patched file(s)"), done
    (tree / WORKER_PATH).write_bytes(b"tampered = 1\n")
    done = subprocess.run([*base, "verify", "--root", str(tree)], capture_output=True, text=True)
    assert done.returncode == 1 and "tampered post-image" in done.stderr, done


@pytest.mark.parametrize(
    ("error", "expected"),
    [(OSError(5, "Input/output error"), UserError), (KeyboardInterrupt(), KeyboardInterrupt)],
)
def test_failed_swap_restores_what_was_already_swapped(
    tree: Path, series, monkeypatch, error, expected
) -> None:
    """Only the rename step is made to fail (os.replace on the second file, an I/O error or Ctrl-C): a real
    failure there needs a dying disk or a well-timed keypress, which cannot be arranged here."""
    before = snapshot(tree)
    real_replace = os.replace
    calls = {"n": 0}

    def flaky_replace(src, dst):
        if str(src).endswith(".ddtree-stage"):
            calls["n"] += 1
            if calls["n"] == 2:
                raise error
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky_replace)
    with pytest.raises(expected):
        apply(tree, series)
    monkeypatch.setattr(os, "replace", real_replace)
    assert snapshot(tree) == before  # the first swapped file is back, no stage files, no new file
    assert apply(tree, series).status == "applied"


def test_staging_failure_leaves_nothing_behind(tree: Path, series, monkeypatch) -> None:
    """EROFS on the second staged file (as a read-only mount under one folder would give)."""
    import errno
    import tempfile

    before = snapshot(tree)
    real_mkstemp = tempfile.mkstemp
    calls = {"n": 0}

    def failing_mkstemp(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.EROFS, "Read-only file system", str(kwargs.get("dir")))
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", failing_mkstemp)
    with pytest.raises(UserError, match=r"read-only tree: cannot write .* \(read-only file system\)"):
        apply(tree, series)
    assert snapshot(tree) == before
    assert not (tree / "sglang/srt/speculative/ddtree_utils.py").exists()


def test_host_cli_apply_and_verify(tree: Path, series) -> None:
    base = [sys.executable, "-m", "ddtree_build.cli", "patches"]
    args = ["--root", str(tree), "--series", str(series.path)]
    done = subprocess.run([*base, "apply", *args], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("applied: 2 patch(es), 3 file(s)"), done
    done = subprocess.run([*base, "verify", *args], capture_output=True, text=True)
    assert done.returncode == 0 and "verified 3 patched file(s)" in done.stdout, done
    (tree / RUNNER_PATH).write_bytes(b"")
    done = subprocess.run([*base, "verify", *args], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.startswith("ddtree-build: error: "), done
    assert "tampered post-image" in done.stderr


def test_a_later_patch_may_not_remove_an_earlier_signature(tmp_path: Path, tree: Path) -> None:
    """apply checks what verify will check: every patch's signatures hold in the final file."""
    fixed = runner_fixed()
    series = write_series(
        tmp_path / "patches",
        {RUNNER_PATH: RUNNER},
        [
            ("first", {RUNNER_PATH: fixed}, {RUNNER_PATH: ["ddtree_budget"]}),
            ("second", {RUNNER_PATH: fixed.replace(b"ddtree_budget", b"budget")}, {RUNNER_PATH: ["budget"]}),
        ],
    )
    with pytest.raises(
        UserError, match=r"patch second: .* signature\(s\) not found in the code: ddtree_budget"
    ):
        apply(tree, series)


def test_verify_reads_the_pyc_that_runs(tree: Path, series) -> None:
    """apply writes hash-checked .pyc files; verify reads signatures from them (what the interpreter runs)
    when they were compiled from exactly the source, and compiles the source when they were not."""
    import importlib.util
    import marshal

    apply(tree, series)
    source_path = tree / RUNNER_PATH
    pyc = Path(importlib.util.cache_from_source(str(source_path)))
    data = pyc.read_bytes()
    assert int.from_bytes(data[4:8], "little") & 1, "apply should write hash-based .pyc files"
    assert verify(tree).ok
    # A .pyc claiming the right source hash but holding other code: verify sees the code that would run.
    source = source_path.read_bytes()
    evil = compile(source.replace(b"ddtree_budget", b"other_name"), str(source_path), "exec")
    header = importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little") + importlib.util.source_hash(source)
    pyc.write_bytes(header + marshal.dumps(evil))
    problems = verify(tree).problems
    assert any("signature(s) not found in the code: ddtree_budget" in p for p in problems), problems
    # A .pyc of other source bytes is ignored: the source is compiled instead.
    other = b"x = 1\n"
    pyc.write_bytes(
        importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little") + importlib.util.source_hash(other)
    )
    assert verify(tree).ok
