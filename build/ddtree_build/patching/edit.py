"""The patch set's quilt-like edit/refresh workflow on the host (the check is check.py).

`edit NAME` makes .work/patches/NAME/tree = pristine wheel + the series up to and including NAME, and
remembers the baseline (the series up to NAME's predecessor): a sha256 of every baseline file and a copy of
each file the earlier patches changed. `refresh NAME` diffs every file that differs from that baseline
(new files included), writes NAME's diff, recomputes the pre/post hashes of NAME and of every later patch
(their pre-images may depend on it), rewrites series.yaml, and checks the whole series again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ddtree.fsutil import atomic_write, sha256_bytes
from ddtree.patchset import engine, udiff
from ddtree.patchset import series as series_mod
from ddtree.patchset.series import NEW, FileSpec, Patch, Series

from ddtree_build.errors import UserError
from ddtree_build.host import file_lock
from ddtree_build.patching import pristine
from ddtree_build.patching.check import CheckReport, check, series_path
from ddtree_build.paths import REPO_ROOT

WORK_DIR = REPO_ROOT / ".work" / "patches"
STATE_NAME = "state.json"
# Editor and patch-tool leftovers never become part of a diff.
_IGNORED_RE = re.compile(r"(^|/)(__pycache__/|\.#)|(\.pyc|\.pyo|~|\.swp|\.swo|\.orig|\.rej)$")
_DIFF_NUMBER_RE = re.compile(r"^(\d{4})-")


def work_dir(name: str) -> Path:
    return WORK_DIR / name


def series_lock() -> contextlib.AbstractContextManager[None]:
    """Several maintainers share one checkout: serialize read-modify-write of series.yaml. The lock lies in
    the checkout's git-ignored .work/ (not the cache, which DDTREE_CACHE may move), so all of them see it."""
    return file_lock(WORK_DIR / ".series.lock")


def _apply_in_memory(series: Series, patches: list[Patch], read) -> dict[str, bytes | None]:
    # A work tree is made even when a patch's code is broken: fixing it is what edit is for.
    contents, _, problems = engine.simulate(
        series, read, patches=patches, check_hashes=False, check_code=False
    )
    if problems:
        raise UserError("; ".join(problems))
    return contents


def edit(name: str, new: bool = False, after: str | None = None, force: bool = False) -> Path:
    """Make the work tree for NAME; returns its path."""
    with series_lock():
        series = series_mod.load(series_path(), strict=False)
    if new:
        if not re.match(r"^[a-z0-9]+(?:-[a-z0-9]+)*$", name):
            raise UserError(f"patch name {name!r} must be kebab-case (a-z, 0-9, single dashes)")
        if any(p.id == name for p in series.patches):
            raise UserError(f"patch {name} already exists in {series.path}; drop --new to edit it")
        position = series.index(after) + 1 if after else len(series.patches)
        baseline, included = series.patches[:position], series.patches[:position]
    else:
        if after:
            raise UserError("--after only goes with --new (a new patch's place in the series)")
        position = series.index(name)
        baseline, included = series.patches[:position], series.patches[: position + 1]
    folder = work_dir(name)
    if folder.exists():
        if not force:
            raise UserError(
                f"{folder} exists (edits in progress?): run `ddtree-build patches refresh {name}`, "
                "or pass --force to discard it and start again"
            )
        shutil.rmtree(folder)
    wheel = pristine.ensure_wheel(series.distribution, series.version)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=WORK_DIR))
    try:
        root = pristine.extract(wheel, staging / "tree")
        reader = pristine.WheelReader(wheel)
        try:
            base_contents = _apply_in_memory(series, baseline, reader.read)
            full_contents = _apply_in_memory(series, included, reader.read)
            hashes = {n: sha256_bytes(reader.read(n) or b"") for n in reader.names()}
        finally:
            reader.close()
        for rel, data in base_contents.items():
            if data is not None:
                atomic_write(staging / "baseline" / rel, data)
                hashes[rel] = sha256_bytes(data)
        for rel, data in full_contents.items():
            if data is not None:
                atomic_write(root / rel, data, mode=0o644)
        state = {
            "name": name,
            "new": new,
            "after": after,
            "wheel": str(wheel),
            "base_version": series.version,
            "baseline_patches": [p.id for p in baseline],
            "baseline_files": sorted(rel for rel, data in base_contents.items() if data is not None),
            "baseline_hashes": hashes,
        }
        atomic_write(staging / STATE_NAME, json.dumps(state, indent=1) + "\n")
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder / "tree"


@dataclass
class RefreshReport:
    patch: Patch
    changed: list[str]
    rehashed: list[str]
    rebased: list[str]
    check: CheckReport | None
    problems: list[str]


