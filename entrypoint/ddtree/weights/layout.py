"""Where a weights folder's files really are: a plain folder, or a Hugging Face cache repository.

The Hub's cache keeps one folder per repository, `models--ORG--NAME/`, holding `refs/main` (a commit
hash), `snapshots/COMMIT/` (the files, as relative symlinks into `../../blobs/`) and `blobs/` (the data,
named by sha256 or git blob id). Mounting that repository folder works: the snapshot's links resolve
inside the mount. Mounting only `snapshots/COMMIT/` does not: its links point at `../../blobs`, outside
the mount, so every file is a dangling link. Both cases, and links to host paths the container does not
have, are named here with the link and its target instead of "missing" or "corrupt".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ddtree.errors import UserError

COMMIT = re.compile(r"^[0-9a-f]{40}$")
# `hf_hub_download(local_dir=...)` keeps `<file>.metadata` here: commit hash, etag, time, one per line.
LOCAL_DIR_METADATA = Path(".cache") / "huggingface" / "download"


@dataclass(frozen=True)
class Checkout:
    """A folder of model files and, when the layout tells, the commit they came from."""

    path: Path
    revision: str | None
    layout: str  # "hf-cache" (a models--ORG--NAME folder), "snapshot" or "folder"


def is_hf_repo_cache(folder: Path) -> bool:
    """A Hugging Face cache repository folder: snapshots/ beside blobs/."""
    return (folder / "snapshots").is_dir() and (folder / "blobs").is_dir()


def _ref(folder: Path, name: str = "main") -> str | None:
    path = folder / "refs" / name
    if not path.is_file():  # absent, or a FIFO that would block the read
        return None
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if COMMIT.match(text) else None


def _snapshot_revision(folder: Path) -> str | None:
    """The commit of `.../snapshots/COMMIT` (a snapshot folder used directly)."""
    if folder.parent.name == "snapshots" and COMMIT.match(folder.name):
        return folder.name
    return None


def _local_dir_revision(folder: Path) -> str | None:
    """The commit `hf_hub_download(local_dir=...)` recorded for config.json (what `weights fetch` writes)."""
    path = folder / LOCAL_DIR_METADATA / "config.json.metadata"
    if not path.is_file():  # absent, or a FIFO that would block the read
        return None
    try:
        first = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    line = first.splitlines()[0].strip() if first.strip() else ""
    return line if COMMIT.match(line) else None


def resolve_checkout(folder: Path, revision: str | None = None) -> Checkout:
    """The folder holding the files. A cache repository resolves to the snapshot of `revision` when the
    cache has it, else of refs/main, else its only snapshot; several snapshots and no usable ref is an
    error that lists them (the lock comparison then says whether the one chosen is the locked one)."""
    folder = Path(folder)
    if not is_hf_repo_cache(folder):
        found = _snapshot_revision(folder) or _local_dir_revision(folder)
        layout = "snapshot" if _snapshot_revision(folder) else "folder"
        return Checkout(path=folder, revision=found, layout=layout)
    snapshots = folder / "snapshots"
    names = sorted(p.name for p in snapshots.iterdir() if p.is_dir())
    for candidate in (revision, _ref(folder)):
        if candidate and candidate in names:
            return Checkout(path=snapshots / candidate, revision=candidate, layout="hf-cache")
    if len(names) == 1:
        return Checkout(path=snapshots / names[0], revision=names[0], layout="hf-cache")
    shown = ", ".join(n[:12] for n in names) or "none"
    raise UserError(
        f"Hugging Face cache {folder} has {len(names)} snapshots ({shown}) and no refs/main naming one: "
        "point the mount at the snapshot wanted (or fetch the locked revision: ddtree weights fetch)"
    )


def link_target(path: Path) -> str | None:
    """What a symlink points at, as written in the link (None for a regular file)."""
    try:
        return os.readlink(path) if path.is_symlink() else None
    except OSError:
        return None


def link_note(path: Path) -> str:
    """` (a link to TARGET)` for a symlink, empty otherwise: appended to every message about a file."""
    target = link_target(path)
    return f" (a link to {target})" if target is not None else ""


def dangling_link_error(path: Path, what: str) -> UserError | None:
    """A one-line error for a link whose target is absent here, or None when `path` is not one.

    A link into ../../blobs is a Hugging Face snapshot mounted without its cache repository; any other
    is a link to a host path that is outside the mount (or absent on this machine).
    """
    target = link_target(path)
    if target is None or path.exists():
        return None
    if target.startswith("../../blobs/"):
        return UserError(
            f"{what} {path} is a link to {target}, which is absent here: a Hugging Face cache snapshot "
            "mounted without its blobs/; mount the repository folder (models--ORG--NAME, holding snapshots/ "
            "and blobs/) instead"
        )
    return UserError(
        f"{what} {path} is a link to {target}, which does not exist here (outside the mount, or absent "
        "on this machine): copy the file into the folder, or mount its target too"
    )


def is_read_only(folder: Path) -> bool | None:
    """Whether the filesystem holding `folder` is mounted read-only (None when it cannot be told)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return None
