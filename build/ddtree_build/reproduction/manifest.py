"""MANIFEST.sha256 of a reproduction package: `sha256sum` format, written by capture, checked first by import.

Format: one `<64 hex>  <relative posix path>` line per file, sorted, the manifest itself excluded
(the layout `sha256sum -c` reads, as the original team's hand-made package used).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, sha256_file

MANIFEST_NAME = "MANIFEST.sha256"
_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def package_files(root: Path) -> list[str]:
    """Every file under root (posix relative paths), the manifest excluded, sorted. Links are followed
    only while they stay inside the package: one that leaves it (or points nowhere) is a UserError naming
    the link and its target, so nothing outside the package can be hashed, listed or imported."""
    root = Path(root)
    real_root = root.resolve()
    files: list[str] = []
    seen: set[Path] = set()
    for folder, dirnames, filenames in os.walk(root, followlinks=True):
        here = Path(folder)
        resolved = here.resolve()
        _inside(here, resolved, real_root, root)
        if resolved in seen:  # a link back to a folder already walked
            dirnames.clear()
            continue
        seen.add(resolved)
        dirnames.sort()
        for name in sorted(filenames):
            path = here / name
            if path.is_symlink():
                _inside(path, path.resolve(), real_root, root)
                if not path.exists():
                    raise UserError(
                        f"{path}: a link to {os.path.realpath(path)}, which does not exist; remove it"
                    )
            if not path.is_file():
                raise UserError(f"{path}: not a regular file (a broken link, a socket, a device?); remove it")
            rel = path.relative_to(root).as_posix()
            if rel != MANIFEST_NAME:
                files.append(rel)
    return sorted(files)


def _inside(path: Path, resolved: Path, real_root: Path, root: Path) -> None:
    if resolved != real_root and real_root not in resolved.parents:
        raise UserError(
            f"{path}: a link to {os.path.realpath(path)}, outside the package {root}; a package holds its "
            "files itself: replace the link with the file"
        )


def write_manifest(root: Path) -> Path:
    lines = [f"{sha256_file(Path(root) / rel)}  {rel}" for rel in package_files(root)]
    target = Path(root) / MANIFEST_NAME
    atomic_write(target, "\n".join(lines) + "\n", mode=0o644)
    return target


def read_manifest(root: Path) -> dict[str, str]:
    """{relative path: sha256}; a missing or malformed manifest is a UserError naming the line."""
    path = Path(root) / MANIFEST_NAME
    if not path.is_file():
        raise UserError(f"{path}: missing; a reproduction package lists every file's sha256 in it")
    entries: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line.strip())
        if not match:
            raise UserError(f"{path}:{number}: expected '<sha256>  <path>', got {line.strip()[:80]!r}")
        rel = match.group(2).removeprefix("./")
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise UserError(f"{path}:{number}: path {rel!r} leaves the package")
        entries[rel] = match.group(1)
    return entries


@dataclass
class ManifestReport:
    missing: list[str] = field(default_factory=list)  # listed, not present
    extra: list[str] = field(default_factory=list)  # present, not listed
    mismatched: list[str] = field(default_factory=list)  # present, another sha256

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.mismatched)

    def summary(self) -> str:
        parts = []
        for label, names in (
            ("missing", self.missing),
            ("extra", self.extra),
            ("mismatched", self.mismatched),
        ):
            if names:
                parts.append(f"{label}: {', '.join(names)}")
        return "; ".join(parts) or "all files match"


def check_manifest(root: Path) -> ManifestReport:
    listed = read_manifest(root)
    present = set(package_files(root))
    report = ManifestReport(
        missing=sorted(set(listed) - present),
        extra=sorted(present - set(listed)),
    )
    report.mismatched = sorted(
        rel for rel in set(listed) & present if sha256_file(Path(root) / rel) != listed[rel]
    )
    return report


def copy_listed(root: Path, dest: Path) -> None:
    """Copy exactly the files MANIFEST.sha256 lists into `dest`, re-hashing each copy: what is imported is
    what was checked, even if the package changes meanwhile; a file it does not list is never read."""
    root, dest = Path(root), Path(dest)
    for rel, digest in read_manifest(root).items():
        source, target = root / rel, dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        if sha256_file(target) != digest:
            raise UserError(f"{source}: changed while it was imported (sha256 differs from the manifest)")
    shutil.copyfile(root / MANIFEST_NAME, dest / MANIFEST_NAME)
