"""The base image's recipe and tag: built once per recipe, a new tag for any change that matters."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

from ddtree_build import base_image
from ddtree_build.base_image import PACKAGES, Recipe


def _recipe(**changes: object) -> Recipe:
    return dataclasses.replace(Recipe(arch="amd64", mirror="http://deb.debian.org/debian"), **changes)


def test_tag_names_suite_and_a_12_hex_digest() -> None:
    assert re.fullmatch(r"ddtree-base:bookworm-[0-9a-f]{12}", _recipe().tag())


def test_tag_is_stable_and_ignores_package_order_and_duplicates() -> None:
    packages = _recipe().packages
    assert _recipe().tag() == _recipe().tag()
    assert _recipe(packages=tuple(reversed(packages)) + packages[:1]).tag() == _recipe().tag()
    assert _recipe(mirror="http://deb.debian.org/debian/").tag() == _recipe().tag()


def test_every_input_that_changes_the_content_changes_the_tag() -> None:
    base = _recipe().tag()
    variants = [
        _recipe(suite="trixie"),
        _recipe(variant="buildd"),
        _recipe(mirror="http://ftp.de.debian.org/debian"),
        _recipe(arch="arm64"),
        _recipe(packages=(*_recipe().packages, "curl")),
        _recipe(revision=base_image.RECIPE_REVISION + 1),
    ]
    tags = {v.tag() for v in variants}
    assert base not in tags and len(tags) == len(variants)


def test_packages_cover_a_python_image_and_say_why() -> None:
    assert {"python3", "python3-venv", "python3-pip", "ca-certificates"} <= set(PACKAGES)
    assert all(reason.strip() for reason in PACKAGES.values())


def test_trim_rootfs_drops_caches_and_host_files(tmp_path: Path) -> None:
    (tmp_path / "var/cache/apt/archives").mkdir(parents=True)
    (tmp_path / "var/cache/apt/archives/libc6.deb").write_bytes(b"x")
    (tmp_path / "var/lib/apt/lists/partial").mkdir(parents=True)
    (tmp_path / "var/lib/apt/lists/deb.debian.org_Packages").write_text("x")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/resolv.conf").write_text("nameserver 10.0.0.1\n")
    (tmp_path / "etc/hostname").write_text("buildhost\n")
    base_image._trim_rootfs(tmp_path)
    assert not list((tmp_path / "var/cache/apt/archives").iterdir())
    assert [p.name for p in (tmp_path / "var/lib/apt/lists").iterdir()] == ["partial"]
    assert (tmp_path / "etc/resolv.conf").read_text() == "" and (tmp_path / "etc/hostname").read_text() == ""


def test_cli_tag_only_builds_nothing() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ddtree_build.cli", "base-image", "--tag-only"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == base_image.base_tag()
