"""`ddtree-build import PKG`: turn a reproduction package (hand-made or captured) into env/ and patches/.

Order: the manifest is checked first (missing, extra and mismatched files are all listed), nothing is read
before that. Then, into a staging folder:

    env/pip-freeze.txt        -> env/freeze.txt (strict pin rules; `# source: imported`)
    env/*.txt (OS/CUDA/GPUs)  -> env/system-captured.yaml (+ the raw texts under env/imported/)
    env/weights.yaml          -> env/weights.yaml (the weights lock, schema-checked; capture --weights-*)
    patches/diffs/*.diff      -> patches/series.yaml + the diffs, hashes computed by the patch engine
                                 against the pristine wheel; patches/full/ must equal pristine + diffs
    services/*.service        -> env/targets/NAME.yaml: ExecStart split with shlex, known flags mapped
                                 (host model paths -> /models/...), unknown flags kept verbatim
                                 (extra_args), Environment= merged into the profile's environment
    bench/results/*.json      -> env/reference/imported-results.yaml (the reference schema)
    drafter/config.json, bench scripts, REPRODUCE.md -> env/imported/ (provenance)

The output folder is given by the user (`--out DIR`, new or empty); the checkout's env/ and patches/ are
written only with `--force` and no --out, so a test never overwrites the real ones.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import yaml
from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, sha256_bytes, sha256_file
from ddtree.lockfile import Pin, parse_pins
from ddtree.os_release import parse_os_release
from ddtree.reference import validate_reference
from ddtree.targets import validate_target
from ddtree.yamlfile import load_yaml

from ddtree_build import paths, pristine
from ddtree_build.freeze import render_freeze
from ddtree_build.package_manifest import check_manifest, copy_listed

if TYPE_CHECKING:
    from ddtree.patchset import udiff
    from ddtree.patchset.series import Series

# The patch engine's series and diff modules are imported where they are used: every `ddtree-build` start
# (--help, --version) imports this module to register `import`.

DISTRIBUTION = "sglang"
# SGLang flags the target schema knows, with their value type. Aliases map to the canonical name.
KNOWN_FLAGS: dict[str, type] = {
    "model-path": str,
    "speculative-draft-model-path": str,
    "trust-remote-code": bool,
    "tool-call-parser": str,
    "reasoning-parser": str,
    "tp": int,
    "speculative-algorithm": str,
    "speculative-num-draft-tokens": int,
    "speculative-ddtree-budget": int,
    "speculative-ddtree-topk": int,
    "speculative-draft-window-size": int,
    "attention-backend": str,
    "disable-custom-all-reduce": bool,
    "mem-fraction-static": float,
    "cuda-graph-max-bs": int,
    "context-length": int,
    "disable-cuda-graph": bool,
    "host": str,
    "port": int,
}
FLAG_ALIASES = {
    "tp-size": "tp",
    "tensor-parallel-size": "tp",
    "model": "model-path",
    "speculative-dflash-block-size": "speculative-num-draft-tokens",
    "speculative-dflash-draft-window-size": "speculative-draft-window-size",
}
# Host paths of the weights become the container's mount points.
CONTAINER_PATHS = {"model-path": "/models/target", "speculative-draft-model-path": "/models/drafter"}
GPU_TARGETS = (("RTX PRO 6000", "pro6000"), ("B300", "b300"))
_DEF = re.compile(rb"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")


@dataclass
class ImportReport:
    written: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # things in the package not trusted (printed first)


# ---- the systemd unit -> target server arguments -------------------------------------------------------


def _unit_lines(text: str) -> list[str]:
    """Logical lines of a unit file (backslash continuations joined, comments dropped)."""
    out, buffer = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not buffer and line.lstrip().startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        out.append((buffer + line).strip())
        buffer = ""
    if buffer:
        out.append(buffer.strip())
    return out


def read_unit(text: str, source: str) -> tuple[list[str], dict[str, str]]:
    """(ExecStart argv, Environment= variables) of a unit's [Service] section."""
    section, exec_start, environment = "", None, {}
    for line in _unit_lines(text):
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if not sep or section != "Service":
            continue
        key = key.strip()
        if key == "ExecStart" and value.strip():
            exec_start = value.strip().lstrip("-@+!:")
        elif key == "Environment":
            for item in _split(value, source):
                name, eq, val = item.partition("=")
                if not eq:
                    raise UserError(f"{source}: Environment entry {item!r} is not NAME=VALUE")
                environment[name] = val
    if exec_start is None:
        raise UserError(f"{source}: no ExecStart= in [Service]; the unit must launch sglang")
    return _split(exec_start, source), environment


