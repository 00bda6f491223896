"""Whole-tree identity: every installed file against its wheel's RECORD, and one digest over the tree.

The patch check proves the patched SGLang files; this proves everything else in site-packages too. Each
`*.dist-info/RECORD` lists its distribution's files with `sha256=<urlsafe base64>` hashes (the wheel's, or
pip's for the .pyc it compiled at install). A file is then:

    ok        its bytes hash to what RECORD (or, for a patched file, the patch manifest) says; a row without
              a hash (RECORD itself, the .pyc pip compiled at install) only has to be there
    changed   they do not
    missing   RECORD or the manifest lists it and it is not there
    extra     it is in site-packages and nothing lists it
    patched   listed in the patch manifest (.ddtree-patchset/manifest.json) and matching it; the .pyc
              `apply` wrote for it must be a hash-checked one bound to the patched source bytes

Files that legitimately belong to no RECORD (the patch manifest folder, ddtree.pth) are listed in
OWN_FILES. The tree digest is sha256 over sorted `path<TAB>sha256` lines of every file seen (site-packages
relative paths; the ddtree package under `ddtree-lib/`), so any edit anywhere changes it. The image build
writes it to /opt/ddtree/tree-identity.json and the label io.ddtree.tree.sha256; `ddtree selfcheck
--offline --full` recomputes and compares it.

Hashing runs in one forked process per usable CPU, on batches sorted largest first so the big shared objects
start early and the workers finish together. The build step's CLI:
`python -m ddtree.receipts.tree_identity write`.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.util
import json
import multiprocessing
import os
import sys
import sysconfig
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ddtree
from ddtree.errors import UserError
from ddtree.fsutil import atomic_write
from ddtree.jsontext import load_file

IDENTITY_FILE = Path("/opt/ddtree/tree-identity.json")
LABEL = "io.ddtree.tree.sha256"
FORMAT = 1
PATCH_DIR = ".ddtree-patchset"
# In site-packages but in no RECORD, and put there on purpose: the patch manifest and the ddtree path file.
OWN_FILES = ("ddtree.pth",)
OWN_DIRS = (PATCH_DIR,)
LIB_PREFIX = "ddtree-lib/"
CHUNK = 1 << 22  # files above this are hashed through a buffer, the rest read whole
BATCH_BYTES = 256 << 20
BATCH_FILES = 2000
SYMLINK = -1  # the size hash_path is given for a symbolic link


@dataclass(frozen=True)
class Expected:
    """What one listing says about a file: its sha256 (hex) or None (RECORD's own row), and who says it."""

    sha256: str | None
    owner: str


@dataclass
class TreeReport:
    root: str
    files: int = 0
    bytes: int = 0
    distributions: int = 0
    patched: int = 0
    # RECORD rows without a hash (RECORD itself, the .pyc pip compiled): present, bytes covered by the digest
    unhashed: int = 0
    # .pyc whose bytes differ from RECORD's (a wheel that ships bytecode pip then recompiled) but whose header
    # binds them to their verified source, as the interpreter checks before using them
    recompiled: int = 0
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    digest: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.extra)

    def problems(self) -> list[str]:
        """One line per finding, the kind first."""
        return (
            [f"changed {p}" for p in self.changed]
            + [f"missing {p}" for p in self.missing]
            + [f"extra {p}" for p in self.extra]
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "root": self.root,
            "digest": self.digest,
            "files": self.files,
            "bytes": self.bytes,
            "distributions": self.distributions,
            "patched": self.patched,
            "unhashed": self.unhashed,
            "recompiled": self.recompiled,
            "changed": self.changed,
            "missing": self.missing,
            "extra": self.extra,
            "seconds": round(self.seconds, 2),
        }


def record_hash_to_hex(value: str) -> str | None:
    """RECORD's `sha256=<urlsafe base64, no padding>` as hex; None for an empty field or another algorithm."""
    algorithm, _, encoded = value.partition("=")
    if algorithm != "sha256" or not encoded:
        return None
    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).hex()


