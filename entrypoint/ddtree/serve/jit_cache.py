"""Warm starts: the JIT caches in one persistent folder, keyed by the image's identity.

Every first start on a GPU host compiles flashinfer's attention kernels, Triton kernels (DDTree's among
them) and, where a wheel lacks machine code for the GPU (torch on sm_103), PTX through the driver. With
DDTREE_JIT_CACHE_DIR set (compose mounts the named volume `ddtree-jit-cache` there), `ddtree serve` points
those caches at DDTREE_JIT_CACHE_DIR/<image key>/, so the second start of the same image finds them.

The key is ddtree.image_identity's (sha256 over the image's io.ddtree.* labels, whole-tree digest
included), first 16 hex digits: a new image gets a new folder and never loads kernels compiled against
other code. Outside an image (no labels) nothing is redirected. A variable the caller set is kept.
Old images' folders stay until removed (`docker volume rm ddtree_ddtree-jit-cache`, or delete folders
whose identity.json names an image you no longer run).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from ddtree import image_identity
from ddtree.errors import UserError
from ddtree.fsutil import atomic_write

ROOT_ENV = "DDTREE_JIT_CACHE_DIR"
KEY_DIGITS = 16
CUDA_CACHE_BYTES = 4 << 30  # the driver's default 256 MiB is too small for a model's PTX
# Variable -> sub-folder of the keyed root.
FOLDERS: dict[str, str] = {
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",  # flashinfer keeps .cache/flashinfer/<version>/<arch> in it
    "TORCH_EXTENSIONS_DIR": "torch_extensions",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "CUDA_CACHE_PATH": "cuda",  # the driver's PTX JIT cache
    "XDG_CACHE_HOME": "xdg",  # other tools' ~/.cache (tvm-ffi builds and the like)
}


def keyed_root(environ: Mapping[str, str]) -> Path | None:
    """DDTREE_JIT_CACHE_DIR/<image key>, or None (no folder asked for, or not in a labelled image)."""
    base = environ.get(ROOT_ENV)
    if not base:
        return None
    _, labels, _ = image_identity.local_labels(environ)
    key = image_identity.identity_key(labels)
    return Path(base) / key[:KEY_DIGITS] if key else None


def environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The cache variables to export (empty when there is no keyed root); the caller's values win."""
    root = keyed_root(environ)
    if root is None:
        return {}
    wanted = {name: str(root / folder) for name, folder in FOLDERS.items()}
    wanted["CUDA_CACHE_MAXSIZE"] = str(CUDA_CACHE_BYTES)
    return {name: environ.get(name, value) for name, value in wanted.items()}


def prepare(environ: Mapping[str, str]) -> Path | None:
    """Create the keyed folders and record which image they belong to; the root, or None."""
    root = keyed_root(environ)
    if root is None:
        return None
    source, labels, _ = image_identity.local_labels(environ)
    record = {
        "key": image_identity.identity_key(labels),
        "labels_source": str(source),
        "labels": image_identity.identity_labels(labels),
    }
    try:
        for folder in FOLDERS.values():
            (root / folder).mkdir(parents=True, exist_ok=True)
        if not (root / "identity.json").is_file():
            atomic_write(root / "identity.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
        os.utime(root)  # last use, for whoever prunes old folders
    except OSError as exc:
        raise UserError(
            f"{ROOT_ENV}={environ[ROOT_ENV]}: cannot write {root} ({exc.strerror or exc}); mount a writable "
            f"volume there or unset {ROOT_ENV}"
        ) from exc
    return root
