"""Verify an installed (patched) tree: every target's hash, parse, byte-compile, signatures, manifests.

Expectations come from the series (host, docker build) or, without one, from the tree's own manifest.json
(in-container self-check, where patches/ may not be shipped). Problems are collected, not raised, so a
self-check can print them all; `VerifyResult.raise_if_failed()` turns them into one UserError.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ddtree.errors import UserError
from ddtree.fsutil import sha256_bytes
from ddtree.patchset import manifest, signatures, tree

if TYPE_CHECKING:
    from ddtree.patchset.series import Series

NEW = "new"  # as in series.py; not imported from there, so that a manifest-only verify needs no yaml


@dataclass
class Expected:
    """The final state one target file must be in, and the states that mean "not (fully) patched"."""

    path: str
    final: str
    pristine: str | None  # None: the series creates the file
    steps: dict[str, str] = field(default_factory=dict)  # intermediate sha256 -> patch id that left it
    signatures: list[str] = field(default_factory=list)
    last_patch: str = ""


@dataclass
class VerifyResult:
    root: Path
    problems: list[str]
    files_checked: int
    distribution: str
    base_version: str
    installed_version: str | None
    series_digest: str | None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.ok:
            return (
                f"verified {self.files_checked} patched file(s) in {self.root} "
                f"({self.distribution} {self.installed_version}, series {str(self.series_digest)[:12]}) "
                f"in {self.seconds:.2f} s"
            )
        return f"{len(self.problems)} problem(s) in {self.root}: " + "; ".join(self.problems)

    def raise_if_failed(self) -> None:
        if self.problems:
            raise UserError(self.summary())


def expectations(
    patch_files: list[tuple[str, list[tuple[str, str | None, str | None, list[str]]]]],
) -> list[Expected]:
    """From [(patch_id, [(path, pre, post, signatures)])] in series order."""
    by_path: dict[str, Expected] = {}
    for patch_id, files in patch_files:
        for path, pre, post, sigs in files:
            if post is None:
                raise UserError(
                    f"patch {patch_id}: {path} has no post hash; run `ddtree-build patches refresh`"
                )
            exp = by_path.get(path)
            if exp is None:
                exp = by_path[path] = Expected(path, post, None if pre == NEW else pre)
            else:
                exp.steps[exp.final] = exp.last_patch
                exp.final = post
            exp.last_patch = patch_id
            exp.signatures.extend(s for s in sigs if s not in exp.signatures)
    return list(by_path.values())


def from_series(series: Series) -> list[Expected]:
    return expectations(
        [(p.id, [(s.path, s.pre, s.post, s.signatures) for s in p.files]) for p in series.patches]
    )


def from_manifest(data: dict) -> list[Expected]:
    return expectations(
        [
            (p["id"], [(f["path"], f["pre"], f["post"], list(f["signatures"])) for f in p["files"]])
            for p in data["patches"]
        ]
    )


def state_problem(exp: Expected, digest: str | None, root: Path) -> str | None:
    """Why a file's hash is not the final one, in words a maintainer can act on; None when it is."""
    if digest == exp.final:
        return None
    where = root / exp.path
    if digest is None:
        return f"{where} is missing (the series leaves it with sha256 {exp.final}, patch {exp.last_patch})"
    if digest == exp.pristine:
        return f"{where} is not patched (it is the pristine file; apply the series)"
    if digest in exp.steps:
        return (
            f"partially patched tree: {where} is in the state left by patch {exp.steps[digest]}, "
            f"not by the last patch {exp.last_patch}"
        )
    return (
        f"tampered post-image: {where} has sha256 {digest}, expected {exp.final} (patch {exp.last_patch}); "
        "something changed it after patching: reinstall the pristine wheel and apply the series again"
    )


def verify(
    root: Path | str,
    series: Series | Path | str | None = None,
    manifest_dir: Path | str | None = None,
    deep: bool = True,
) -> VerifyResult:
    """Check a patched tree. PUBLIC: the self-check calls this.

    root: the folder holding sglang/ (site-packages). series: a loaded Series, a path to series.yaml, or None
    to check against the tree's own manifest.json. manifest_dir: where the manifests are (default
    <root>/.ddtree-patchset). A .py file whose hash-based .pyc (written by apply) was compiled from exactly
    its bytes is read from that .pyc instead of compiled: faster, and it is the code that runs.
    deep=False skips compile + signatures (for callers that just checked those
    bytes in memory: the hash then proves they are the same bytes). Raises UserError only when the tree
    or series cannot be read at all; every finding about the tree itself is in VerifyResult.problems
    (empty = verified).
    """
    started = time.perf_counter()
    root = Path(root)
    folder = Path(manifest_dir) if manifest_dir else manifest.default_dir(root)
    problems: list[str] = []
    if isinstance(series, (str, Path)):
        from ddtree.patchset.series import load

        series = load(Path(series))
    data: dict | None = None
    if series is None:
        data = manifest.read_json(folder)
        distribution, base_version = data["distribution"], data["base_version"]
        expected = from_manifest(data)
        digest = data["series_digest"]
    else:
        distribution, base_version = series.distribution, series.version
        expected = from_series(series)
        digest = series.digest()
    tree.check_root(root, distribution)
    installed = tree.installed_version(root, distribution)
    if installed != base_version:
        problems.append(
            f"wrong base version: {root} has {distribution} {installed or 'of unknown version'}, "
            f"the series is based on {base_version}"
        )
    finals: dict[str, str] = {}
    for exp in expected:
        finals[exp.path] = exp.final
        content = tree.read(root, exp.path)
        problem = state_problem(exp, None if content is None else sha256_bytes(content), root)
        if problem:
            problems.append(problem)
            continue
        assert content is not None
        if deep:
            code = signatures.cached_code(root / exp.path, content) if exp.path.endswith(".py") else None
            problems.extend(signatures.check_file(exp.path, content, exp.signatures, code))
    problems.extend(_check_manifests(folder, data, digest, finals))
    return VerifyResult(
        root=root,
        problems=problems,
        files_checked=len(expected),
        distribution=distribution,
        base_version=base_version,
        installed_version=installed,
        series_digest=digest,
        seconds=time.perf_counter() - started,
    )


def _check_manifests(folder: Path, data: dict | None, digest: str, finals: dict[str, str]) -> list[str]:
    problems = []
    if data is None:
        try:
            data = manifest.read_json(folder)
        except UserError as exc:
            return [str(exc)]
        if data.get("series_digest") != digest:
            problems.append(
                f"{folder / manifest.JSON_NAME}: the tree was patched with another series "
                f"(digest {str(data.get('series_digest'))[:12]}, this series {digest[:12]}): "
                "apply this series to a pristine tree"
            )
    if data.get("files") != dict(sorted(finals.items())):
        problems.append(
            f"{folder / manifest.JSON_NAME}: its file list or hashes were edited; re-apply the series"
        )
    sha_path = folder / manifest.SHA_NAME
    try:
        sha_text = sha_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [*problems, f"{sha_path} is missing; re-apply the series"]
    if sha_text != manifest.sha_text(finals):
        problems.append(
            f"{sha_path} does not match the series' post-image hashes (edited?); re-apply the series"
        )
    return problems
