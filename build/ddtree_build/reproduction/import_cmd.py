"""`ddtree-build import PKG`: turn a reproduction package (hand-made or captured) into env/ and patches/.

The jobs: unit.py (the systemd unit -> a target profile), facts.py (freeze, system facts,
results), patches.py (diffs + full files -> the series); this module checks, stages and places.

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

Secrets never reach env/ (it is baked into the image): the unit's secret variables and options are stripped
from the profile (import_unit) and their values redacted (<redacted>) in every copied text, as are
token-shaped strings (hf_..., sk-...); the notes name what was stripped.

The output folder is given by the user (`--out DIR`, new or empty); the checkout's env/ and patches/ are
written only with `--force` and no --out, so a test never overwrites the real ones.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ddtree.errors import UserError
from ddtree.fsutil import atomic_write
from ddtree.jsontext import JsonProblem, parse
from ddtree.secret_rules import redact
from ddtree.yamlfile import load_yaml

from ddtree_build import paths
from ddtree_build.reproduction.facts import find_freeze, import_freeze, import_results, system_facts
from ddtree_build.reproduction.manifest import check_manifest, copy_listed
from ddtree_build.reproduction.patches import DISTRIBUTION, import_patches
from ddtree_build.reproduction.unit import import_target, unit_secrets

GPU_TARGETS = (("RTX PRO 6000", "pro6000"), ("B300", "b300"))


@dataclass
class ImportReport:
    written: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # things in the package not trusted (printed first)


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
        raise UserError(f"{find_freeze(pkg)}: no sglang==VERSION pin; cannot pick the pristine wheel")
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
        from ddtree.weights import lock as weights_lock
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

    secret_values = [
        value
        for unit in units
        for value in unit_secrets(unit.read_text(encoding="utf-8", errors="replace"), unit.name)[1]
    ]

    def copy_redacted(source: Path, dest: Path) -> None:
        """A copy with the unit's secret values redacted (surrogateescape: any bytes round-trip)."""
        text = source.read_bytes().decode("utf-8", "surrogateescape")
        atomic_write(dest, redact(text, secret_values).encode("utf-8", "surrogateescape"), mode=0o644)

    for rel in (
        "REPRODUCE.md",
        "drafter/config.json",
        "env/os-release.txt",
        "env/cuda.txt",
        "env/nvidia-smi.txt",
    ):
        if (pkg / rel).is_file():
            copy_redacted(pkg / rel, env / "imported" / rel.removeprefix("env/"))
    for script in sorted((pkg / "bench").glob("*")) if (pkg / "bench").is_dir() else []:
        if script.is_file():
            copy_redacted(script, env / "imported" / "bench" / script.name)
    for unit in units:
        copy_redacted(unit, env / "imported" / "services" / unit.name)
    report.notes += _drafter_note(pkg)
    return report


def _drafter_note(pkg: Path) -> list[str]:
    config = pkg / "drafter" / "config.json"
    if not config.is_file():
        return [f"{pkg.name}/drafter/config.json: absent"]
    try:
        data = parse(config.read_bytes())
    except (OSError, JsonProblem) as exc:
        return [f"{pkg.name}/drafter/config.json: not readable JSON ({exc})"]
    block = data.get("block_size") if isinstance(data, dict) else None
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
    refuse_overlap(pkg, out)
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


def refuse_overlap(pkg: Path, out: Path) -> None:
    """`out` must not lie inside the package (the import would write into what it reads, and the package's
    manifest would no longer match), nor the package inside what the import replaces (env/, patches/)."""
    package, target = pkg.resolve(), out.resolve()
    if target == package or package in target.parents:
        raise UserError(
            f"--out {out} is inside the package {pkg}: the import would write into the package it reads; "
            "give a folder outside it"
        )
    for top in ("env", "patches"):
        if package == target / top or (target / top) in package.parents:
            raise UserError(
                f"--out {out}: the package {pkg} lies in {target / top}, which the import replaces; "
                "move the package elsewhere first"
            )


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
