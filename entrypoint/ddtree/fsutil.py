"""File helpers shared by every command: nothing is ever half-written."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from ddtree.errors import UserError


def atomic_write(path: Path, data: str | bytes, mode: int | None = None) -> None:
    """Write to a temporary file beside `path`, fsync, then rename over it. A path that is a folder, or a
    folder that cannot be written (read-only mount, permissions, full disk), is one UserError naming it;
    the old file, if any, is untouched."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a folder; give a file name (for example {path / 'out'})")
    raw = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _write_error(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _write_error(path, exc) from exc
        raise


def _write_error(path: Path, exc: OSError) -> UserError:
    return UserError(f"{path}: cannot be written ({exc.strerror or exc}); choose a writable place")


def sha256_file(path: Path, chunk: int = 1 << 20, on_bytes: Callable[[int], None] | None = None) -> str:
    """Hex sha256 of a file, read sequentially into one reused buffer; `on_bytes(n)` after each chunk
    lets a caller draw progress (the weights hash reads hundreds of GB through here)."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while n := handle.readinto(buffer):
            digest.update(view[:n])
            if on_bytes is not None:
                on_bytes(n)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_text(path: Path, missing: str = "not found") -> str:
    """The UTF-8 text of `path`; absent, a folder, unreadable or not UTF-8 is one UserError naming it
    (`missing` follows "PATH: " when the file is absent: say what it is for)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise UserError(f"{path}: {missing}") from exc
    except IsADirectoryError as exc:
        raise UserError(f"{path}: is a folder, not a file; give the file's path") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); give the text file") from exc
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror}); check its permissions") from exc
