"""patches/series.yaml: load, validate, and write back (only the tool writes hashes).

The format (others write entries against it; extend only with optional keys):

    base: {distribution: sglang, version: 0.5.13.post1}
    patches:
      - id: ddtree-core                 # unique kebab-case; list order = application order
        purpose: one line
        diff: 0001-ddtree-core.diff     # relative to the folder of series.yaml
        files:
          - path: sglang/srt/speculative/ddtree_utils.py   # relative to site-packages
            pre: new                    # or the sha256 of the file before this patch
            post: <sha256 after this patch>
            signatures: [build_ddtree]  # identifiers that must be present after applying

Validation here is static (no tree needed): keys and types, ids, paths, diff files that exist and parse and
touch exactly the listed files, and the hash chain: a patch's `pre` for a file must be the `post` of the
previous patch that touched that file (or `new` / the pristine hash when it is the first). A chain that
breaks means the series is out of order or a diff was edited without `refresh`.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, sha256_bytes
from ddtree.patchset import udiff
from ddtree.yamlfile import load_yaml

NEW = "new"
_ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_HEX_RE = re.compile(r"^[0-9a-f]{64}$")
_TOP_KEYS = {"base", "patches"}
_PATCH_KEYS = {"id", "purpose", "diff", "files"}
_FILE_KEYS = {"path", "pre", "post", "signatures"}
# Optional keys the tool accepts and keeps; anything else is a typo and is refused.
_OPTIONAL_PATCH_KEYS = {"upstream", "notes"}
_OPTIONAL_FILE_KEYS: set[str] = set()


@dataclass
class FileSpec:
    path: str
    pre: str | None  # "new", a sha256, or None while the tool has not written it yet
    post: str | None
    signatures: list[str] = field(default_factory=list)


@dataclass
class Patch:
    id: str
    purpose: str
    diff: str
    files: list[FileSpec]
    extra: dict[str, object] = field(default_factory=dict)
    diff_bytes: bytes = b""
    file_patches: list[udiff.FilePatch] = field(default_factory=list)

    def spec(self, path: str) -> FileSpec:
        return next(spec for spec in self.files if spec.path == path)

    def file_patch(self, path: str) -> udiff.FilePatch:
        return next(fp for fp in self.file_patches if fp.path == path)


@dataclass
class Series:
    path: Path
    distribution: str
    version: str
    patches: list[Patch]

    @property
    def folder(self) -> Path:
        return self.path.parent

    def digest(self) -> str:
        """sha256 over series.yaml and every diff, in order: names exactly what was applied."""
        parts = [self.path.read_bytes()] + [patch.diff_bytes for patch in self.patches]
        return sha256_bytes(b"\0".join(parts))

    def touched_paths(self) -> list[str]:
        """Every target file, in first-touched order."""
        seen: dict[str, None] = {}
        for patch in self.patches:
            for spec in patch.files:
                seen.setdefault(spec.path, None)
        return list(seen)

    def chain(self, path: str) -> list[tuple[Patch, FileSpec]]:
        """The patches that touch `path`, in order."""
        return [
            (patch, patch.spec(path)) for patch in self.patches if any(s.path == path for s in patch.files)
        ]

    def pristine_hash(self, path: str) -> str | None:
        """What the file hashes to before the series: None for a file the series creates."""
        first = self.chain(path)[0][1].pre
        return None if first == NEW else first

    def final_hash(self, path: str) -> str | None:
        return self.chain(path)[-1][1].post

    def get(self, patch_id: str) -> Patch:
        for patch in self.patches:
            if patch.id == patch_id:
                return patch
        known = ", ".join(p.id for p in self.patches) or "none"
        raise UserError(f"{self.path}: no patch named {patch_id!r} (patches: {known})")

    def index(self, patch_id: str) -> int:
        return self.patches.index(self.get(patch_id))


def _fail(where: str, message: str) -> UserError:
    return UserError(f"{where}: {message}")


def _check_keys(data: dict, required: set[str], optional: set[str], where: str) -> None:
    missing = sorted(required - set(data))
    unknown = sorted(set(data) - required - optional)
    if missing:
        raise _fail(where, f"missing key(s) {', '.join(missing)}")
    if unknown:
        allowed = ", ".join(sorted(required | optional))
        raise _fail(where, f"unknown key(s) {', '.join(unknown)} (allowed: {allowed})")


def _rel_path(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, "path must be a non-empty string")
    pure = PurePosixPath(value)
    if pure.is_absolute() or ".." in pure.parts or "\\" in value or str(pure) != value:
        raise _fail(where, f"path {value!r} must be a normalized relative path inside the tree (a/b/c.py)")
    return value


def _hash_field(value: object, where: str, allow_new: bool, strict: bool) -> str | None:
    if value is None and not strict:
        return None
    if allow_new and value == NEW:
        return NEW
    if isinstance(value, str) and _HEX_RE.match(value):
        return value
    expect = "'new' or a sha256 (64 lowercase hex)" if allow_new else "a sha256 (64 lowercase hex)"
    raise _fail(where, f"{value!r} is not {expect}; hashes are written by `ddtree-build patches refresh`")


def load(path: Path, strict: bool = True) -> Series:
    """Read and validate a series. strict=False lets hashes be missing (an entry not refreshed yet)."""
    path = Path(path)
    data = load_yaml(path, "series file not found (pass --series or create it)")
    if not isinstance(data, dict):
        raise _fail(str(path), "must be a mapping with keys base and patches")
    _check_keys(data, _TOP_KEYS, set(), str(path))
    base = data["base"]
    if not isinstance(base, dict):
        raise _fail(f"{path}: base", "must be a mapping {distribution: ..., version: ...}")
    _check_keys(base, {"distribution", "version"}, set(), f"{path}: base")
    distribution, version = str(base["distribution"]), str(base["version"])
    raw_patches = data["patches"] if data["patches"] is not None else []
    if not isinstance(raw_patches, list):
        raise _fail(f"{path}: patches", "must be a list")
    patches: list[Patch] = []
    seen_ids: set[str] = set()
    seen_diffs: set[str] = set()
    for number, raw in enumerate(raw_patches, 1):
        where = f"{path}: patches[{number}]"
        if not isinstance(raw, dict):
            raise _fail(where, "must be a mapping")
        _check_keys(raw, _PATCH_KEYS, _OPTIONAL_PATCH_KEYS, where)
        patch_id = raw["id"]
        if not isinstance(patch_id, str) or not _ID_RE.match(patch_id):
            raise _fail(where, f"id {patch_id!r} must be kebab-case (a-z, 0-9, single dashes)")
        where = f"{path}: patch {patch_id}"
        if patch_id in seen_ids:
            raise _fail(where, "id is used twice")
        seen_ids.add(patch_id)
        purpose = raw["purpose"]
        if not isinstance(purpose, str) or not purpose.strip() or "\n" in purpose.strip():
            raise _fail(where, "purpose must be one non-empty line")
        diff = _rel_path(raw["diff"], f"{where}: diff")
        if diff in seen_diffs:
            raise _fail(where, f"diff {diff} is used by two patches")
        seen_diffs.add(diff)
        files = _load_files(raw["files"], where, strict)
        patch = Patch(
            patch_id,
            purpose.strip(),
            diff,
            files,
            extra={k: raw[k] for k in _OPTIONAL_PATCH_KEYS if k in raw},
        )
        _load_diff(patch, path.parent, where)
        patches.append(patch)
    series = Series(path, distribution, version, patches)
    if strict:
        check_chain(series)
    return series


def _load_files(raw_files: object, where: str, strict: bool) -> list[FileSpec]:
    if not isinstance(raw_files, list) or not raw_files:
        raise _fail(where, "files must be a non-empty list")
    files: list[FileSpec] = []
    for raw in raw_files:
        if not isinstance(raw, dict):
            raise _fail(where, "each files entry must be a mapping")
        _check_keys(raw, {"path"}, _FILE_KEYS - {"path"} | _OPTIONAL_FILE_KEYS, where)
        file_path = _rel_path(raw["path"], f"{where}: files")
        fwhere = f"{where}: {file_path}"
        if any(spec.path == file_path for spec in files):
            raise _fail(fwhere, "listed twice")
        signatures = raw.get("signatures") or []
        if not isinstance(signatures, list) or not all(isinstance(s, str) and s.strip() for s in signatures):
            raise _fail(fwhere, "signatures must be a list of identifiers")
        for key in ("pre", "post"):
            if strict and key not in raw:
                raise _fail(fwhere, f"{key} is missing; run `ddtree-build patches refresh` to write hashes")
        files.append(
            FileSpec(
                file_path,
                _hash_field(raw.get("pre"), f"{fwhere}: pre", allow_new=True, strict=strict),
                _hash_field(raw.get("post"), f"{fwhere}: post", allow_new=False, strict=strict),
                [s.strip() for s in signatures],
            )
        )
    return files


def _load_diff(patch: Patch, folder: Path, where: str) -> None:
    diff_path = folder / patch.diff
    try:
        patch.diff_bytes = diff_path.read_bytes()
    except FileNotFoundError:
        raise _fail(where, f"diff file {diff_path} does not exist") from None
    patch.file_patches = udiff.parse(patch.diff_bytes, str(diff_path))
    in_diff = {fp.path for fp in patch.file_patches}
    listed = {spec.path for spec in patch.files}
    if in_diff != listed:
        extra = ", ".join(sorted(in_diff - listed)) or "-"
        absent = ", ".join(sorted(listed - in_diff)) or "-"
        raise _fail(
            where,
            f"files list and {patch.diff} disagree (only in diff: {extra}; only in series: {absent}); "
            "run `ddtree-build patches refresh` to rewrite the entry",
        )
    for fp in patch.file_patches:
        spec = patch.spec(fp.path)
        if spec.pre is not None and (spec.pre == NEW) != fp.is_new:
            state = "creates" if fp.is_new else "modifies"
            raise _fail(where, f"{patch.diff} {state} {fp.path} but series.yaml says pre: {spec.pre}")


def check_chain(series: Series) -> None:
    """Each file's pre must follow the previous patch's post: catches reordering and stale hashes."""
    for path in series.touched_paths():
        chain = series.chain(path)
        for k, (patch, spec) in enumerate(chain):
            later = [p.id for p, s in chain[k + 1 :] if s.post == spec.pre]
            if later:
                raise UserError(
                    f"{series.path}: series in the wrong order: {patch.id} expects {path} as {later[0]} "
                    f"leaves it, but {later[0]} comes after {patch.id}; move {patch.id} below {later[0]}"
                )
        for (prev, prev_spec), (patch, spec) in itertools.pairwise(chain):
            if spec.pre != prev_spec.post:
                pre = "new (creates the file)" if spec.pre == NEW else spec.pre
                raise UserError(
                    f"{series.path}: stale hash chain: {patch.id} expects {path} pre-image {pre}, but the "
                    f"previous patch touching it ({prev.id}) leaves {prev_spec.post}; run "
                    f"`ddtree-build patches refresh {prev.id}` (or edit and refresh {patch.id})"
                )


HEADER = (
    "# Ordered patch series: the order of `patches` is the order of application.\n"
    "# Written by `ddtree-build patches refresh` (hashes are only ever written by the tool);\n"
    "# ids, purposes and signatures may be edited by hand. See patches/README.md.\n"
)


def dump(series: Series) -> str:
    """Render the series in the fixed layout above (block style, one key per line, stable order)."""
    out = [HEADER, f"base: {{distribution: {series.distribution}, version: {_scalar(series.version)}}}\n"]
    if not series.patches:
        out.append("patches: []\n")
        return "".join(out)
    out.append("patches:\n")
    for patch in series.patches:
        out.append(f"  - id: {patch.id}\n")
        out.append(f"    purpose: {_scalar(patch.purpose)}\n")
        out.append(f"    diff: {_scalar(patch.diff)}\n")
        for key, value in patch.extra.items():
            out.append(f"    {key}: {_scalar(value)}\n")
        out.append("    files:\n")
        for spec in patch.files:
            out.append(f"      - path: {_scalar(spec.path)}\n")
            out.append(f"        pre: {spec.pre}\n")
            out.append(f"        post: {spec.post}\n")
            sigs = ", ".join(_scalar(s) for s in spec.signatures)
            out.append(f"        signatures: [{sigs}]\n")
    return "".join(out)


def _scalar(value: object) -> str:
    """A YAML scalar that reads back as the same string (quoted only when needed)."""
    text = str(value)
    dumped = yaml.safe_dump(text, default_flow_style=True, width=10_000).strip()
    if dumped.endswith("\n..."):
        dumped = dumped[: -len("\n...")]
    if dumped.endswith("..."):
        dumped = dumped[:-3].strip()
    # In a flow list, plain scalars may not contain ', ' or brackets: quote those.
    if dumped == text and any(ch in text for ch in ",[]{}#"):
        dumped = "'" + text.replace("'", "''") + "'"
    return dumped


def write(series: Series) -> None:
    """Write the series atomically, then read it back to prove it round-trips."""
    text = dump(series)
    loaded = yaml.safe_load(text)
    assert loaded["base"]["version"] == series.version, "series writer lost the base version"
    atomic_write(series.path, text, mode=0o644)  # mkstemp would leave 0600
