"""Capture of the weights a host serves into the weights lock: `ddtree weights lock` and the weights part
of `ddtree-build capture` (which calls `capture_lock`).

A folder is a plain folder or a Hugging Face cache repository (models--ORG--NAME: the snapshot of refs/main,
or of --revision, is read; its commit becomes the locked revision). Every file is stat'ed and hashed with
the thread-pool hasher (progress bar on stderr); nothing is copied. A role not captured keeps its entry
from the base lock (the checkout's env/weights.yaml), or `unknown`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ddtree.errors import UserError
from ddtree.weights.layout import resolve_checkout
from ddtree.weights.lock import (
    ROLES,
    LockedFile,
    LockedModel,
    default_lock_path,
    folder_files,
    load_lock,
    write_lock,
)

DEFAULT_REPOS = {"target": "moonshotai/Kimi-K2.6", "drafter": "z-lab/Kimi-K2.6-DFlash"}
GATED = {"target": False, "drafter": True}


def capture_model(
    folder: Path,
    role: str,
    repo: str,
    revision: str | None = None,
    gated: bool = False,
    workers: int | None = None,
    stream: TextIO | None = None,
    source: str = "",
) -> LockedModel:
    """A lock entry for the files in `folder` (a plain folder or a Hugging Face cache repository):
    sizes and sha256 (the thread-pool hasher with its progress bar), nothing copied. The revision is
    the cache's snapshot commit when there is one, else `revision`, else unknown."""
    from ddtree.weights import hashes as weights_hash

    checkout = resolve_checkout(Path(folder), revision)
    if not checkout.path.is_dir():
        raise UserError(f"{role} weights folder {folder} is not a folder: give the model folder")
    files = folder_files(checkout.path)
    if not files:
        raise UserError(f"{role} weights folder {checkout.path} holds no files: wrong folder?")
    total = sum(p.stat().st_size for p in files.values())
    digests = weights_hash.hash_files(
        list(files.values()),
        workers=workers,
        progress=weights_hash.Progress(total, stream=stream, label=f"sha256 {role}"),
    )
    locked = tuple(
        LockedFile(path=rel, size=path.stat().st_size, sha256=digests[path]) for rel, path in files.items()
    )
    if checkout.revision and revision and checkout.revision != revision:
        raise UserError(
            f"{role} weights {folder} are revision {checkout.revision} but --revision says {revision}"
        )
    return LockedModel(
        role=role,
        repo=repo,
        revision=checkout.revision or revision,
        gated=gated,
        files=locked,
        source=source,
    )


def capture_lock(
    out: Path,
    folders: Mapping[str, Path],
    repos: Mapping[str, str] | None = None,
    revisions: Mapping[str, str] | None = None,
    base: Path | None = None,
    stream: TextIO | None = None,
    source: str = "",
) -> dict[str, LockedModel]:
    """Write a weights lock to `out`: the roles in `folders` captured, the others from `base` (a lock
    file) or unknown. Every folder is checked to exist before any is hashed."""
    repos = dict(repos or {})
    revisions = dict(revisions or {})
    for role, folder in folders.items():
        if role not in ROLES:
            raise UserError(f"unknown weights role {role!r}: use {', '.join(ROLES)}")
        if not Path(folder).is_dir():
            raise UserError(f"{role} weights folder {folder} is not a folder: give the model folder")
    previous = load_lock(base).models if base is not None and Path(base).is_file() else {}
    models: dict[str, LockedModel] = {}
    for role in ROLES:
        repo = repos.get(role) or (previous[role].repo if role in previous else DEFAULT_REPOS[role])
        if role in folders:
            models[role] = capture_model(
                Path(folders[role]),
                role,
                repo,
                revision=revisions.get(role),
                gated=previous[role].gated if role in previous else GATED[role],
                stream=stream,
                source=source,
            )
        elif role in previous:
            models[role] = previous[role]
        else:
            models[role] = LockedModel(role, repo, None, GATED[role], None, "not captured")
    write_lock(Path(out), models)
    return models


def _cmd_lock(args: argparse.Namespace) -> int:
    folders = {role: Path(getattr(args, role)) for role in ROLES if getattr(args, role)}
    if not folders:
        raise UserError("give --target DIR and/or --drafter DIR: the folders to capture")
    out = Path(args.out) if args.out else default_lock_path()
    import platform

    models = capture_lock(
        out,
        folders,
        repos={role: getattr(args, f"{role}_repo") for role in ROLES if getattr(args, f"{role}_repo")},
        revisions={
            role: getattr(args, f"{role}_revision") for role in ROLES if getattr(args, f"{role}_revision")
        },
        base=out,
        source=f"captured by ddtree weights lock on {platform.node()}",
    )
    for role in folders:
        model = models[role]
        size = sum(f.size or 0 for f in model.files or ())
        print(
            f"locked {role} {model.describe()}: {len(model.files or ())} files, {size / 1e9:.2f} GB -> {out}"
        )
    return 0


def register(sub: Any) -> None:
    """`ddtree weights lock` (added to `ddtree weights` by weights_cmd.register)."""
    parser = sub.add_parser(
        "lock", help="record the served weights (sizes, sha256, revision) in the weights lock"
    )
    for role in ROLES:
        parser.add_argument(
            f"--{role}", metavar="DIR", help=f"the {role} folder (plain, or a Hugging Face cache repo)"
        )
        parser.add_argument(f"--{role}-repo", metavar="ORG/NAME", help=f"default {DEFAULT_REPOS[role]}")
        parser.add_argument(f"--{role}-revision", metavar="COMMIT", help="the commit, for a plain folder")
    parser.add_argument(
        "--out", metavar="FILE", help="the lock to write (default: $DDTREE_ENV_DIR/weights.yaml)"
    )
    parser.set_defaults(func=_cmd_lock)
