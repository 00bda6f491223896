"""Facts about a target tree (a site-packages folder or an extracted wheel): version, files, moved targets."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ddtree.errors import UserError

_VERSION_PY_RE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_SKIP_DIRS = {"__pycache__", ".git"}


def check_root(root: Path, distribution: str) -> Path:
    """The root must be a folder holding the distribution's package (site-packages, not the package)."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(
            f"{root}: not a folder; pass --root the site-packages folder that holds {distribution}/"
        )
    if not (root / distribution).is_dir():
        hint = (
            f"; pass its parent {root.parent}"
            if root.name == distribution
            else f" (pass the site-packages folder that holds {distribution}/)"
        )
        raise UserError(f"{root}: no {distribution}/ package folder here{hint}")
    return root


def installed_version(root: Path, distribution: str) -> str | None:
    """Version from <dist>-*.dist-info/METADATA, else <dist>/version.py; None when neither says."""
    versions = set()
    for meta in root.glob(f"{distribution}-*.dist-info/METADATA"):
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Version:"):
                versions.add(line.split(":", 1)[1].strip())
                break
            if not line.strip():
                break
    if len(versions) == 1:
        return versions.pop()
    version_py = root / distribution / "version.py"
    if version_py.is_file():
        match = _VERSION_PY_RE.search(version_py.read_text(encoding="utf-8", errors="replace"))
        if match:
            return match.group(1)
    if versions:
        raise UserError(
            f"{root}: several {distribution} dist-info folders ({', '.join(sorted(versions))}); "
            f"reinstall {distribution} so that exactly one remains"
        )
    return None


def read(root: Path, rel: str) -> bytes | None:
    """The file's bytes, or None when it does not exist. A folder in its place is an error."""
    path = root / rel
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, expected a file") from None
    except PermissionError:
        raise UserError(f"{path}: cannot read it (permission denied); run as a user that can") from None


def all_files(root: Path, under: str) -> list[str]:
    """Relative paths of every file below root/under (posix style), caches skipped."""
    found: list[str] = []
    base = root / under
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        found.extend(f"{rel_dir}/{name}" for name in filenames if not name.endswith((".pyc", ".pyo")))
    return found


def _signal_lines(lines: list[bytes]) -> set[bytes]:
    """Lines distinctive enough to recognise a file by (not blank, not a lone bracket or keyword)."""
    return {stripped for line in lines if len(stripped := line.strip()) >= 12}


def suggest_moved(
    root: Path, rel: str, distribution: str, known_lines: list[bytes]
) -> list[tuple[str, float]]:
    """Where a missing target may have moved: files with the same name, or whose name contains its stem
    (cuda_graph_runner.py -> runner/decode_cuda_graph_runner.py), ranked by how many of the lines the
    patch expects (its context and removed lines) they contain. Returns (path, share of lines found)."""
    name = Path(rel).name
    stem, suffix = Path(rel).stem, Path(rel).suffix
    candidates = [
        path
        for path in all_files(root, distribution)
        if path != rel
        and path.endswith(suffix)
        and (Path(path).name == name or (len(stem) >= 4 and stem in Path(path).stem))
    ]
    want = _signal_lines(known_lines)
    scored: list[tuple[str, float]] = []
    for path in candidates:
        share = 0.0
        if want:
            have = _signal_lines((root / path).read_bytes().splitlines())
            share = len(want & have) / len(want)
        same_name = Path(path).name == name
        scored.append((path, share + (0.001 if same_name else 0.0)))
    scored.sort(key=lambda item: (-item[1], item[0]))
    if want and scored and scored[0][1] > 0:
        scored = [item for item in scored if item[1] > 0]
    return [(path, min(share, 1.0)) for path, share in scored[:3]]