def _split(value: str, source: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise UserError(f"{source}: cannot split {value[:60]!r} ({exc}); fix its quoting") from exc


def _convert(flag: str, values: list[str], source: str) -> Any:
    kind = KNOWN_FLAGS[flag]
    if kind is bool:
        if values:
            raise UserError(f"{source}: --{flag} takes no value, got {' '.join(values)!r}")
        return True
    if len(values) != 1:
        raise UserError(f"{source}: --{flag} needs one value, got {len(values)}")
    try:
        return kind(values[0])
    except ValueError as exc:
        raise UserError(f"{source}: --{flag} {values[0]!r} is not a {kind.__name__}") from exc


def map_exec_start(
    argv: list[str], source: str
) -> tuple[list[str], dict[str, Any], list[str], dict[str, str]]:
    """(launcher, server_args, extra_args, host paths) from ExecStart's argv."""
    first = next((i for i, tok in enumerate(argv) if tok.startswith("--")), len(argv))
    launcher = argv[:first]
    if not any("sglang" in tok or "launch_server" in tok for tok in launcher):
        raise UserError(f"{source}: ExecStart does not launch sglang ({' '.join(launcher)[:80]!r})")
    args: dict[str, Any] = {}
    extra: list[str] = []
    host_paths: dict[str, str] = {}
    i = first
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise UserError(f"{source}: stray argument {token!r} in ExecStart; expected a --flag")
        name, eq, inline = token[2:].partition("=")
        values = [inline] if eq else []
        j = i + 1
        while not eq and j < len(argv) and not argv[j].startswith("--"):
            values.append(argv[j])
            j += 1
        flag = FLAG_ALIASES.get(name, name)
        if flag in KNOWN_FLAGS:
            value = _convert(flag, values, source)
            if flag in CONTAINER_PATHS:
                host_paths[flag] = value
                value = CONTAINER_PATHS[flag]
            args[flag] = value
        else:
            extra.extend(argv[i:j])
        i = j
    return launcher, args, extra, host_paths


def import_target(
    unit_path: Path, base_target: Path, out_path: Path, pkg: Path
) -> tuple[dict[str, Any], list[str]]:
    """The target profile data for a unit, on top of a base profile; validated before it is returned."""
    rel = unit_path.relative_to(pkg).as_posix()
    argv, unit_env = read_unit(unit_path.read_text(encoding="utf-8"), rel)
    launcher, args, extra, host_paths = map_exec_start(argv, rel)
    data = load_yaml(base_target)
    data["name"] = out_path.stem
    data["server_args"] = args
    data["environment"] = {**(data.get("environment") or {}), **unit_env}
    if extra:
        data["extra_args"] = extra
    else:
        data.pop("extra_args", None)
    data["origin"] = {
        "imported_from": f"{pkg.name}/{rel}",
        "base_profile": base_target.name,
        "launcher": " ".join(launcher),
        "host_paths": host_paths,
    }
    validate_target(data, out_path)
    notes = [f"{rel}: kept verbatim (unknown to the profile schema): {' '.join(extra)}"] if extra else []
    return data, notes


# ---- freeze, system facts, results --------------------------------------------------------------------


def _find_freeze(pkg: Path) -> Path:
    for pattern in ("env/pip-freeze.txt", "env/*freeze*.txt", "env/requirements*.txt"):
        found = sorted(pkg.glob(pattern))
        if found:
            return found[0]
    raise UserError(f"{pkg}/env: no pip freeze (env/pip-freeze.txt); the package must record its environment")


def _python_version(pkg: Path) -> str:
    text = (pkg / "env" / "python.txt").read_text() if (pkg / "env" / "python.txt").is_file() else ""
    match = re.search(r"^version:\s*(\S+)", text, re.M)
    return match.group(1) if match else "unknown (not recorded in the package)"


def import_freeze(pkg: Path) -> tuple[list[Pin], str]:
    path = _find_freeze(pkg)
    pins = parse_pins(path.read_text(encoding="utf-8"), str(path))
    if not pins:
        raise UserError(f"{path}: no pins")
    header = {
        "source": f"imported from {pkg.name}/{path.relative_to(pkg).as_posix()} by ddtree-build import",
        "freeze-file-sha256": sha256_file(path),
        "python": _python_version(pkg),
        "platform": "linux x86_64 (the source host)",
        "distributions": str(len(pins)),
    }
    return pins, render_freeze(pins, header, "Reference environment (pip-freeze form). Written by a tool.")


def _read(pkg: Path, rel: str) -> str:
    path = pkg / rel
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def system_facts(pkg: Path) -> dict[str, Any]:
    """OS, CUDA, driver and GPUs parsed from the package's text files; absent values are null."""
    os_values = {k: v for k, v in parse_os_release(_read(pkg, "env/os-release.txt")).items() if v}
    cuda = _read(pkg, "env/cuda.txt")
    nvcc = re.search(r"\bV(\d+\.\d+\.\d+)", cuda)
    cudart = re.search(r"libcudart\.so\.(\d+\.\d+\.\d+)", cuda)
    rows = [
        [cell.strip() for cell in line.split(",")]
        for line in _read(pkg, "env/nvidia-smi.txt").splitlines()
        if re.match(r"^\d+\s*,", line)
    ]
    gpus = {
        "model": rows[0][1] if rows else None,
        "count": len(rows),
        "compute_capability": rows[0][5] if rows and len(rows[0]) > 5 else None,
    }
    return {
        "schema": 1,
        "source": f"imported from {pkg.name}",
        "os": {
            "id": os_values.get("ID"),
            "version_id": os_values.get("VERSION_ID"),
            "pretty_name": os_values.get("PRETTY_NAME"),
        },
        "cuda": {"nvcc": nvcc.group(1) if nvcc else None, "libcudart": cudart.group(1) if cudart else None},
        "driver": rows[0][3] if rows and len(rows[0]) > 3 else None,
        "gpus": gpus,
    }


def _runs(data: Any) -> list[dict]:
    if isinstance(data, dict) and isinstance(data.get("runs"), list):
        return [r for r in data["runs"] if isinstance(r, dict)]
    if isinstance(data, list):
        return [r for r in data if isinstance(r, dict)]
    return [data] if isinstance(data, dict) else []


def import_results(pkg: Path, out_path: Path) -> dict[str, Any] | None:
    """bench/results/*.json -> the reference schema; None when the package has no results."""
    files = sorted((pkg / "bench" / "results").glob("*.json")) if (pkg / "bench" / "results").is_dir() else []
    results, contexts, concurrency = [], set(), set()
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        for index, run in enumerate(_runs(data)):
            figures = {
                k: run[k]
                for k in ("output_tokens_per_s", "aggregate_output_tokens_per_s", "acceptance_length")
                if k in run
            }
            if not figures:
                continue
            entry = {
                "id": str(run.get("label") or f"{path.stem}-{index}"),
                "algorithm": str(run.get("algorithm") or "unknown"),
                "concurrency": run.get("concurrency"),
                "context": run.get("context_tokens"),
                "source_file": f"bench/results/{path.name}",
                **figures,
            }
            results.append(entry)
            if isinstance(run.get("context_tokens"), int):
                contexts.add(run["context_tokens"])
            if isinstance(run.get("concurrency"), int):
                concurrency.add(run["concurrency"])
    if not results:
        return None
    data = {
        "schema": 1,
        "source": f"imported from {pkg.name}/bench/results by ddtree-build import",
        "results": results,
        "sweep": {"context_tokens": sorted(contexts), "concurrency": sorted(concurrency)},
    }
    validate_reference(data, out_path)
    return data


# ---- diffs + full files -> patch series -------------------------------------------------------------
#
# The original team made its package on the serving host: `diff -u /root/x.py.bak /usr/local/lib/python3.12/
# dist-packages/sglang/.../x.py` (absolute paths, no a/ b/, backups that may already hold earlier edits) and
# copies of the files that ran in patches/full/. So the full files are the truth: each is diffed against the
# pristine wheel to make the series; the team's diffs name the files, group and order them, and are checked
# against the full files (a hunk whose result is not in the file that ran is reported, never trusted).

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


# ---- the command ---------------------------------------------------------------------------------------


def _guess_target(facts: dict[str, Any]) -> str | None:
    model = facts["gpus"].get("model") or ""
    return next((name for marker, name in GPU_TARGETS if marker in model), None)


def build_import(pkg: Path, staging: Path, target: str | None, targets_dir: Path) -> ImportReport:
    """Write the converted package into `staging` (env/ and patches/ below it)."""
    from ddtree.patchset import series as series_mod

    report = ImportReport()
    pins, freeze_text = import_freeze(pkg)
    versions = {pin.name: pin.version for pin in pins}
    version = versions.get(DISTRIBUTION)
    if not version:
        raise UserError(f"{_find_freeze(pkg)}: no sglang==VERSION pin; cannot pick the pristine wheel")
    env = staging / "env"
    atomic_write(env / "freeze.txt", freeze_text, mode=0o644)
    facts = system_facts(pkg)
    atomic_write(env / "system-captured.yaml", yaml.safe_dump(facts, sort_keys=False), mode=0o644)

    series, raw, notes, warnings = import_patches(pkg, version, staging / "patches" / "series.yaml")
    report.notes += notes
    report.warnings += warnings
    for name, data in raw.items():
        atomic_write(staging / "patches" / name, data, mode=0o644)
    atomic_write(series.path, series_mod.dump(series), mode=0o644)
    series_mod.load(series.path)  # strict: the written series reads back and its hash chain holds

    units = sorted((pkg / "services").glob("*.service")) if (pkg / "services").is_dir() else []
    sglang_units = [u for u in units if "sglang" in u.read_text(encoding="utf-8", errors="replace")]
    if sglang_units:
        name = target or _guess_target(facts)
        if not name:
            raise UserError(f"{pkg.name}: cannot tell the target from env/nvidia-smi.txt; pass --target NAME")
        base = Path(targets_dir) / f"{name}.yaml"
        if not base.is_file():
            raise UserError(f"--target {name}: no base profile {base}")
        out_path = env / "targets" / f"{name}.yaml"
        data, unit_notes = import_target(sglang_units[0], base, out_path, pkg)
        report.notes += unit_notes
        header = f"# Imported by ddtree-build import from {pkg.name}; checked by ddtree.targets (schema 1).\n"
        atomic_write(out_path, header + yaml.safe_dump(data, sort_keys=False), mode=0o644)
    else:
        report.notes.append(f"{pkg.name}/services: no unit launching sglang; no target profile written")

    if (pkg / "env" / "weights.yaml").is_file():  # written by capture --weights-*: the weights lock
        from ddtree import weights_lock
        from ddtree.yamlfile import load_yaml

        weights_lock.validate_lock(load_yaml(pkg / "env" / "weights.yaml"), pkg / "env" / "weights.yaml")
        atomic_write(env / "weights.yaml", (pkg / "env" / "weights.yaml").read_bytes(), mode=0o644)
    else:
        report.notes.append(f"{pkg.name}/env/weights.yaml: absent; the weights lock is left as it is")

    results = import_results(pkg, env / "reference" / "imported-results.yaml")
    if results:
        text = yaml.safe_dump(results, sort_keys=False)
        atomic_write(env / "reference" / "imported-results.yaml", text, mode=0o644)
    else:
        report.notes.append(f"{pkg.name}/bench/results: no results; no reference written")

    for rel in (
        "REPRODUCE.md",
        "drafter/config.json",
        "env/os-release.txt",
        "env/cuda.txt",
        "env/nvidia-smi.txt",
    ):
        if (pkg / rel).is_file():
            atomic_write(env / "imported" / rel.removeprefix("env/"), (pkg / rel).read_bytes(), mode=0o644)
    for script in sorted((pkg / "bench").glob("*")) if (pkg / "bench").is_dir() else []:
        if script.is_file():
            atomic_write(env / "imported" / "bench" / script.name, script.read_bytes(), mode=0o644)
    for unit in units:
        atomic_write(env / "imported" / "services" / unit.name, unit.read_bytes(), mode=0o644)
    report.notes += _drafter_note(pkg)
    return report


def _drafter_note(pkg: Path) -> list[str]:
    config = pkg / "drafter" / "config.json"
    if not config.is_file():
        return [f"{pkg.name}/drafter/config.json: absent"]
    try:
        block = json.loads(config.read_text()).get("block_size")
    except json.JSONDecodeError:
        return [f"{pkg.name}/drafter/config.json: not valid JSON"]
    return [f"drafter block_size {block} (DDTree's num-draft-tokens must match it)"] if block else []


def run_import(
    pkg: Path, out: Path | None, force: bool, target: str | None, targets_dir: Path
) -> ImportReport:
    """Check the manifest, copy exactly the listed files into a private snapshot, convert the snapshot,
    and swap the result into `out` at the end: an error or Ctrl-C at any point leaves `out` as it was."""
    pkg = Path(pkg)
    if not pkg.is_dir():
        raise UserError(f"{pkg}: not a folder; give the reproduction package's folder")
    manifest = check_manifest(pkg)
    if not manifest.ok:
        raise UserError(f"{pkg}/MANIFEST.sha256 does not match the package: {manifest.summary()}")
    if out is None:
        if not force:
            raise UserError(
                "give --out DIR (a new folder), or --force to overwrite the checkout's env/ and patches/"
            )
        out = paths.REPO_ROOT
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: is a file; give a folder")
    fresh = not out.exists() or not any(out.iterdir())
    if not fresh and not force:
        raise UserError(f"--out {out}: exists and is not empty; give a new folder or add --force")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".ddtree-import-", dir=out))
    snapshot = staging / "package" / pkg.name
    try:
        copy_listed(pkg, snapshot)
        try:
            report = build_import(snapshot, staging / "result", target, targets_dir)
        except UserError as exc:  # name the user's package, not the private snapshot
            raise UserError(str(exc).replace(str(snapshot), str(pkg)), exc.exit_code) from exc
        _place(staging / "result", out, report)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return report


