"""Whole-tree identity against a real installed wheel.

The wheel is PyPI's packaging 26.2 (downloaded once into .cache/wheels like the sglang wheel, checked against
the project's hash lock), installed by pip itself into a folder, so RECORD, its hashes and the .pyc rows pip
adds at install are the real thing. Then one file is edited, one added, one removed.
"""

from __future__ import annotations

import json
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree.fsutil import atomic_write, sha256_file
from ddtree.receipts import tree_identity
from ddtree.selfcheck import checks as framework
from ddtree_build.patching import pristine

DIST_INFO = "packaging-26.2.dist-info"


@pytest.fixture(scope="module")
def wheel() -> Path:
    return pristine.ensure_wheel("packaging", "26.2")


@pytest.fixture
def site(tmp_path: Path, wheel: Path) -> Path:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    return target


def test_clean_install_matches_its_record(site: Path) -> None:
    report = tree_identity.scan(site)
    assert report.ok, report.problems()
    rows = (site / DIST_INFO / "RECORD").read_text().splitlines()
    assert report.files == len([r for r in rows if r]) and report.distributions == 1
    # pip lists the .pyc it compiled without a hash: they count as files, the tree digest covers their bytes
    assert any(r.endswith(".pyc,,") for r in rows) and report.unhashed == sum(r.endswith(",,") for r in rows)
    assert report.digest == tree_identity.scan(site).digest  # stable


def test_edited_added_removed_one_line_each(site: Path) -> None:
    clean = tree_identity.scan(site).digest
    with open(site / "packaging" / "version.py", "a") as handle:
        handle.write("# edited\n")
    (site / "packaging" / "extra.py").write_text("X = 1\n")
    (site / "packaging" / "tags.py").unlink()
    report = tree_identity.scan(site)
    assert report.problems() == [
        f"changed packaging/version.py ({DIST_INFO})",
        f"missing packaging/tags.py ({DIST_INFO})",
        "extra packaging/extra.py",
    ]
    assert not report.ok and report.digest != clean


def test_patched_file_checked_against_the_manifest_and_its_bytecode(site: Path) -> None:
    """A patched file matches the patch manifest, not RECORD; its .pyc must be hash-checked against it."""
    source = site / "packaging" / "version.py"
    source.write_text(source.read_text() + "DDTREE = 1\n")
    manifest = {"format": 1, "files": {"packaging/version.py": sha256_file(source)}}
    atomic_write(site / ".ddtree-patchset" / "manifest.json", json.dumps(manifest))
    pyc = (
        site
        / "packaging"
        / "__pycache__"
        / f"version.cpython-{sys.version_info.major}{sys.version_info.minor}.pyc"
    )
    report = tree_identity.scan(site)
    assert report.problems() == [
        f"changed {pyc.relative_to(site)} (bytecode not bound to the patched source)"
    ]
    py_compile.compile(
        str(source), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH
    )
    report = tree_identity.scan(site)
    assert report.ok and report.patched == 1, report.problems()
    source.write_text(source.read_text() + "TAMPERED = 1\n")
    problems = tree_identity.scan(site).problems()
    assert "changed packaging/version.py (patched file; the patch manifest says" in "\n".join(problems)


def test_record_hash_round_trip() -> None:
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    encoded = tree_identity.hex_to_record_hash(digest)
    assert encoded == "sha256=n4bQgYhMfWWaL-qgxVrQFaO_TxsrC4Is0V1sFbDwCgg"
    assert tree_identity.record_hash_to_hex(encoded) == digest
    assert tree_identity.record_hash_to_hex("") is None and tree_identity.record_hash_to_hex("md5=x") is None


def test_selfcheck_full_compares_the_baked_digest(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`selfcheck --full`'s tree check, with this folder standing in for the image's site-packages."""
    from ddtree.selfcheck import tree as selfcheck_tree

    monkeypatch.setattr(tree_identity, "image_roots", lambda: (site, []))
    baked = tmp_path / "tree-identity.json"
    assert tree_identity._main(["write", "--root", str(site), "--out", str(baked)]) == 0
    env = {"DDTREE_TREE_IDENTITY": str(baked), "DDTREE_IMAGE_LABELS": str(tmp_path / "none.json")}
    off = selfcheck_tree.tree_check(framework.Context(environ=env))
    assert off.status == "skip" and "--full" in off.detail
    ctx = framework.Context(environ=env, options={"full": True})
    result = selfcheck_tree.tree_check(ctx)
    assert result.status == "pass" and "match their RECORDs" in result.detail, result.detail
    (site / "packaging" / "extra.py").write_text("X = 1\n")
    result = selfcheck_tree.tree_check(ctx)
    assert result.status == "fail"
    assert "extra packaging/extra.py" in result.detail and "differs from the build's" in result.detail


def _dist(site: Path, name: str, rows: list[str]) -> None:
    (site / f"{name}-1.0.dist-info").mkdir(parents=True)
    (site / f"{name}-1.0.dist-info" / "RECORD").write_text(
        "\n".join([*rows, f"{name}-1.0.dist-info/RECORD,,"]) + "\n"
    )


def test_shared_paths_and_recompiled_bytecode(tmp_path: Path) -> None:
    """Seen in the full image: two wheels shipping one path (the later install wins; either listing is the
    wheel's), and a wheel's own .pyc pip recompiled (bytes differ from RECORD, header bound to the source)."""
    site = tmp_path / "site"
    (site / "pkg" / "__pycache__").mkdir(parents=True)
    (site / "pkg" / "shared.py").write_text("B = 2\n")
    (site / "pkg" / "mod.py").write_text("X = 1\n")
    pyc = site / "pkg" / "__pycache__" / f"mod.cpython-{sys.version_info.major}{sys.version_info.minor}.pyc"
    py_compile.compile(str(site / "pkg" / "mod.py"), cfile=str(pyc))
    record = tree_identity.hex_to_record_hash
    shared_a, shared_b = record(sha256_file(site / "pkg" / "shared.py")), record("0" * 64)
    mod = f"pkg/mod.py,{record(sha256_file(site / 'pkg' / 'mod.py'))},6"
    _dist(site, "a", [f"pkg/shared.py,{shared_b},6", mod, f"{pyc.relative_to(site)},{record('1' * 64)},1"])
    _dist(site, "b", [f"pkg/shared.py,{shared_a},6"])
    report = tree_identity.scan(site)
    assert report.ok and report.recompiled == 1, report.problems()
    data = bytearray(pyc.read_bytes())
    data[12] ^= 1  # the source size in the header no longer matches
    pyc.write_bytes(bytes(data))
    assert tree_identity.scan(site).problems() == [f"changed {pyc.relative_to(site)} (a-1.0.dist-info)"]
