"""File helpers shared by every command: nothing is ever half-written."""

from __future__ import annotations

import hashlib
import os
import stat
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


def require_regular_file(path: Path, what: str = "") -> None:
    """Refuse what is not a regular file before opening it: a FIFO or a device would block a reader
    forever (a config.json that is a pipe hangs `open`), a folder is not a file. Absent is left to the
    caller (it knows what the file is for)."""
    label = f"{what} {path}".strip()
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UserError(f"{label}: cannot be read ({exc.strerror}); check its permissions") from exc
    if stat.S_ISDIR(mode):
        raise UserError(f"{label}: is a folder, not a file; give the file's path")
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise UserError(f"{label}: is {kind}, not a regular file; give the file itself")


def decode_text(raw: bytes, label: str) -> str:
    """UTF-8 text of bytes read from `label` (a file, a command's output); one UserError naming it."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{label}: not UTF-8 text (byte {exc.start}); give the text file") from exc


def read_text(path: Path, missing: str = "not found") -> str:
    """The UTF-8 text of `path`; absent, a folder, a FIFO or device, unreadable or not UTF-8 is one
    UserError naming it (`missing` follows "PATH: " when the file is absent: say what it is for)."""
    require_regular_file(Path(path))
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise UserError(f"{path}: {missing}") from exc
    except IsADirectoryError as exc:
        raise UserError(f"{path}: is a folder, not a file; give the file's path") from exc
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror}); check its permissions") from exc
    return decode_text(raw, str(path))
