"""The weights lock, env/weights.yaml: which Kimi K2.6 and which DFlash drafter were measured.

    schema: 1
    models:
      target:                         # and `drafter`
        repo: moonshotai/Kimi-K2.6    # Hugging Face repository id
        revision: unknown             # the commit (40 hex digits), or `unknown` until a capture fills it
        gated: false                  # the Hub asks for a token (z-lab/Kimi-K2.6-DFlash is gated)
        files: unknown                # or a list of {path, size, sha256}; size/sha256 may be `unknown`
        source: ...                   # free text: where the values came from (capture host, date)

Hidden paths (any part starting with `.`: .gitattributes, the .cache/ that `weights fetch` keeps) are
neither locked nor compared. Every `unknown` is said by every command that reads it.

Comparison of a mounted folder with its entry (`compare`): the fast way always (every locked file
present with its size, no unlocked file, and the sha256 of every file under SMALL_FILE_BYTES: config,
index, tokenizer, chat template, custom code, which decide behaviour and cost nothing to hash);
`full=True` hashes the shards too (the existing thread-pool hasher, with its progress bar).

`lock_identity()` names the lock a run used ("sha256:" + the file's sha256), for receipts and the SBOM.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from ddtree import targets
from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, sha256_file
from ddtree.weights.layout import resolve_checkout
from ddtree.yamlfile import load_yaml

SCHEMA_VERSION = 1
LOCK_NAME = "weights.yaml"
ROLES = ("target", "drafter")
UNKNOWN = "unknown"
LOCK_ENV = "DDTREE_WEIGHTS_LOCK"
ALLOW_ENV = "DDTREE_ALLOW_UNLOCKED_WEIGHTS"
SMALL_FILE_BYTES = 64 * 1024 * 1024
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MODEL_KEYS = {"repo", "revision", "gated", "files", "source"}
_FILE_KEYS = {"path", "size", "sha256"}


@dataclass(frozen=True)
class LockedFile:
    path: str
    size: int | None  # None: unknown
    sha256: str | None


@dataclass(frozen=True)
class LockedModel:
    role: str
    repo: str
    revision: str | None
    gated: bool
    files: tuple[LockedFile, ...] | None  # None: the list itself is unknown
    source: str = ""

    def unknowns(self) -> list[str]:
        """What the lock does not pin yet, e.g. ["revision", "files"] or ["sha256 of 3 files"]."""
        missing = []
        if self.revision is None:
            missing.append("revision")
        if self.files is None:
            missing.append("files")
        else:
            for key in ("size", "sha256"):
                count = sum(getattr(f, key) is None for f in self.files)
                if count:
                    missing.append(f"{key} of {count} files")
        return missing

    def describe(self) -> str:
        return f"{self.repo}@{(self.revision or UNKNOWN)[:12]}"


@dataclass(frozen=True)
class WeightsLock:
    path: Path
    models: dict[str, LockedModel]
    identity: str


def default_lock_path(environ: Mapping[str, str] | None = None) -> Path:
    """$DDTREE_WEIGHTS_LOCK, else weights.yaml in the env/ folder the target profiles come from."""
    environ = os.environ if environ is None else environ
    if environ.get(LOCK_ENV):
        return Path(environ[LOCK_ENV])
    if environ.get("DDTREE_ENV_DIR"):
        return Path(environ["DDTREE_ENV_DIR"]) / LOCK_NAME
    return targets.default_targets_dir().parent / LOCK_NAME


def lock_identity(path: Path | None = None) -> str:
    """`sha256:HEX` of the lock file as installed (default: the image's /opt/ddtree/env/weights.yaml):
    what a receipt or the SBOM records to say which weights lock a run was checked against."""
    path = Path(path) if path is not None else default_lock_path()
    try:
        return "sha256:" + sha256_file(path)
    except OSError as exc:
        raise UserError(f"weights lock {path} cannot be read ({exc.strerror})") from exc


def _fail(source: Path | str, key: str, message: str) -> UserError:
    return UserError(f"{source}: {key}: {message}")


def _files(source: Path | str, key: str, data: Any) -> tuple[LockedFile, ...] | None:
    if data == UNKNOWN:
        return None
    if not isinstance(data, list):
        raise _fail(source, key, f"must be a list of {{path, size, sha256}} or {UNKNOWN!r}")
    files: list[LockedFile] = []
    seen: set[str] = set()
    for number, entry in enumerate(data):
        where = f"{key}[{number}]"
        if not isinstance(entry, dict):
            raise _fail(source, where, "must be a mapping {path, size, sha256}")
        unknown_keys = sorted(set(entry) - _FILE_KEYS)
        if unknown_keys:
            raise _fail(source, f"{where}.{unknown_keys[0]}", "unknown key; allowed: path, sha256, size")
        path = entry.get("path")
        if (
            not isinstance(path, str)
            or not path
            or path.startswith("/")
            or ".." in path.split("/")
            or any(part.startswith(".") for part in path.split("/"))
        ):
            raise _fail(
                source, f"{where}.path", f"must be a relative path inside the repository, got {path!r}"
            )
        if path in seen:
            raise _fail(source, f"{where}.path", f"{path!r} is listed twice")
        seen.add(path)
        size = entry.get("size")
        if size != UNKNOWN and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise _fail(source, f"{where}.size", f"must be a byte count or {UNKNOWN!r}, got {size!r}")
        digest = entry.get("sha256")
        if digest != UNKNOWN and (not isinstance(digest, str) or not _SHA256.match(digest)):
            raise _fail(source, f"{where}.sha256", f"must be 64 lower-case hex digits or {UNKNOWN!r}")
        files.append(
            LockedFile(
                path=path,
                size=None if size == UNKNOWN else size,
                sha256=None if digest == UNKNOWN else digest,
            )
        )
    return tuple(sorted(files, key=lambda f: f.path))


def _model(source: Path | str, role: str, data: Any) -> LockedModel:
    prefix = f"models.{role}"
    if not isinstance(data, dict):
        raise _fail(source, prefix, "must be a mapping with repo, revision, gated, files")
    unknown_keys = sorted(set(data) - _MODEL_KEYS)
    if unknown_keys:
        raise _fail(
            source, f"{prefix}.{unknown_keys[0]}", f"unknown key; allowed: {', '.join(sorted(_MODEL_KEYS))}"
        )
    repo = data.get("repo")
    if not isinstance(repo, str) or not _REPO.match(repo):
        raise _fail(source, f"{prefix}.repo", f"must be a Hugging Face id ORG/NAME, got {repo!r}")
    revision = data.get("revision")
    if revision != UNKNOWN and (not isinstance(revision, str) or not _COMMIT.match(revision)):
        raise _fail(
            source,
            f"{prefix}.revision",
            f"must be a commit hash (40 lower-case hex digits) or {UNKNOWN!r}, got {revision!r}",
        )
    gated = data.get("gated", False)
    if not isinstance(gated, bool):
        raise _fail(source, f"{prefix}.gated", f"must be true or false, got {gated!r}")
    return LockedModel(
        role=role,
        repo=repo,
        revision=None if revision == UNKNOWN else revision,
        gated=gated,
        files=_files(source, f"{prefix}.files", data.get("files", UNKNOWN)),
        source=str(data.get("source") or ""),
    )


def validate_lock(data: Any, source: Path | str) -> dict[str, LockedModel]:
    """Schema-check parsed YAML; every error is one line `FILE: KEY: problem`, as for target profiles."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping at the top level")
    unknown_keys = sorted(set(data) - {"schema", "models", "note"})
    if unknown_keys:
        raise _fail(source, unknown_keys[0], "unknown key; allowed: models, note, schema")
    if data.get("schema") != SCHEMA_VERSION:
        raise _fail(source, "schema", f"must be {SCHEMA_VERSION}, got {data.get('schema')!r}")
    models = data.get("models")
    if not isinstance(models, dict):
        raise _fail(source, "models", f"must be a mapping with {' and '.join(ROLES)}")
    for role in models:
        if role not in ROLES:
            raise _fail(source, f"models.{role}", f"unknown role; allowed: {', '.join(ROLES)}")
    for role in ROLES:
        if role not in models:
            raise _fail(source, f"models.{role}", "is required")
    return {role: _model(source, role, models[role]) for role in ROLES}