def _changed_files(tree_root: Path, state: dict) -> tuple[dict[str, bytes], list[str]]:
    """Files in the work tree whose bytes differ from the baseline, and baseline files deleted."""
    hashes: dict[str, str] = state["baseline_hashes"]
    changed: dict[str, bytes] = {}
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(tree_root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.endswith(".dist-info")]
        for filename in filenames:
            rel = (Path(dirpath) / filename).relative_to(tree_root).as_posix()
            if _IGNORED_RE.search(rel):
                continue
            seen.add(rel)
            data = (tree_root / rel).read_bytes()
            if hashes.get(rel) != sha256_bytes(data):
                changed[rel] = data
    deleted = sorted(
        rel for rel in hashes if rel not in seen and ".dist-info/" not in rel and not _IGNORED_RE.search(rel)
    )
    return changed, deleted


def _next_diff_name(series: Series, name: str) -> str:
    """NNNN-name.diff with NNNN above every number in use (in the series or lying in patches/)."""
    names = [Path(p.diff).name for p in series.patches] + [p.name for p in series.folder.glob("*.diff")]
    numbers = [int(m.group(1)) for n in names if (m := _DIFF_NUMBER_RE.match(n))]
    return f"{max(numbers, default=0) + 1:04d}-{name}.diff"


def _parse_signature_args(values: list[str]) -> dict[str, list[str]]:
    """--signatures PATH=a,b (PATH may be the file name alone)."""
    parsed: dict[str, list[str]] = {}
    for value in values:
        path, sep, names = value.partition("=")
        if not sep or not path or not names.strip():
            raise UserError(f"--signatures {value!r}: write PATH=ident1,ident2")
        parsed.setdefault(path, []).extend(n.strip() for n in names.split(",") if n.strip())
    return parsed


def _signatures_for(rel: str, old: list[str], extra: dict[str, list[str]]) -> list[str]:
    sigs = list(old)
    for key, names in extra.items():
        if key in (rel, Path(rel).name):
            sigs.extend(n for n in names if n not in sigs)
    return sigs


def recompute_hashes(series: Series, read) -> tuple[list[str], list[str]]:
    """Rewrite every pre/post hash from the diffs applied in order to the pristine files.

    A later patch whose hunks still match exactly but at other lines (an earlier patch added or removed
    lines above them) is rebased: its diff is rewritten with the new line numbers, same change, same
    context. One whose context changed keeps its old hashes and is reported. Returns (problems, rebased).
    """
    chain = engine.FileChain(read)
    problems: list[str] = []
    rebased: list[str] = []
    for patch in series.patches:
        pairs: dict[str, tuple[bytes | None, bytes]] = {}
        moved = False
        for fp, old in chain.files(patch):
            origin = str(series.folder / patch.diff)
            try:
                new = udiff.apply_file(old, fp, origin)
            except udiff.HunkError as exc:
                try:
                    new = udiff.apply_file(old, fp, origin, allow_offset=True)
                    moved = True
                except udiff.HunkError:
                    problems.append(
                        f"patch {patch.id} no longer applies ({exc}); run `ddtree-build patches edit "
                        f"{patch.id} --force`, redo its change, and refresh it"
                    )
                    chain.drop(fp.path)
                    continue
            spec = patch.spec(fp.path)
            spec.pre = NEW if old is None else sha256_bytes(old)
            spec.post = sha256_bytes(new)
            chain.contents[fp.path] = new
            pairs[fp.path] = (old, new)
        if moved and len(pairs) == len(patch.file_patches):
            patch.diff_bytes = b"".join(udiff.make_file_diff(rel, *pairs[rel]) for rel in sorted(pairs))
            patch.file_patches = udiff.parse(patch.diff_bytes, patch.diff)
            rebased.append(patch.id)
    return problems, rebased


