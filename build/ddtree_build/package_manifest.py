"""MANIFEST.sha256 of a reproduction package: `sha256sum` format, written by capture, checked first by import.

Format: one `<64 hex>  <relative posix path>` line per file, sorted, the manifest itself excluded
(the layout `sha256sum -c` reads, as the original team's hand-made package used).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, sha256_file

MANIFEST_NAME = "MANIFEST.sha256"
_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def package_files(root: Path) -> list[str]:
    """Every regular file under root (posix relative paths), the manifest excluded, sorted."""
    root = Path(root)
    files = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            rel = path.relative_to(root).as_posix()
            if rel != MANIFEST_NAME:
                files.append(rel)
    return files


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