def load_lock(path: Path | None = None) -> WeightsLock:
    path = Path(path) if path is not None else default_lock_path()
    data = load_yaml(path, missing="weights lock not found (the image installs env/weights.yaml)")
    models = validate_lock(data, path)
    return WeightsLock(path=path, models=models, identity="sha256:" + sha256_file(path))


def lock_document(models: Mapping[str, LockedModel], note: str | None = None) -> dict[str, Any]:
    """The YAML document for `models` (unknown values written as `unknown`)."""
    doc: dict[str, Any] = {"schema": SCHEMA_VERSION}
    if note:
        doc["note"] = note
    doc["models"] = {}
    for role in ROLES:
        model = models[role]
        entry: dict[str, Any] = {
            "repo": model.repo,
            "revision": model.revision or UNKNOWN,
            "gated": model.gated,
        }
        if model.source:
            entry["source"] = model.source
        entry["files"] = (
            UNKNOWN
            if model.files is None
            else [
                {"path": f.path, "size": UNKNOWN if f.size is None else f.size, "sha256": f.sha256 or UNKNOWN}
                for f in model.files
            ]
        )
        doc["models"][role] = entry
    return doc


HEADER = (
    "# Weights lock: which target and drafter were measured (schema in entrypoint/ddtree/weights/lock.py).\n"
    "# Written by `ddtree-build capture --weights-target/--weights-drafter` (or `ddtree weights lock`);\n"
    "# `unknown` until a capture of the original serving host fills it in.\n"
)


def write_lock(path: Path, models: Mapping[str, LockedModel], note: str | None = None) -> None:
    """Validate what is about to be written, then write it atomically."""
    doc = lock_document(models, note)
    validate_lock(doc, path)
    atomic_write(Path(path), HEADER + yaml.safe_dump(doc, sort_keys=False, width=120), mode=0o644)


