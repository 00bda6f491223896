"""Apply a series to a tree: classify, compute everything in memory, check it, then stage and swap.

Order of work, so that a failure never leaves a half-patched tree:
1. classify every target file by hash: pristine, fully patched, patched up to some patch, or unknown
   (pre-image mismatch, missing/moved, in the way). Any mix is refused with the reason for each file.
2. apply every patch in memory (strict hunks), check each patch's post-image hash, parse, byte-compile and
   signatures. Any problem: nothing is written.
3. stage every new file beside its target (same folder, same filesystem), then rename each over its
   target. If a rename fails, the files already swapped are restored from the bytes read in step 1.
4. verify the tree on disk and write the manifests (staged with the files).
"""

from __future__ import annotations

import contextlib
import errno
import os
import py_compile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.util import cache_from_source
from pathlib import Path

from ddtree.errors import UserError
from ddtree.fsutil import sha256_bytes
from ddtree.patchset import manifest, signatures, tree, udiff
from ddtree.patchset.series import Patch, Series
from ddtree.patchset.verify import verify

Contents = dict[str, "bytes | None"]


@dataclass
class ApplyResult:
    root: Path
    status: str  # "applied" or "already applied"
    files: list[str]
    patches: list[str]
    installed_version: str | None
    seconds: float
    note: str = ""

    def summary(self) -> str:
        what = f"{len(self.patches)} patch(es), {len(self.files)} file(s)"
        version = f"sglang {self.installed_version}"
        note = f"; {self.note}" if self.note else ""
        return f"{self.status}: {what} in {self.root} ({version}) in {self.seconds:.2f} s{note}"


class FileChain:
    """Each touched file's contents while a series' patches are applied in order (read once, on first use).
    A file whose patch failed is dropped: its later patches are skipped, so one failure gives one message."""

    def __init__(self, read: Callable[[str], bytes | None]) -> None:
        self.read = read
        self.contents: Contents = {}
        self.broken: set[str] = set()

    def files(self, patch: Patch) -> Iterator[tuple[udiff.FilePatch, bytes | None]]:
        """(file patch, that file's contents before it) for each file of `patch` not dropped yet."""
        for fp in patch.file_patches:
            if fp.path in self.broken:
                continue
            if fp.path not in self.contents:
                self.contents[fp.path] = self.read(fp.path)
            yield fp, self.contents[fp.path]

    def drop(self, path: str) -> None:
        self.broken.add(path)


def simulate(
    series: Series,
    read: Callable[[str], bytes | None],
    patches: list[Patch] | None = None,
    check_hashes: bool = True,
    check_code: bool = True,
) -> tuple[Contents, dict[str, Contents], list[str]]:
    """Apply `patches` (default: the whole series) in memory to files obtained by `read(path)`.

    Returns (final contents of touched files, each patch's post-images by id, problems). With
    check_hashes, each pre/post image must hash to what series.yaml says. With check_code, each post-image
    must parse, compile and contain the signatures of this patch and of every earlier patch of that file.
    After a failure in a file, later patches of it are skipped.
    """
    patches = series.patches if patches is None else patches
    chain = FileChain(read)
    sigs_so_far: dict[str, list[str]] = {}
    posts: dict[str, Contents] = {}
    problems: list[str] = []
    for patch in patches:
        origin = str(series.folder / patch.diff)
        posts[patch.id] = {}
        for fp, old in chain.files(patch):
            spec = patch.spec(fp.path)
            if check_hashes:
                actual = "new" if old is None else sha256_bytes(old)
                if actual != spec.pre:
                    problems.append(
                        f"patch {patch.id}: {fp.path} before it has sha256 {actual}, "
                        f"series.yaml says {spec.pre}"
                    )
                    chain.drop(fp.path)
                    continue
            try:
                new = udiff.apply_file(old, fp, origin)
            except udiff.HunkError as exc:
                problems.append(f"patch {patch.id}: {exc}")
                chain.drop(fp.path)
                continue
            if check_hashes and sha256_bytes(new) != spec.post:
                problems.append(
                    f"patch {patch.id}: {fp.path} after it has sha256 {sha256_bytes(new)}, series.yaml says "
                    f"{spec.post}: the diff changed without `ddtree-build patches refresh {patch.id}`"
                )
            # A patch's signatures must hold from it on: the later patches' post-images are checked for them
            # too, so apply and a later `verify` (which checks all of them on the final file) agree.
            wanted = sigs_so_far.setdefault(fp.path, [])
            wanted.extend(sig for sig in spec.signatures if sig not in wanted)
            if check_code:
                problems.extend(f"patch {patch.id}: {p}" for p in signatures.check_file(fp.path, new, wanted))
            chain.contents[fp.path] = new
            posts[patch.id][fp.path] = new
    return chain.contents, posts, problems


def _expected_lines(series: Series, path: str) -> list[bytes]:
    """The pre-image lines the series relies on (context and removed lines of the first patch on `path`)."""
    patch, _ = series.chain(path)[0]
    return [line for hunk in patch.file_patch(path).hunks for line in hunk.old_lines()]


