"""The record an applied series leaves in the tree: MANIFEST.sha256 and manifest.json.

Both live in <root>/.ddtree-patchset/ (a dotted, dashed name: never importable, never mistaken for a
package). MANIFEST.sha256 is `sha256  path` per patched file, sorted by path (sha256sum -c reads it from
<root>). manifest.json holds versions, the series digest, and every patch's files with hashes and signatures,
so that `verify` (and the in-container self-check) can run without the patches/ folder. No timestamps:
the same series on the same wheel gives byte-identical manifests, so image layers stay reproducible.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ddtree import __version__
from ddtree.errors import UserError
from ddtree.fsutil import read_text
from ddtree.jsontext import JsonProblem, parse

if TYPE_CHECKING:
    from ddtree.patchset.series import Series

DIRNAME = ".ddtree-patchset"
SHA_NAME = "MANIFEST.sha256"
JSON_NAME = "manifest.json"
FORMAT = 1


def default_dir(root: Path) -> Path:
    return Path(root) / DIRNAME


def sha_text(final_hashes: dict[str, str]) -> str:
    return "".join(f"{digest}  {path}\n" for path, digest in sorted(final_hashes.items()))


def build(series: Series, installed_version: str | None, final_hashes: dict[str, str]) -> dict:
    return {
        "format": FORMAT,
        "tool": f"ddtree {__version__}",
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "distribution": series.distribution,
        "base_version": series.version,
        "installed_version": installed_version,
        "series_digest": series.digest(),
        "patches": [
            {
                "id": patch.id,
                "purpose": patch.purpose,
                "diff": patch.diff,
                "files": [
                    {"path": s.path, "pre": s.pre, "post": s.post, "signatures": s.signatures}
                    for s in patch.files
                ],
            }
            for patch in series.patches
        ],
        "files": dict(sorted(final_hashes.items())),
    }


def json_text(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def read_json(folder: Path) -> dict:
    path = folder / JSON_NAME
    text = read_text(
        path,
        "no patch manifest; this tree was not patched by `python -m ddtree.patchset apply` "
        "(or pass --series to verify against patches/series.yaml)",
    )
    try:
        data = parse(text)
    except JsonProblem as exc:
        raise UserError(f"{path}: damaged manifest ({exc}); re-apply the series") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        raise UserError(f"{path}: unknown manifest format; re-apply the series with this ddtree version")
    return data