# ---------------------------------------------------------------------------------------------------
# Reading a folder: capture and comparison share it
# ---------------------------------------------------------------------------------------------------


def folder_files(folder: Path) -> dict[str, Path]:
    """Every regular file below `folder` (links followed, hidden paths skipped) by relative posix path."""
    found: dict[str, Path] = {}
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.startswith("."):
                continue
            path = Path(root) / name
            if path.is_file():
                found[path.relative_to(folder).as_posix()] = path
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class Comparison:
    """How a folder compares with its lock entry: `problems` are one-line findings, first one first."""

    role: str
    folder: Path
    model: LockedModel
    problems: list[str]
    compared_files: int
    hashed_bytes: int
    full: bool

    @property
    def ok(self) -> bool:
        return not self.problems


def compare(
    folder: Path,
    model: LockedModel,
    lock_path: Path,
    full: bool = False,
    workers: int | None = None,
    stream: TextIO | None = None,
) -> Comparison:
    """Compare `folder` (already resolved to the files) with the locked entry; see the module docstring.
    A lock entry with unknown files compares nothing (the caller says so)."""
    from ddtree.weights import hashes as weights_hash

    checkout = resolve_checkout(Path(folder), model.revision)
    root = checkout.path
    problems: list[str] = []
    where = f"the lock {lock_path} ({model.describe()})"
    if model.revision and checkout.revision and checkout.revision != model.revision:
        problems.append(
            f"{model.role} weights {root} are revision {checkout.revision}, {where} pins {model.revision}"
        )
    if model.files is None:
        return Comparison(model.role, root, model, problems, 0, 0, full)
    present = folder_files(root)
    locked = {f.path: f for f in model.files}
    for rel in sorted(set(locked) - set(present)):
        problems.append(f"{model.role} file {root / rel} is missing; {where} lists it")
    for rel in sorted(set(present) - set(locked)):
        problems.append(f"{model.role} file {root / rel} is not in {where}")
    to_hash: list[tuple[str, Path]] = []
    for rel, path in present.items():
        entry = locked.get(rel)
        if entry is None:
            continue
        size = path.stat().st_size
        if entry.size is not None and size != entry.size:
            problems.append(f"{model.role} file {path} is {size} bytes, {where} says {entry.size}")
            continue
        if entry.sha256 is not None and (full or size <= SMALL_FILE_BYTES):
            to_hash.append((rel, path))
    total = sum(p.stat().st_size for _, p in to_hash)
    progress = weights_hash.Progress(total, stream=stream, label=f"sha256 {model.role}") if full else None
    digests = weights_hash.hash_files([p for _, p in to_hash], workers=workers, progress=progress)
    for rel, path in to_hash:
        if digests[path] != locked[rel].sha256:
            problems.append(
                f"{model.role} file {path} has sha256 {digests[path][:16]}..., {where} says "
                f"{locked[rel].sha256[:16]}..."
            )  # type: ignore[index]
    return Comparison(model.role, root, model, problems, len(present), total, full)


def describe(comparison: Comparison) -> str:
    """One line: the first problem, how many more, and the two ways on."""
    more = len(comparison.problems) - 1
    extra = f" (and {more} more difference{'s' if more > 1 else ''})" if more > 0 else ""
    return (
        f"{comparison.problems[0]}{extra}: fetch the locked revision (ddtree weights fetch), "
        f"or set {ALLOW_ENV}=1 to run unlocked weights anyway"
    )


def enforce(
    role: str,
    folder: Path,
    environ: Mapping[str, str],
    log: Callable[[str], None] = print,
    full: bool = False,
    lock_path: Path | None = None,
) -> Comparison | None:
    """What serve and the self-check run: compare and log one line; raise on a difference unless
    DDTREE_ALLOW_UNLOCKED_WEIGHTS=1 (then say so and go on). No lock, or an entry with unknowns, is
    said and not fatal: the lock is filled by a capture of the original host."""
    path = Path(lock_path) if lock_path is not None else default_lock_path(environ)
    if not path.is_file():
        log(f"warn lock     no weights lock at {path}: {role} weights not compared")
        return None
    lock = load_lock(path)
    model = lock.models[role]
    comparison = compare(folder, model, path, full=full)
    unknown = model.unknowns()
    if comparison.problems:
        if environ.get(ALLOW_ENV) == "1":
            log(f"warn lock     {comparison.problems[0]}; running anyway ({ALLOW_ENV}=1)")
            return comparison
        raise UserError(describe(comparison))
    if unknown:
        log(
            f"warn lock     {role} {model.repo}: {', '.join(unknown)} unknown in {path} (filled by a capture "
            f"of the original host); compared {comparison.compared_files} files only as far as it pins"
        )
    else:
        how = "sha256 of every file" if full else "file list, sizes, sha256 of the small files"
        log(f"ok   lock     {role} matches {model.describe()} ({comparison.compared_files} files: {how})")
    return comparison