def refresh(
    name: str,
    purpose: str | None = None,
    signature_args: list[str] | None = None,
    run_check: bool = True,
    new: bool = False,
    after: str | None = None,
) -> RefreshReport:
    """Write NAME's diff and hashes back from its work tree, then check the whole series.
    new/after only confirm what `edit` was told (the work tree's baseline depends on the place)."""
    folder = work_dir(name)
    edit_hint = f"edit {name} --new" + (f" --after {after}" if after else "") if new else f"edit {name}"
    try:
        state = json.loads((folder / STATE_NAME).read_text())
    except FileNotFoundError:
        raise UserError(
            f"no work tree for {name}: run `ddtree-build patches {edit_hint}` first, change files in "
            f".work/patches/{name}/tree, then refresh"
        ) from None
    if (new or after) and (not state["new"] or (after or None) != state["after"]):
        made = (
            f"--new --after {state['after']}" if state["after"] else "--new" if state["new"] else "(existing)"
        )
        raise UserError(
            f"the work tree of {name} was made by `edit {name} {made}`; run `ddtree-build patches "
            f"{edit_hint} --force` to make it for that place (this discards its edits)"
        )
    extra_sigs = _parse_signature_args(signature_args or [])
    changed, deleted = _changed_files(folder / "tree", state)
    if deleted:
        raise UserError(
            f"{folder / 'tree'}: {', '.join(deleted[:5])} deleted; the series format cannot delete files "
            "(empty the module instead, or restore it)"
        )
    if not changed:
        raise UserError(f"nothing to write: no file under {folder / 'tree'} differs from the baseline")
    binary = sorted(rel for rel, data in changed.items() if b"\0" in data)
    if binary:
        raise UserError(f"{', '.join(binary)}: binary content; the series carries text diffs only")
    reader = pristine.WheelReader(Path(state["wheel"]))
    baseline_files = set(state["baseline_files"])

    def baseline(rel: str) -> bytes | None:
        if rel in baseline_files:
            return (folder / "baseline" / rel).read_bytes()
        return reader.read(rel)

    try:
        with series_lock():
            series = series_mod.load(series_path(), strict=False)
            if series.version != state["base_version"]:
                raise UserError(
                    f"base.version changed from {state['base_version']} to {series.version} since `edit "
                    f"{name}`: run `ddtree-build patches edit {name} --force` again"
                )
            olds = {rel: baseline(rel) for rel in sorted(changed)}  # each baseline file read once
            diff = b"".join(udiff.make_file_diff(rel, old, changed[rel]) for rel, old in olds.items())
            existing = next((p for p in series.patches if p.id == name), None)
            if existing is None and not state["new"]:
                raise UserError(
                    f"patch {name} is no longer in {series.path}; start again with `edit {name} --new`"
                )
            if existing is not None and state["new"]:
                raise UserError(
                    f"a patch named {name} was added to {series.path} meanwhile; pick another name"
                )
            if existing is None:
                if not purpose:
                    raise UserError(f'new patch {name} needs --purpose "one line saying why"')
                position = series.index(state["after"]) + 1 if state["after"] else len(series.patches)
                patch = Patch(name, purpose, _next_diff_name(series, name), [])
                series.patches.insert(position, patch)
                old_sigs: dict[str, list[str]] = {}
            else:
                patch = existing
                patch.purpose = purpose or patch.purpose
                old_sigs = {s.path: s.signatures for s in patch.files}
            patch.files = [
                FileSpec(
                    rel,
                    NEW if old is None else sha256_bytes(old),
                    sha256_bytes(changed[rel]),
                    _signatures_for(rel, old_sigs.get(rel, []), extra_sigs),
                )
                for rel, old in olds.items()
            ]
            patch.diff_bytes = diff
            patch.file_patches = udiff.parse(diff, patch.diff)
            before = {(p.id, s.path): (s.pre, s.post) for p in series.patches for s in p.files}
            problems, rebased = recompute_hashes(series, reader.read)
            atomic_write(series.folder / patch.diff, patch.diff_bytes, mode=0o644)
            for other in series.patches:
                if other.id in rebased and other is not patch:
                    atomic_write(series.folder / other.diff, other.diff_bytes, mode=0o644)
            series_mod.write(series)
            rehashed = sorted(
                f"{p.id}:{s.path}"
                for p in series.patches
                if p.id != name
                for s in p.files
                if before.get((p.id, s.path)) != (s.pre, s.post)
            )
    finally:
        reader.close()
    report = RefreshReport(
        patch, sorted(changed), rehashed, [r for r in rebased if r != name], None, problems
    )
    if run_check and not problems:
        try:
            report.check = check()
        except UserError as exc:
            report.problems.append(
                f"wrote {patch.diff} and series.yaml, but the series check then failed (fix the work tree "
                f"and refresh again): {exc}"
            )
    return report


def list_patches() -> list[str]:
    series = series_mod.load(series_path(), strict=False)
    lines = [f"base: {series.distribution} {series.version} ({len(series.patches)} patch(es))"]
    for number, patch in enumerate(series.patches, 1):
        lines.append(f"{number:3d}. {patch.id}: {patch.purpose} [{patch.diff}]")
        for spec in patch.files:
            pre = "new" if spec.pre == NEW else (spec.pre or "?")[:12]
            sigs = ", ".join(spec.signatures) or "no signatures"
            lines.append(f"       {spec.path}  pre {pre}  post {(spec.post or '?')[:12]}  ({sigs})")
    return lines
