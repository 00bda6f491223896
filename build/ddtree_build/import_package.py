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
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, sha256_bytes, sha256_file
from ddtree.lockfile import Pin, parse_pins
from ddtree.reference import validate_reference
from ddtree.targets import validate_target
from ddtree.yamlfile import load_yaml

from ddtree_build import paths, pristine
from ddtree_build.freeze import render_freeze
from ddtree_build.package_manifest import check_manifest

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
    os_values = dict(
        (k, v.strip().strip('"'))
        for k, _, v in (line.partition("=") for line in _read(pkg, "env/os-release.txt").splitlines())
        if v
    )
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


# ---- diffs -> patch series -----------------------------------------------------------------------------


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


def import_patches(pkg: Path, version: str, series_path: Path) -> tuple[Series, dict[str, bytes], list[str]]:
    """(series with hashes, {diff name: bytes}, notes); patches/full/ is checked against the result."""
    from ddtree.patchset import udiff
    from ddtree.patchset.series import FileSpec, Patch, Series

    diffs = sorted((pkg / "patches" / "diffs").glob("*.diff")) + sorted(
        (pkg / "patches" / "diffs").glob("*.patch")
    )
    series = Series(path=series_path, distribution=DISTRIBUTION, version=version, patches=[])
    taken: set[str] = set()
    raw: dict[str, bytes] = {}
    for path in diffs:
        data = path.read_bytes()
        file_patches = udiff.parse(data, str(path))
        series.patches.append(
            Patch(
                id=_patch_id(path.name, taken),
                purpose=f"imported from {pkg.name}/patches/diffs/{path.name}",
                diff=path.name,
                files=[FileSpec(fp.path, None, None, _signatures(fp)) for fp in file_patches],
                diff_bytes=data,
                file_patches=file_patches,
            )
        )
        raw[path.name] = data
    if not diffs:
        return series, raw, [f"{pkg.name}/patches/diffs: no diffs; the series is empty"]
    reader = pristine.WheelReader(pristine.ensure_wheel(DISTRIBUTION, version))
    try:
        finals = _apply_and_hash(series, reader.read, pkg)
    finally:
        reader.close()
    return series, raw, _check_full(pkg, finals)


def _apply_and_hash(series: Series, read, pkg: Path) -> dict[str, bytes]:
    """Apply the diffs strictly, in order, to the pristine files; fill in pre/post; return final contents.
    The walk is the patch engine's FileChain (as in simulate and patches refresh); a failure raises here."""
    from ddtree.patchset import udiff
    from ddtree.patchset.engine import FileChain
    from ddtree.patchset.series import NEW

    chain = FileChain(read)
    for patch in series.patches:
        where = f"{pkg.name}/patches/diffs/{patch.diff}"
        for fp, old in chain.files(patch):
            if old is None and not fp.is_new:
                raise UserError(
                    f"{where}: {fp.path} is not in the pristine {DISTRIBUTION} {series.version} wheel"
                )
            new = udiff.apply_file(old, fp, where)
            spec = patch.spec(fp.path)
            spec.pre = NEW if old is None else sha256_bytes(old)
            spec.post = sha256_bytes(new)
            chain.contents[fp.path] = new
    return {path: data for path, data in chain.contents.items() if data is not None}


def _check_full(pkg: Path, finals: dict[str, bytes]) -> list[str]:
    """patches/full/ (the team's copies of the patched files) must equal pristine + diffs."""
    full = pkg / "patches" / "full"
    if not full.is_dir():
        return [f"{pkg.name}/patches/full: absent; nothing to cross-check the diffs with"]
    present = {p.relative_to(full).as_posix() for p in full.rglob("*") if p.is_file()}
    problems = [f"patches/full/{rel}: no diff changes this file" for rel in sorted(present - set(finals))]
    problems += [f"patches/full/{rel}: missing" for rel in sorted(set(finals) - present)]
    problems += [
        f"patches/full/{rel}: differs from the pristine file + diffs"
        for rel in sorted(present & set(finals))
        if (full / rel).read_bytes() != finals[rel]
    ]
    if problems:
        raise UserError(f"{pkg.name}: full files and diffs disagree: {'; '.join(problems)}")
    return []


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

    series, raw, notes = import_patches(pkg, version, staging / "patches" / "series.yaml")
    report.notes += notes
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
    fresh = not out.exists() or (out.is_dir() and not any(out.iterdir()))
    if not fresh and not force:
        raise UserError(f"--out {out}: exists and is not empty; give a new folder or add --force")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".ddtree-import-", dir=out.parent))
    try:
        report = build_import(pkg, staging, target, targets_dir)
        _place(staging, out, report)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report


def _place(staging: Path, out: Path, report: ImportReport) -> None:
    """Move the staged files into `out`; replaced series diffs that the new series no longer names go."""
    old_series = out / "patches" / "series.yaml"
    old_diffs: set[str] = set()
    if old_series.is_file():
        data = load_yaml(old_series) or {}
        old_diffs = {str(p.get("diff")) for p in data.get("patches") or [] if isinstance(p, dict)}
    for path in sorted(staging.rglob("*")):
        if path.is_file():
            rel = path.relative_to(staging)
            atomic_write(out / rel, path.read_bytes(), mode=0o644)
            report.written.append(rel.as_posix())
    new_diffs = {
        Path(rel).name
        for rel in report.written
        if rel.startswith("patches/") and rel.endswith((".diff", ".patch"))
    }
    for name in sorted(old_diffs - new_diffs):
        stale = out / "patches" / name
        if stale.is_file():
            stale.unlink()
            report.notes.append(f"removed patches/{name} (not in the imported series)")


def _cmd_import(args: argparse.Namespace) -> int:
    report = run_import(
        Path(args.package),
        Path(args.out) if args.out else None,
        args.force,
        args.target,
        Path(args.targets_dir),
    )
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
