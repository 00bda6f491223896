"""Unified diffs: what refresh writes, the strict applier reproduces exactly; GNU/git tools agree; damage
and staleness are named precisely."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from ddtree.patchset import udiff

BASE = b"".join(f"line {i}\n".encode() for i in range(1, 41))


def _edit(rng: random.Random, data: bytes) -> bytes:
    lines = udiff.split_lines(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.choice(["insert", "delete", "replace"])
        at = rng.randrange(len(lines) + 1)
        if op == "insert" or not lines:
            lines.insert(at, f"new {rng.random():.6f}\n".encode())
        elif op == "delete" and at < len(lines):
            del lines[at]
        elif at < len(lines):
            lines[at] = f"changed {rng.random():.6f}\n".encode()
    out = b"".join(lines)
    if rng.random() < 0.2 and out.endswith(b"\n"):
        out = out[:-1]  # no newline at end of file
    return out


@pytest.mark.parametrize("seed", range(40))
def test_roundtrip_random_edits(seed: int) -> None:
    rng = random.Random(seed)
    old = _edit(rng, BASE) if seed % 3 else BASE
    new = _edit(rng, old)
    diff = udiff.make_file_diff("sglang/x.py", old, new)
    (patch,) = udiff.parse(diff, "t.diff")
    assert udiff.apply_file(old, patch, "t.diff") == new


def test_new_file_and_missing_final_newline() -> None:
    diff = udiff.make_file_diff("sglang/new.py", None, b"a = 1\nb = 2")
    assert diff.startswith(b"--- /dev/null\n+++ b/sglang/new.py\n@@ -0,0 +1,2 @@\n")
    assert diff.endswith(b"+b = 2\n\\ No newline at end of file\n")
    (patch,) = udiff.parse(diff, "t.diff")
    assert patch.is_new
    assert udiff.apply_file(None, patch, "t.diff") == b"a = 1\nb = 2"
    with pytest.raises(udiff.HunkError, match="already exists"):
        udiff.apply_file(b"a = 1\n", patch, "t.diff")


@pytest.mark.skipif(not shutil.which("git"), reason="git is not installed")
@pytest.mark.parametrize("seed", range(8))
def test_git_apply_agrees(tmp_path: Path, seed: int) -> None:
    """A second implementation (git apply) applies what refresh writes to the same result."""
    rng = random.Random(1000 + seed)
    old = _edit(rng, BASE)
    new = _edit(rng, old)
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "x.py").write_bytes(old)
    (tmp_path / "p.diff").write_bytes(udiff.make_file_diff("sglang/x.py", old, new))
    done = subprocess.run(
        ["git", "apply", "p.diff"], cwd=tmp_path, capture_output=True, env={"GIT_DIR": str(tmp_path / "none")}
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sglang" / "x.py").read_bytes() == new


def _diff() -> bytes:
    new = BASE.replace(b"line 20\n", b"line twenty\n")
    return udiff.make_file_diff("sglang/x.py", BASE, new)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda d: d.replace(b"@@ -17,7 +17,7 @@", b"@@ -17,8 +17,7 @@"), "hunk ends early"),
        (lambda d: d.replace(b"@@ -17,7 +17,7 @@", b"@@ -17,6 +17,6 @@"), "corrupted diff"),
        (lambda d: d.replace(b"@@ -17,7 +17,7 @@", b"@@ -17 +17 @"), "bad hunk header"),
        (lambda d: d.replace(b" line 18\n", b"\n"), "lost its leading space"),
        (lambda d: d.replace(b" line 18\n", b"*line 18\n"), "unexpected line inside hunk"),
        (lambda d: d.replace(b"+++ b/sglang/x.py\n", b""), "without a '+++' line"),
        (lambda d: d.replace(b"--- a/sglang/x.py", b"--- sglang/x.py"), "must start with 'a/'"),
        (lambda d: d.replace(b"b/sglang/x.py", b"b/../x.py"), "stay inside it"),
        (lambda d: d[: d.index(b"@@")], "has a header but no hunk"),
        (lambda d: b"just some text\n", "no '---'/'+++' file section"),
        (lambda d: d + b"Binary files a/x and b/x differ\n", "not supported"),
    ],
)
def test_corrupted_diffs_are_named(damage, expected: str) -> None:
    diff = _diff()
    assert b"@@ -17,7 +17,7 @@" in diff
    with pytest.raises(udiff.DiffError) as err:
        udiff.parse(damage(diff), "0001-x.diff")
    assert expected in str(err.value)
    assert "0001-x.diff" in str(err.value)


def test_git_headers_and_preamble_are_accepted() -> None:
    diff = (
        b"Subject: explain the change\n\ndiff --git a/sglang/x.py b/sglang/x.py\nindex 111..222 100644\n"
        + _diff()
    )
    (patch,) = udiff.parse(diff, "t.diff")
    assert udiff.apply_file(BASE, patch, "t.diff") == BASE.replace(b"line 20\n", b"line twenty\n")


def test_offset_fuzz_applied_and_mismatch_are_told_apart() -> None:
    (patch,) = udiff.parse(_diff(), "t.diff")
    shifted = b"extra\nextra\n" + BASE
    with pytest.raises(udiff.HunkError) as err:
        udiff.apply_file(shifted, patch, "t.diff")
    assert err.value.kind == "offset" and "offset of +2 lines" in str(err.value)
    fuzzy = BASE.replace(b"line 17\n", b"line seventeen\n")
    with pytest.raises(udiff.HunkError) as err:
        udiff.apply_file(fuzzy, patch, "t.diff")
    assert err.value.kind == "fuzz" and "would need fuzz 1" in str(err.value)
    done = BASE.replace(b"line 20\n", b"line twenty\n")
    with pytest.raises(udiff.HunkError) as err:
        udiff.apply_file(done, patch, "t.diff")
    assert err.value.kind == "applied"
    other = BASE.replace(b"line 20\n", b"line XX\n")
    with pytest.raises(udiff.HunkError) as err:
        udiff.apply_file(other, patch, "t.diff")
    assert err.value.kind == "mismatch"
    assert "file line 20 is 'line XX', the diff expects 'line 20'" in str(err.value)