def classify(
    series: Series,
    root: Path,
    current: Contents,
    installed: str | None,
    reference: Callable[[str], bytes | None] | None = None,
) -> tuple[list[str], bool]:
    """Problems with the tree's starting state, and whether it is already fully patched.
    `reference` reads the base version's pristine files (host only); it sharpens the moved-file search."""
    pristine_files, final_files, problems = [], [], []
    step_files: dict[str, str] = {}
    version_note = (
        f" (installed {series.distribution} is {installed or 'of unknown version'}, the series is based on "
        f"{series.version})"
        if installed != series.version
        else ""
    )
    for path in series.touched_paths():
        chain = series.chain(path)
        pristine = series.pristine_hash(path)
        data = current[path]
        digest = None if data is None else sha256_bytes(data)
        first = chain[0][0].id
        if digest == chain[-1][1].post:
            final_files.append(path)
        elif digest == pristine:
            pristine_files.append(path)
        elif digest in {spec.post for _, spec in chain[:-1]}:
            step_files[path] = next(p.id for p, spec in chain if spec.post == digest)
        elif digest is None:
            problems.append(_missing(series, root, path, first, reference))
        elif pristine is None:
            problems.append(
                f"{root / path} exists but patch {first} creates it (pre: new), and it is not the patched "
                f"file either (sha256 {digest}): remove the stray file or reinstall {series.distribution}"
            )
        else:
            problems.append(
                f"pre-image mismatch: {root / path} has sha256 {digest}, patch {first} expects {pristine}"
                + version_note
                + f": the tree is not pristine {series.distribution} {series.version}"
                + _would_apply(series, path, data)
            )
    if (final_files or step_files) and (pristine_files or step_files or problems):
        done = sorted(final_files) + [f"{p} (up to {pid})" for p, pid in sorted(step_files.items())]
        problems.insert(
            0,
            f"partially patched tree: {root} has patched content in {', '.join(done)} but not in "
            f"{', '.join(sorted(pristine_files)) or 'the other files'}; reinstall pristine "
            f"{series.distribution}=={series.version} (pip install --force-reinstall --no-deps) "
            "and apply again",
        )
    if installed != series.version:
        problems.insert(
            0,
            f"wrong base version: {root} has {series.distribution} {installed or 'of unknown version'} "
            f"(dist-info METADATA / version.py), the series {series.path} is based on {series.version}: "
            f"install {series.distribution}=={series.version}, or rebase the series and change base.version",
        )
    return problems, not problems and len(final_files) == len(current)


def _would_apply(series: Series, path: str, data: bytes) -> str:
    """For a file that is not the expected pre-image: would the first patch's hunks still fit? (A map for
    whoever rebases the series onto another version; the answer never lets the apply go ahead.)"""
    patch, _ = series.chain(path)[0]
    verdicts = {
        "offset": "fit only at an offset",
        "fuzz": "fit only with fuzz",
        "applied": "look already applied",
    }
    try:
        udiff.apply_file(data, patch.file_patch(path), patch.diff)
    except udiff.HunkError as exc:
        return f"; {patch.id}'s hunks for it {verdicts.get(exc.kind, 'no longer fit')}"
    return f"; {patch.id}'s hunks for it would still fit exactly"


def _missing(
    series: Series, root: Path, path: str, patch_id: str, reference: Callable[[str], bytes | None] | None
) -> str:
    pristine = reference(path) if reference else None
    known = udiff.split_lines(pristine) if pristine else _expected_lines(series, path)
    found = tree.suggest_moved(root, path, series.distribution, known)
    message = f"missing target: {path} (patch {patch_id}) does not exist in {root}"
    if not found:
        return (
            f"{message}, and no file of a similar name exists under {series.distribution}/: was it removed?"
        )
    best, share = found[0]
    if share == 0:
        names = ", ".join(p for p, _ in found)
        return f"{message}; similar names: {names} (none holds the patch's context lines): was it moved?"
    others = f" (other candidates: {', '.join(p for p, _ in found[1:])})" if found[1:] else ""
    return (
        f"{message}; it seems to have moved to {best} ({share:.0%} of the lines the patch expects are there)"
        f"{others}: rebase the patch onto {best}"
    )