def _place(result: Path, out: Path, report: ImportReport) -> None:
    """Build the complete new env/ and patches/ beside the old ones (old content + the import; series diffs
    the new series no longer names dropped), then rename them in with signals held off: `out` ends as it
    was or as imported, never in between."""
    old_series = out / "patches" / "series.yaml"
    old_diffs: set[str] = set()
    if old_series.is_file():
        data = load_yaml(old_series) or {}
        old_diffs = {str(p.get("diff")) for p in data.get("patches") or [] if isinstance(p, dict)}
    merged: dict[str, Path] = {}
    for top in sorted(p.name for p in result.iterdir() if p.is_dir()):
        folder = Path(tempfile.mkdtemp(prefix=f".{top}.new-", dir=result.parent))
        current = out / top
        if current.is_dir():
            shutil.copytree(current, folder, symlinks=True, dirs_exist_ok=True)
        os.chmod(folder, 0o755)
        for path in sorted((result / top).rglob("*")):
            if path.is_file():
                rel = path.relative_to(result)
                target = folder / path.relative_to(result / top)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                os.chmod(target, 0o644)
                report.written.append(rel.as_posix())
        merged[top] = folder
    new_diffs = {Path(rel).name for rel in report.written if rel.startswith("patches/")}
    if "patches" in merged:
        for name in sorted(old_diffs - new_diffs):
            stale = merged["patches"] / name
            if stale.is_file():
                stale.unlink()
                report.notes.append(f"removed patches/{name} (not in the imported series)")
    swap_folders(out, merged)