def hex_to_record_hash(digest: str) -> str:
    return "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(digest)).decode().rstrip("=")


def _relative(root: Path, path: str) -> str:
    """A RECORD path as a normalised path relative to site-packages (may start with ../ for scripts)."""
    return (
        os.path.normpath(path).replace(os.sep, "/")
        if not os.path.isabs(path)
        else os.path.relpath(path, root)
    )


def read_records(root: Path) -> tuple[dict[str, list[Expected]], int]:
    """Every RECORD under `root` merged: relative path -> what each listing says (two distributions may ship
    the same path, and one RECORD may list a .pyc twice: from the wheel, and as pip compiled it); and the
    number of distributions."""
    expected: dict[str, list[Expected]] = {}
    records = sorted(root.glob("*.dist-info/RECORD"))
    for record in records:
        owner = record.parent.name
        try:
            rows = list(csv.reader(record.read_text(encoding="utf-8").splitlines()))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise UserError(
                f"{record}: unreadable RECORD ({exc}); reinstall {owner} (rebuild the image)"
            ) from exc
        for row in rows:
            if not row or not row[0]:
                continue
            digest = record_hash_to_hex(row[1]) if len(row) > 1 else None
            expected.setdefault(_relative(root, row[0]), []).append(Expected(digest, owner))
    return expected, len(records)


def read_patch_manifest(root: Path) -> dict[str, str]:
    """Patched file -> sha256 hex from <root>/.ddtree-patchset/manifest.json ({}: unpatched)."""
    path = root / PATCH_DIR / "manifest.json"
    if not path.is_file():
        return {}
    data = load_file(path, "a damaged patch manifest: rebuild the image")
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise UserError(f"{path}: damaged patch manifest (no files map); rebuild the image")
    return {str(k): str(v) for k, v in files.items()}


def walk_files(folder: Path, prefix: str = "") -> Iterator[tuple[str, os.DirEntry[str]]]:
    """(relative path, entry) for every file and symlink under `folder`, without following links."""
    stack = [(folder, prefix)]
    while stack:
        current, rel = stack.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                name = f"{rel}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    stack.append((Path(entry.path), f"{name}/"))
                else:
                    yield name, entry


def hash_path(path: str, size: int = 0, buffer: bytearray | None = None) -> str:
    """sha256 hex of a file's bytes; of the link text for a symlink (size SYMLINK: never followed out of
    the tree). A small file takes one open, one read of its known size and one close (on ~100k files the
    system calls cost as much as the hashing); a large one streams through `buffer`."""
    if size == SYMLINK:
        return hashlib.sha256(b"symlink:" + os.readlink(path).encode()).hexdigest()
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if buffer is None:
            data = os.read(fd, size + 1)
            digest.update(data)
            if len(data) == size:
                return digest.hexdigest()
            while data:  # the file is not the size the walk saw: read to the end
                data = os.read(fd, CHUNK)
                digest.update(data)
            return digest.hexdigest()
        view = memoryview(buffer)
        while n := os.readv(fd, [buffer]):
            digest.update(view[:n])
        return digest.hexdigest()
    finally:
        os.close(fd)


def _hash_batch(batch: list[tuple[str, int]]) -> list[str]:
    """One worker's share: small files read whole (one read, one update), large ones through a buffer."""
    buffer = bytearray(CHUNK)
    return [hash_path(path, size, buffer if size > CHUNK else None) for path, size in batch]


def _batches(paths: list[tuple[str, int]], workers: int) -> list[list[tuple[str, int]]]:
    """Largest first, cut into batches of about BATCH_BYTES or BATCH_FILES, so the workers finish together."""
    ordered = sorted(paths, key=lambda item: -item[1])
    batches: list[list[tuple[str, int]]] = [[]]
    load = 0
    for item in ordered:
        if batches[-1] and (load >= BATCH_BYTES or len(batches[-1]) >= BATCH_FILES):
            batches.append([])
            load = 0
        batches[-1].append(item)
        load += item[1]
    return batches