def apply(
    root: Path | str,
    series: Series,
    manifest_dir: Path | str | None = None,
    write_bytecode: bool = True,
    reference: Callable[[str], bytes | None] | None = None,
) -> ApplyResult:
    """Apply the whole series to `root` (the folder holding sglang/), or change nothing and raise.
    `reference(path)` may return the base version's pristine file: only used to explain a missing target."""
    started = time.perf_counter()
    root = tree.check_root(Path(root), series.distribution)
    folder = Path(manifest_dir) if manifest_dir else manifest.default_dir(root)
    installed = tree.installed_version(root, series.distribution)
    current: Contents = {path: tree.read(root, path) for path in series.touched_paths()}
    problems, already = classify(series, root, current, installed, reference)
    if problems:
        raise UserError(_join(problems))
    ids = [p.id for p in series.patches]
    if already:
        final_hashes = {p: sha256_bytes(d) for p, d in current.items() if d is not None}
        writes = _manifest_writes(folder, series, installed, final_hashes)
        note = ""
        if writes:
            _swap(writes, {path: _read_abs(path) for path in writes})
            note = "manifests written" if series.patches else "empty series, manifests written"
        verify(root, series, folder).raise_if_failed()
        status = "applied" if writes and not series.patches else "already applied"
        return ApplyResult(root, status, sorted(current), ids, installed, _since(started), note)
    final, _, problems = simulate(series, lambda path: current[path])
    if problems:
        raise UserError(_join(problems) + "; nothing was changed")
    final_hashes = {p: sha256_bytes(d) for p, d in final.items() if d is not None}
    writes: dict[Path, bytes] = {root / p: d for p, d in final.items() if d is not None and d != current[p]}
    originals: dict[Path, bytes | None] = {root / p: current[p] for p in final}
    manifest_writes = _manifest_writes(folder, series, installed, final_hashes)
    originals.update({path: _read_abs(path) for path in manifest_writes})
    writes.update(manifest_writes)
    _swap(writes, originals)
    if write_bytecode:
        _write_bytecode([root / p for p in final if p.endswith(".py")])
    # Compile and signatures ran on these exact bytes in simulate(); on disk, hashes and manifests.
    verify(root, series, folder, deep=False).raise_if_failed()
    return ApplyResult(root, "applied", sorted(final), ids, installed, _since(started))


def _since(started: float) -> float:
    return time.perf_counter() - started


def _join(problems: list[str]) -> str:
    return problems[0] if len(problems) == 1 else f"{len(problems)} problems: " + "; ".join(problems)


def _read_abs(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _manifest_writes(
    folder: Path, series: Series, installed: str | None, finals: dict[str, str]
) -> dict[Path, bytes]:
    wanted = {
        folder / manifest.SHA_NAME: manifest.sha_text(finals).encode(),
        folder / manifest.JSON_NAME: manifest.json_text(manifest.build(series, installed, finals)).encode(),
    }
    return {path: data for path, data in wanted.items() if _read_abs(path) != data}


def _read_only_error(where: str, exc: OSError) -> UserError:
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        reason = "read-only file system" if exc.errno == errno.EROFS else "permission denied"
        return UserError(
            f"read-only tree: cannot write {where} ({reason}); nothing was changed. Apply as the "
            "tree's owner (e.g. root in the Docker build step) or on a writable copy"
        )
    return UserError(f"cannot write {where}: {exc.strerror}; nothing was changed")


def _swap(writes: dict[Path, bytes], originals: dict[Path, bytes | None]) -> None:
    """Stage every file, then rename each over its target. On any failure, Ctrl-C included, remove the
    staged files and restore the targets already swapped (from the bytes read before), then re-raise."""
    staged: list[tuple[Path, Path]] = []
    made_dirs: list[Path] = []
    swapped: list[Path] = []

    def undo() -> None:
        for target in reversed(swapped):
            original = originals.get(target)
            if original is None:
                target.unlink(missing_ok=True)
            else:
                _restore(target, original)
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        for folder in reversed(made_dirs):
            _rmdir_quiet(folder)

    try:
        for target, data in writes.items():
            made_dirs.extend(_make_parents(target.parent))
            if not os.access(target.parent, os.W_OK):
                raise PermissionError(errno.EACCES, "permission denied", str(target.parent))
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".ddtree-stage", dir=target.parent)
            staged.append((Path(tmp), target))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
            os.chmod(tmp, mode)
    except OSError as exc:
        undo()
        raise _read_only_error(str(exc.filename or next(iter(writes)).parent), exc) from None
    except BaseException:
        undo()
        raise
    try:
        for tmp, target in staged:
            os.replace(tmp, target)
            swapped.append(target)
    except OSError as exc:
        undo()
        raise UserError(
            f"swapping patched files failed ({exc}); restored the files already swapped"
        ) from None
    except BaseException:
        undo()
        raise


def _restore(target: Path, data: bytes) -> None:
    from ddtree.fsutil import atomic_write

    atomic_write(target, data, mode=target.stat().st_mode & 0o7777)


def _make_parents(folder: Path) -> list[Path]:
    missing = []
    probe = folder
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        path.mkdir()
    return list(reversed(missing))


def _rmdir_quiet(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


def _write_bytecode(paths: list[Path]) -> None:
    """Refresh __pycache__ for the patched files so the image does not recompile them at every start.
    Hash-checked .pyc files: bound to the source bytes (not to mtimes, which image layers may rewrite),
    and `verify` can read the code from them instead of compiling it."""
    for path in paths:
        # a stale or missing .pyc only costs start-up time; the source was verified already
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            py_compile.compile(
                str(path),
                cfile=cache_from_source(str(path)),
                doraise=True,
                quiet=2,
                invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
            )
