"""The patch-set engine: one implementation for the host check, the `docker build` step and the self-check.

Public API (stable; other modules call these):

    load(path: Path, strict: bool = True) -> Series
        Read and validate patches/series.yaml (keys, ids, diffs, hash chain). Raises UserError.

    apply(root: Path, series: Series, manifest_dir: Path | None = None,
          write_bytecode: bool = True) -> ApplyResult
        Apply the whole series to `root` (the folder holding sglang/, i.e. site-packages) strictly, or
        change nothing and raise UserError. A tree already patched is a no-op (status "already applied").

    verify(root: Path | str, series: Series | Path | str | None = None,
           manifest_dir: Path | str | None = None, deep: bool = True) -> VerifyResult
        Check a patched tree: every target's sha256, parse + byte-compile, signatures, manifests and the
        installed version. With series=None the expectations come from <root>/.ddtree-patchset/manifest.json,
        so the in-container self-check needs no patches/ folder. Never raises for findings about the tree:
        result.ok, result.problems (list of one-line messages), result.summary(); raises UserError only when
        the root or the series/manifest cannot be read. result.raise_if_failed() raises the summary.

    Self-check usage:
        from ddtree.patchset import verify
        result = verify(site_packages)          # e.g. Path(sglang.__file__).parent.parent
        print(result.summary()); ok = result.ok

Command line (stdlib + pyyaml + packaging only; no git, no GNU patch):
    python -m ddtree.patchset apply  --root SITE_PACKAGES --series PATCHES/series.yaml
    python -m ddtree.patchset verify --root SITE_PACKAGES [--series PATCHES/series.yaml]
"""

from __future__ import annotations

import importlib
from typing import Any

# `verify` is bound eagerly: the submodule of the same name would otherwise shadow the function. The rest
# loads on first use, so `verify` (the self-check, the image's verify step) imports neither yaml nor the
# engine's write machinery.
from ddtree.patchset.verify import VerifyResult, verify

_LAZY = {"apply": "engine", "ApplyResult": "engine", "load": "series", "Series": "series"}

__all__ = ["ApplyResult", "Series", "VerifyResult", "apply", "load", "verify"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"ddtree.patchset.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'ddtree.patchset' has no attribute {name!r}")