def hash_many(paths: list[tuple[str, int]], workers: int) -> dict[str, str]:
    """path -> sha256 for (path, size) pairs over `workers` processes (forked: the per-file Python work of
    ~100k files needs more than one core as much as the hashing does)."""
    batches = _batches(paths, workers)
    if workers <= 1 or len(paths) < 2 * BATCH_FILES or "fork" not in multiprocessing.get_all_start_methods():
        results = [_hash_batch(batch) for batch in batches]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(_hash_batch, batches))
    return {
        path: digest
        for batch, digests in zip(batches, results, strict=True)
        for (path, _), digest in zip(batch, digests, strict=True)
    }


def usable_cpus() -> int:
    """The CPUs this process may run on (a container's cpuset, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _patched_pyc_ok(root: Path, rel: str, patched: dict[str, str]) -> bool | None:
    """For a __pycache__ .pyc of a patched source: True when it is hash-checked against that source's
    current bytes (what `apply` writes), False when not; None when its source is not a patched file."""
    folder, _, name = rel.rpartition("/")
    if not folder.endswith("__pycache__") or not name.endswith(".pyc"):
        return None
    source = f"{folder[: -len('__pycache__')]}{name.split('.', 1)[0]}.py"
    if source not in patched:
        return None
    data = (root / rel).read_bytes()[:16]
    flags = int.from_bytes(data[4:8], "little") if len(data) == 16 else 0
    if not flags & 0b1:
        return False
    return data[8:16] == importlib.util.source_hash((root / source).read_bytes())


def _bytecode_of_source(root: Path, rel: str) -> bool:
    """A __pycache__ .pyc of this interpreter bound to its source's current bytes (hash-checked) or to its
    mtime and size (timestamp-checked): the bytecode the interpreter would accept for that source."""
    folder, _, name = rel.rpartition("/")
    if not folder.endswith("__pycache__"):
        return False
    source = root / f"{folder[: -len('__pycache__')]}{name.split('.', 1)[0]}.py"
    try:
        header = (root / rel).read_bytes()[:16]
        stat = source.stat()
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(header[4:8], "little") & 0b1:
        return header[8:16] == importlib.util.source_hash(source.read_bytes())
    mtime, size = int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")
    return mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF


def _owned(rel: str) -> bool:
    return rel in OWN_FILES or any(rel.startswith(f"{d}/") for d in OWN_DIRS)


def scan(root: Path, extra_roots: Iterable[tuple[str, Path]] = (), workers: int | None = None) -> TreeReport:
    """Check every file under `root` (site-packages) against RECORD and the patch manifest, and digest it.

    `extra_roots` are (prefix, folder) pairs digested but not checked (no RECORD: the ddtree package).
    """
    start = time.monotonic()
    root = Path(root)
    extra_roots = list(extra_roots)
    if not root.is_dir():
        raise UserError(f"{root}: no such folder; give the site-packages of the image's interpreter")
    expected, distributions = read_records(root)
    patched = read_patch_manifest(root)
    seen: dict[str, os.DirEntry[str] | Path] = dict(walk_files(root))
    for rel in expected:  # RECORD rows outside site-packages (scripts in bin/): checked where they are
        if rel.startswith("../") and (root / rel).exists():
            seen[rel] = root / rel
    for prefix, folder in extra_roots:
        if Path(folder).is_dir():
            seen.update(walk_files(Path(folder), prefix))
    sizes = []
    locations: dict[str, str] = {}
    for rel, entry in seen.items():
        path = entry.path if isinstance(entry, os.DirEntry) else str(entry)
        if entry.is_symlink():
            size = SYMLINK
        else:
            size = (
                entry.stat(follow_symlinks=False).st_size
                if isinstance(entry, os.DirEntry)
                else entry.lstat().st_size
            )
        locations[rel] = path
        sizes.append((path, size))
    hashes = hash_many(sizes, workers or usable_cpus())
    prefixes = [prefix for prefix, _ in extra_roots]
    report = TreeReport(root=str(root), distributions=distributions)
    lines = []
    for rel in sorted(locations):
        digest = hashes[locations[rel]]
        lines.append(f"{rel}\t{digest}\n")
        report.files += 1
        if any(rel.startswith(prefix) for prefix in prefixes):
            continue
        if rel in patched:
            report.patched += 1
            if digest != patched[rel]:
                report.changed.append(f"{rel} (patched file; the patch manifest says {patched[rel][:12]})")
            continue
        pyc = _patched_pyc_ok(root, rel, patched)
        if pyc is not None:
            if not pyc:
                report.changed.append(f"{rel} (bytecode not bound to the patched source)")
            continue
        wants = expected.get(rel)
        if not wants:
            if not _owned(rel):
                report.extra.append(rel)
        elif any(want.sha256 == digest for want in wants):
            continue
        elif all(want.sha256 is None for want in wants):
            report.unhashed += 1
        elif rel.endswith(".pyc") and _bytecode_of_source(root, rel):
            report.recompiled += 1
        elif any(want.sha256 is None for want in wants):
            report.unhashed += 1
        else:
            report.changed.append(f"{rel} ({', '.join(sorted({want.owner for want in wants}))})")
    report.bytes = sum(max(size, 0) for _, size in sizes)
    report.missing = sorted(
        f"{rel} ({', '.join(sorted({w.owner for w in wants}))})"
        for rel, wants in expected.items()
        if rel not in locations and rel not in patched
    ) + sorted(f"{rel} (patch manifest)" for rel in patched if rel not in locations)
    report.digest = hashlib.sha256("".join(lines).encode()).hexdigest()
    report.seconds = time.monotonic() - start
    return report


def image_roots() -> tuple[Path, list[tuple[str, Path]]]:
    """This interpreter's site-packages and the ddtree package's folder (the image's /opt/ddtree/lib)."""
    site = Path(sysconfig.get_paths()["purelib"])
    lib = Path(ddtree.__file__).resolve().parent
    return site, [(LIB_PREFIX, lib)]


def read_identity(path: Path = IDENTITY_FILE) -> dict[str, Any] | None:
    """The identity the build wrote, or None when there is none (not in the image)."""
    if not path.is_file():
        return None
    data = load_file(path, "rebuild the image")
    if not isinstance(data, dict) or not data.get("digest"):
        raise UserError(f"{path}: no digest in it; rebuild the image")
    return data


# ---------------------------------------------------------------- build-step CLI


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ddtree.receipts.tree_identity", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "action", choices=("write", "check"), help="write: scan and store; check: scan and report"
    )
    parser.add_argument("--root", type=Path, help="site-packages (default: this interpreter's)")
    parser.add_argument(
        "--out", type=Path, default=IDENTITY_FILE, help=f"write: where (default {IDENTITY_FILE})"
    )
    args = parser.parse_args(argv)
    site, extra = image_roots()
    try:
        report = scan(args.root or site, extra)
    except UserError as exc:
        print(f"tree_identity: error: {exc}", file=sys.stderr)
        return exc.exit_code
    for line in report.problems()[:20]:
        print(f"tree_identity: {line}", file=sys.stderr)
    summary = (
        f"{report.files} files, {report.bytes / 1e9:.2f} GB, {report.distributions} distributions, "
        f"{report.patched} patched; digest {report.digest} ({report.seconds:.1f} s)"
    )
    if not report.ok:
        print(f"tree_identity: {len(report.problems())} problem(s); {summary}", file=sys.stderr)
        return 1
    if args.action == "write":
        # 0644: the server runs as the unprivileged user 10001, and selfcheck --full reads it (mkstemp: 0600)
        atomic_write(args.out, json.dumps(report.to_json(), indent=2) + "\n", mode=0o644)
    print(f"tree_identity: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