def swap_folders(out: Path, merged: dict[str, Path]) -> None:
    """Rename each merged folder over out/NAME (the old one moved aside, then removed). SIGINT/SIGTERM are
    held during the renames; a failing rename puts back what was already swapped."""
    import signal

    held = {signal.SIGINT, signal.SIGTERM}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    done: list[tuple[Path, Path | None]] = []
    try:
        try:
            for top, folder in merged.items():
                current = out / top
                aside = None
                if current.exists():
                    aside = folder.with_name(f".{top}.old-{folder.name.rsplit('-', 1)[-1]}")
                    os.rename(current, aside)
                done.append((current, aside))
                os.rename(folder, current)
        except BaseException:
            for current, aside in reversed(done):
                if current.exists() and aside is not None:
                    shutil.rmtree(current, ignore_errors=True)
                if aside is not None:
                    os.rename(aside, current)
            raise
        for _, aside in done:
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def _cmd_import(args: argparse.Namespace) -> int:
    report = run_import(
        Path(args.package),
        Path(args.out) if args.out else None,
        args.force,
        args.target,
        Path(args.targets_dir),
    )
    for warning in report.warnings:
        print(f"warning: {warning}")
    print(f"imported {args.package}: {len(report.written)} file(s) written")
    for rel in report.written:
        print(f"  {rel}")
    for note in report.notes:
        print(f"note: {note}")
    if any(rel == "env/freeze.txt" for rel in report.written):
        print(
            "next: `ddtree-build lock` (the locks follow the new freeze), then `ddtree-build patches check`"
        )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import", help="reproduction package -> env/ and patches/ (manifest first)"
    )
    parser.add_argument("package", help="the package folder (with MANIFEST.sha256)")
    parser.add_argument("--out", help="new folder to write env/ and patches/ into")
    parser.add_argument("--force", action="store_true", help="overwrite (without --out: the checkout's)")
    parser.add_argument("--target", help="base target profile (default: from the package's GPUs)")
    parser.add_argument(
        "--targets-dir", default=str(paths.ENV_DIR / "targets"), help="where base profiles are"
    )
    parser.set_defaults(func=_cmd_import)
