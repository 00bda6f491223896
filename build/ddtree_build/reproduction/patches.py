"""A reproduction package's diffs and full files -> a patch series (ddtree-build import).

The original team made its package on the serving host: `diff -u /root/x.py.bak /usr/local/lib/python3.12/
dist-packages/sglang/.../x.py` (absolute paths, no a/ b/, backups that may already hold earlier edits) and
copies of the files that ran in patches/full/. So the full files are the truth: each is diffed against the
pristine wheel to make the series; the team's diffs name the files, group and order them, and are checked
against the full files (a hunk whose result is not in the file that ran is reported, never trusted).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ddtree.errors import UserError
from ddtree.fsutil import sha256_bytes

from ddtree_build.patching import pristine

if TYPE_CHECKING:
    from ddtree.patchset import udiff
    from ddtree.patchset.series import Series

# The patch engine's series and diff modules are imported where they are used: every `ddtree-build` start
# (--help, --version) imports the import command, and so this module.

DISTRIBUTION = "sglang"
_DEF = re.compile(rb"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")
SITE_DIRS = ("site-packages", "dist-packages")


def package_path(name: str) -> str | None:
    """`name` relative to site-packages: after the last site-packages/dist-packages folder (diff -u on the
    host), after a/ or b/ (git, capture), or from a `sglang/` folder on; None when it says neither."""
    parts = PurePosixPath(name).parts
    rest: tuple[str, ...] = ()
    hits = [i for i, part in enumerate(parts) if part in SITE_DIRS]
    if hits:
        rest = parts[hits[-1] + 1 :]
    elif len(parts) > 1 and parts[0] in ("a", "b"):
        rest = parts[1:]
    elif DISTRIBUTION in parts:
        rest = parts[parts.index(DISTRIBUTION) :]
    if not rest or ".." in rest or rest[0] == "/":
        return None
    return "/".join(rest)


def _header_name(line: bytes) -> str:
    return line[4:].decode("utf-8", "surrogateescape").rstrip("\n").split("\t", 1)[0].strip()


def normalize_diff(data: bytes, origin: str) -> bytes:
    """The team's diff with package-relative a/ b/ headers (the patch engine's form). The old name is a
    backup (`/root/x.py.bak`) and is only read for /dev/null (a new file); the new name says where."""
    from ddtree.patchset import udiff

    lines = udiff.split_lines(data)
    out: list[bytes] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            old, new = _header_name(line), _header_name(lines[i + 1])
            if new == udiff.DEV_NULL:
                raise UserError(f"{origin} line {i + 2}: deletes {old}; the series has no deletions")
            rel = package_path(new)
            if rel is None:
                raise UserError(
                    f"{origin} line {i + 2}: cannot tell where {new!r} is in site-packages; the new name "
                    f"must pass through site-packages/ or dist-packages/, start b/ or hold {DISTRIBUTION}/"
                )
            out.append(b"--- /dev/null\n" if old == udiff.DEV_NULL else f"--- a/{rel}\n".encode())
            out.append(f"+++ b/{rel}\n".encode())
            i += 2
            continue
        out.append(line)
        i += 1
    return b"".join(out)


def _patch_id(name: str, taken: set[str]) -> str:
    stem = re.sub(r"\.(diff|patch)$", "", name)
    stem = re.sub(r"^\d+[-_.]*", "", stem)
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-") or "patch"
    candidate, number = slug, 2
    while candidate in taken:
        candidate, number = f"{slug}-{number}", number + 1
    taken.add(candidate)
    return candidate


def _signatures(file_patch: udiff.FilePatch) -> list[str]:
    """Functions and classes the diff adds: the verifier checks they are present after applying."""
    names: dict[str, None] = {}
    for hunk in file_patch.hunks:
        for tag, text in hunk.lines:
            match = _DEF.match(text) if tag == b"+" else None
            if match:
                names.setdefault(match.group(1).decode(), None)
    return list(names)


def full_files(pkg: Path, targets: set[str], wheel_names: list[str]) -> dict[str, tuple[str, bytes]]:
    """{site-packages path: (name in the package, bytes)} of patches/full/. Three layouts: the tree
    (patches/full/sglang/...), the host's absolute path (patches/full/usr/.../dist-packages/sglang/...), or
    flat (patches/full/x.py: the one file of that name the diffs change, else the one in the wheel)."""
    folder = pkg / "patches" / "full"
    found: dict[str, tuple[str, bytes]] = {}
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if not path.is_file():
            continue
        shown = path.relative_to(pkg).as_posix()
        inner = path.relative_to(folder).as_posix()
        rel = package_path(inner) if "/" in inner else None
        rel = rel or _by_basename(path.name, targets, wheel_names, shown)
        if rel in found:
            raise UserError(f"{pkg.name}: {shown} and {found[rel][0]} are both {rel}; keep the one that ran")
        found[rel] = (shown, path.read_bytes())
    return found


def _by_basename(name: str, targets: set[str], wheel_names: list[str], shown: str) -> str:
    for pool, what in (
        (targets, "the diffs change"),
        (wheel_names, f"the pristine {DISTRIBUTION} wheel has"),
    ):
        hits = sorted(t for t in pool if PurePosixPath(t).name == name)
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise UserError(
                f"{shown}: {len(hits)} files {what} are called {name} ({', '.join(hits[:3])}); put it under "
                f"its path, e.g. patches/full/{hits[0]}"
            )
    raise UserError(
        f"{shown}: no file the diffs change and none in the pristine {DISTRIBUTION} wheel is called {name}; "
        f"put it under its site-packages path (patches/full/{DISTRIBUTION}/...)"
    )


def _show_line(line: bytes, width: int = 60) -> str:
    text = line.decode("utf-8", "replace").strip()
    return repr(text if len(text) <= width else text[:width] + "...")


def _final_contents(
    pkg: Path, team: list[tuple[str, list[udiff.FilePatch]]], full: dict[str, tuple[str, bytes]], read
) -> tuple[dict[str, bytes], list[str], list[str]]:
    """({path: the file that ran}, notes, warnings). A full copy wins; a file without one is its diffs
    applied strictly, in order, to the pristine file (an error when they do not apply)."""
    from ddtree.patchset import udiff

    chains: dict[str, list[tuple[str, udiff.FilePatch]]] = {}
    for name, file_patches in team:
        for fp in file_patches:
            chains.setdefault(fp.path, []).append((name, fp))
    finals: dict[str, bytes] = {}
    notes: list[str] = []
    warnings: list[str] = []
    for path in sorted(set(chains) | set(full)):
        pristine_data = read(path)
        chain = chains.get(path, [])
        if path not in full:
            data = pristine_data
            for name, fp in chain:
                data = udiff.apply_file(data, fp, f"{pkg.name}/patches/diffs/{name}")
            notes.append(f"{path}: no copy in patches/full/; its diffs applied to the pristine wheel's file")
            finals[path] = data or b""
            continue
        shown, data = full[path]
        finals[path] = data
        ran = set(udiff.split_lines(data))
        for index, (name, fp) in enumerate(chain):
            # Lines a later diff of this file takes out again are not expected in the file that ran.
            later = {text for _, later_fp in chain[index + 1 :] for h in later_fp.hunks
                     for tag, text in h.lines if tag == b"-"}  # fmt: skip
            for number, hunk in enumerate(fp.hunks, 1):
                lost = [
                    text for tag, text in hunk.lines if tag == b"+" and text not in ran and text not in later
                ]
                if lost:
                    warnings.append(
                        f"patches/diffs/{name}: hunk {number} of {path} (diff line {hunk.header_line}) adds "
                        f"{_show_line(lost[0])}, which {shown} does not have: this diff disagrees with the "
                        "file that ran; not trusted, the series uses the full file"
                    )
        replay = pristine_data
        for name, fp in chain:
            try:
                replay = udiff.apply_file(replay, fp, f"patches/diffs/{name}")
            except udiff.HunkError as exc:
                notes.append(
                    f"{path}: patches/diffs/{name} does not apply to the pristine file plus the diffs before "
                    f"it ({exc.kind}): made against a backup that held other edits; the series is {shown} "
                    "against the pristine wheel"
                )
                break
        else:
            if chain and replay != data:
                notes.append(f"{path}: {shown} holds edits no diff records; the series includes them")
    return finals, notes, warnings


def import_patches(
    pkg: Path, version: str, series_path: Path
) -> tuple[Series, dict[str, bytes], list[str], list[str]]:
    """(series with hashes, {diff name: bytes}, notes, warnings): one patch per team diff, in order, holding
    the files it is the first to change, each diffed from the pristine wheel to its patches/full/ copy;
    full files no diff names follow, one patch each."""
    from ddtree.patchset import udiff
    from ddtree.patchset.series import NEW, FileSpec, Patch, Series

    folder = pkg / "patches" / "diffs"
    paths = sorted([*folder.glob("*.diff"), *folder.glob("*.patch")]) if folder.is_dir() else []
    team = []
    for path in paths:
        where = f"{pkg.name}/patches/diffs/{path.name}"
        team.append((path.name, udiff.parse(normalize_diff(path.read_bytes(), where), where)))
    series = Series(path=series_path, distribution=DISTRIBUTION, version=version, patches=[])
    if not team and not (pkg / "patches" / "full").is_dir():
        return series, {}, [f"{pkg.name}/patches: no diffs and no full files; the series is empty"], []
    reader = pristine.WheelReader(pristine.ensure_wheel(DISTRIBUTION, version))
    try:
        targets = {fp.path for _, fps in team for fp in fps}
        wheel_names = [n for n in reader.names() if n.startswith(f"{DISTRIBUTION}/")]
        full = full_files(pkg, targets, wheel_names)
        finals, notes, warnings = _final_contents(pkg, team, full, reader.read)
        pristine_of = {path: reader.read(path) for path in finals}
    finally:
        reader.close()

    groups: list[tuple[str, str, list[str]]] = []
    claimed: set[str] = set()
    for name, fps in team:
        mine = [fp.path for fp in fps if fp.path not in claimed]
        claimed.update(mine)
        if mine:
            groups.append((name, f"imported from {pkg.name}/patches/diffs/{name} (files as they ran)", mine))
        else:
            notes.append(
                f"patches/diffs/{name}: its files are in an earlier patch (made from the full files)"
            )
    for path in sorted(set(full) - claimed):
        groups.append(
            (f"full-{path.replace('/', '-')}.diff", f"imported from {pkg.name}/{full[path][0]}", [path])
        )
        notes.append(f"{full[path][0]}: no diff names it; a patch of its own")

    taken: set[str] = set()
    raw: dict[str, bytes] = {}
    for diff_name, purpose, group in groups:
        changed = [path for path in group if finals[path] != pristine_of[path]]
        notes += [f"{path}: the file that ran is the pristine one; nothing to patch" for path in group
                  if path not in changed]  # fmt: skip
        if not changed:
            continue
        data = b"".join(udiff.make_file_diff(path, pristine_of[path], finals[path]) for path in changed)
        file_patches = udiff.parse(data, diff_name)
        files = [
            FileSpec(
                fp.path,
                NEW if pristine_of[fp.path] is None else sha256_bytes(pristine_of[fp.path] or b""),
                sha256_bytes(finals[fp.path]),
                _signatures(fp),
            )
            for fp in file_patches
        ]
        series.patches.append(
            Patch(
                _patch_id(diff_name, taken),
                purpose,
                diff_name,
                files,
                diff_bytes=data,
                file_patches=file_patches,
            )
        )
        raw[diff_name] = data
    return series, raw, notes, warnings
