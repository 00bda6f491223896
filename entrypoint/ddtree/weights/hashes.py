"""Full hash of a weights folder: sha256 of every shard on a thread pool, against a `sha256  path` manifest.

hashlib and file reads release the GIL, so threads use every core; a progress bar counts bytes.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, read_text, sha256_file
from ddtree.weights.folders import shard_paths

HASH_CHUNK = 8 * 1024 * 1024


class Progress:
    """A byte-counting progress bar: redraws in place on a terminal, prints every 10% otherwise."""

    def __init__(self, total: int, stream: TextIO | None = None, label: str = "sha256") -> None:
        self.total = max(total, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.done = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._last_draw = 0.0
        self._last_decile = -1
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.done += nbytes
            now = time.monotonic()
            if self._tty:
                if now - self._last_draw >= 0.2 or self.done >= self.total:
                    self._last_draw = now
                    self._draw(end="")
            else:
                decile = self.done * 10 // self.total
                if decile > self._last_decile:
                    self._last_decile = decile
                    self._draw(end="\n")

    def _draw(self, end: str) -> None:
        fraction = min(self.done / self.total, 1.0)
        elapsed = max(time.monotonic() - self.started, 1e-9)
        bar = "#" * int(fraction * 30)
        rate = self.done / elapsed / 1e9
        prefix = "\r" if self._tty else ""
        self.stream.write(
            f"{prefix}{self.label} [{bar:<30}] {fraction:6.1%} "
            f"{self.done / 1e9:8.2f}/{self.total / 1e9:.2f} GB "
            f"{rate:5.2f} GB/s{end}"
        )
        self.stream.flush()

    def close(self) -> None:
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()


def hash_files(
    paths: list[Path],
    workers: int | None = None,
    progress: Progress | None = None,
) -> dict[Path, str]:
    """sha256 of every file on a thread pool; biggest files first so the pool drains evenly."""
    workers = workers or os.cpu_count() or 1
    ordered = sorted(paths, key=lambda p: p.stat().st_size, reverse=True)
    on_bytes = progress.advance if progress is not None else None
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(ordered) or 1))) as pool:
        digests = list(pool.map(lambda p: sha256_file(p, HASH_CHUNK, on_bytes), ordered))
    if progress is not None:
        progress.close()
    return dict(zip(ordered, digests, strict=True))


def read_manifest(path: Path) -> dict[str, str]:
    """`sha256  relative/path` lines (sha256sum's format; `*` binary marker and `./` accepted)."""
    text = read_text(path, "not found; check --manifest (the weights manifest)")
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        digest = parts[0].lower()
        if len(parts) != 2 or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise UserError(f"weights manifest {path}:{number} is not `sha256  path`: {line.strip()[:80]!r}")
        name = parts[1].strip().lstrip("*")
        name = name.removeprefix("./")
        entries[name] = digest
    return entries


@dataclass(frozen=True)
class HashReport:
    """Digests of every shard, and how they compare with a manifest (empty lists when none was given)."""

    digests: dict[str, str]
    mismatched: list[str]
    unlisted: list[str]
    absent: list[str]
    seconds: float
    total_bytes: int

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.unlisted or self.absent)


def full_hash(
    folder: Path,
    manifest: Path | None = None,
    workers: int | None = None,
    stream: TextIO | None = None,
) -> HashReport:
    """Hash every shard of a weights folder and compare with the manifest's lines for those shards."""
    # The manifest is read before any shard: a missing or bad one fails in a second, not after hours.
    expected = read_manifest(manifest) if manifest is not None else None
    paths = shard_paths(folder)
    total = sum(p.stat().st_size for p in paths)
    started = time.monotonic()
    digests_by_path = hash_files(paths, workers=workers, progress=Progress(total, stream=stream))
    seconds = time.monotonic() - started
    digests = {str(p.relative_to(folder)): d for p, d in sorted(digests_by_path.items())}
    mismatched: list[str] = []
    unlisted: list[str] = []
    absent: list[str] = []
    if expected is not None:
        for name, digest in digests.items():
            if name not in expected:
                unlisted.append(name)
            elif expected[name] != digest:
                mismatched.append(name)
        absent = sorted(n for n in expected if n.endswith(".safetensors") and n not in digests)
    return HashReport(
        digests=digests,
        mismatched=mismatched,
        unlisted=unlisted,
        absent=absent,
        seconds=seconds,
        total_bytes=total,
    )


def describe_hash_failure(report: HashReport, folder: Path, manifest: Path) -> str:
    """One line naming the first bad file and the counts."""
    if report.mismatched:
        first = report.mismatched[0]
        return (
            f"shard {folder / first} does not match {manifest} ({len(report.mismatched)} mismatched): "
            "the weights differ from the measured ones, download them again"
        )
    if report.unlisted:
        first = report.unlisted[0]
        return (
            f"shard {folder / first} is not in {manifest} ({len(report.unlisted)} unlisted): wrong manifest?"
        )
    return (
        f"{manifest} lists {report.absent[0]} which is not in {folder} ({len(report.absent)} absent): "
        "finish the download"
    )


def manifest_text(digests: dict[str, str]) -> str:
    """sha256sum's format, sorted by path: `sha256sum -c` checks it from inside the folder."""
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(digests.items()))


def require_writable(path: Path, what: str) -> None:
    """Fail now, before hours of hashing, when `path` cannot be written (a read-only weights mount)."""
    folder = Path(path).parent
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{Path(path).name}.", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UserError(
            f"{what} {path} cannot be written ({exc.strerror}): the folder {folder} is read-only or absent "
            "(weights are mounted read-only); write it elsewhere, e.g. /tmp/weights.sha256"
        ) from exc


def write_manifest(digests: dict[str, str], path: Path) -> None:
    try:
        atomic_write(Path(path), manifest_text(digests))
    except UserError as exc:  # atomic_write's one line names the path; say that it is the manifest
        raise UserError(f"manifest {exc}", exit_code=exc.exit_code) from exc
