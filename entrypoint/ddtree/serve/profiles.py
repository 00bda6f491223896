"""`ddtree profiles` and DDTREE_TARGET=auto: which target profile fits the GPUs on this host.

A profile fits when every visible GPU has its compute capability (12.0 for the RTX PRO 6000, 10.3 for the
B300) and there are at least as many GPUs as its tensor-parallel size. When several fit, the one whose GPU
model is the name nvidia-smi prints wins; when that still leaves several, the choice is refused as
ambiguous (pin DDTREE_TARGET). No fit is refused with one line naming what each profile needs.

With `auto` one image serves both fleets: the chosen profile's environment replaces the values the image
baked for its own target (a value the caller set differently still wins), and the baked target's variables
the chosen profile does not set are dropped (e.g. NCCL_P2P_DISABLE, the PCIe boxes' workaround, on NVLink).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddtree import gpu, targets
from ddtree.errors import UserError

AUTO = "auto"
# Which target the image was built for (its io.ddtree.target label); the Dockerfile sets it.
IMAGE_TARGET_ENV = "DDTREE_IMAGE_TARGET"


@dataclass(frozen=True)
class Fit:
    target: targets.Target
    fits: bool
    reason: str


def load_all(folder: Path) -> list[targets.Target]:
    """Every valid profile in `folder` (a broken one is an error: profiles are part of the image)."""
    names = targets.known_targets(folder)
    if not names:
        raise UserError(f"no target profiles in {folder}; set DDTREE_ENV_DIR to the env/ folder", exit_code=2)
    return [targets.load_target(name, targets_dir=folder) for name in names]


def judge(target: targets.Target, gpus: Sequence[gpu.Gpu]) -> Fit:
    """Does `target` fit these GPUs, and why (not)."""
    caps = sorted({g.compute_cap for g in gpus})
    if caps != [target.compute_capability]:
        return Fit(
            target, False, f"needs sm {target.compute_capability}, here sm {', '.join(caps) or 'none'}"
        )
    if len(gpus) < target.tensor_parallel:
        return Fit(
            target,
            False,
            f"needs {target.tensor_parallel} GPUs for TP {target.tensor_parallel}, {len(gpus)} here",
        )
    return Fit(target, True, f"{len(gpus)} x sm {target.compute_capability} >= TP {target.tensor_parallel}")


def choose(profiles: Sequence[targets.Target], gpus: Sequence[gpu.Gpu]) -> targets.Target:
    """The one profile that fits; UserError (exit 2) with one line when none or several do."""
    fits = [judge(p, gpus) for p in profiles]
    good = [f.target for f in fits if f.fits]
    if len(good) > 1:
        names = {g.name for g in gpus}
        good = [t for t in good if t.gpu.model in names] or good
    if len(good) == 1:
        return good[0]
    found = f"{len(gpus)} x {gpus[0].name} (sm {gpus[0].compute_cap})" if gpus else "no GPU"
    if not good:
        needs = "; ".join(f"{f.target.name} {f.reason}" for f in fits)
        raise UserError(
            f"DDTREE_TARGET=auto: no target profile fits {found} ({needs}); set DDTREE_TARGET to a profile "
            f"and {gpu.ARCH_OVERRIDE_ENV}=1 to run anyway",
            exit_code=2,
        )
    raise UserError(
        f"DDTREE_TARGET=auto: {', '.join(t.name for t in good)} all fit {found}; set DDTREE_TARGET to one",
        exit_code=2,
    )


def choose_name(folder: Path, runner: gpu.Runner = gpu.run_nvidia_smi) -> str:
    """`auto` resolved on this host: the fitting profile's name."""
    return choose(load_all(folder), gpu.query_gpus(runner)).name


def environment_for(
    chosen: targets.Target, baked: targets.Target | None, environ: Mapping[str, str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """(variables to export, variables to drop) for an auto-chosen profile in an image baked for `baked`.

    A value equal to the baked profile's is the image's default, not the caller's choice: the chosen
    profile replaces it. Baked-only variables still at their baked value are dropped."""
    baked_env = baked.environment if baked else {}
    export = {}
    for key, value in chosen.environment.items():
        current = environ.get(key)
        export[key] = value if current is None or current == baked_env.get(key) else current
    drop = tuple(
        sorted(k for k, v in baked_env.items() if k not in chosen.environment and environ.get(k) == v)
    )
    return export, drop


# ---------------------------------------------------------------- CLI


def _cmd_profiles(args: argparse.Namespace) -> int:
    folder = targets.targets_dir_for(args.env_dir)
    profiles = load_all(folder)
    try:
        gpus = gpu.query_gpus()
        gpu_error = None
    except UserError as exc:
        gpus, gpu_error = [], str(exc)
    fits = [judge(p, gpus) for p in profiles] if gpus else []
    chosen, refusal = None, gpu_error
    if gpus:
        try:
            chosen = choose(profiles, gpus).name
        except UserError as exc:
            refusal = str(exc)
    if args.json:
        document = {
            "targets_dir": str(folder),
            "profiles": [
                {
                    "name": p.name,
                    "gpu": p.gpu.model,
                    "compute_capability": p.compute_capability,
                    "count": p.gpu.count,
                    "tensor_parallel": p.tensor_parallel,
                    "interconnect": p.interconnect,
                }
                for p in profiles
            ],
            "gpus": [vars(g) for g in gpus],
            "fits": {f.target.name: {"fits": f.fits, "reason": f.reason} for f in fits},
            "chosen": chosen,
            "refusal": refusal,
        }
        print(json.dumps(document, indent=2))
        return 0 if chosen else 1
    print(f"target profiles ({folder}):")
    width = max(len(p.name) for p in profiles)
    for p in profiles:
        mark = next((("fits" if f.fits else f"no: {f.reason}") for f in fits if f.target is p), "-")
        print(
            f"  {p.name:<{width}}  {p.gpu.count} x {p.gpu.model} (sm {p.compute_capability}), "
            f"TP {p.tensor_parallel}, {p.interconnect}  [{mark}]"
        )
    if gpus:
        print(f"GPUs here: {gpu.describe(gpus, len(gpus)).rsplit(', TP', 1)[0]}")
    print(f"DDTREE_TARGET=auto picks: {chosen}" if chosen else f"DDTREE_TARGET=auto: none ({refusal})")
    return 0 if chosen else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "profiles", help="list the target profiles, the GPUs here, and which profile DDTREE_TARGET=auto picks"
    )
    parser.add_argument(
        "--env-dir", help="env/ folder (default: $DDTREE_ENV_DIR, /opt/ddtree/env, the checkout)"
    )
    parser.add_argument("--json", action="store_true", help="print as JSON")
    parser.set_defaults(func=_cmd_profiles)
