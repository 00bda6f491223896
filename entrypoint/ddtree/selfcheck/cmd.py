"""`ddtree selfcheck`: the checks registered by CHECK_MODULES, run and reported (table or JSON).

The self-check answers "is what runs here what was measured?" truthfully. The framework (check
registration, statuses, exit codes, the report) lives in ddtree.selfcheck.checks; a new check module
registers its checks there and its name goes into CHECK_MODULES below (a one-line edit). This module holds
the first checks (package, python, platform, dependencies) and the command line, whose --live and --smoke
modes hand over to ddtree.selfcheck.live and ddtree.smoke.check.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
from pathlib import Path

import ddtree
from ddtree import __version__
from ddtree.numbers import COUNT, FRACTION, SECONDS, arg_type
from ddtree.os_release import read_os_release
from ddtree.selfcheck.checks import (
    REGISTRY,
    CheckResult,
    Context,
    check,
    failed,
    format_table,
    load_check_modules,
    passed,
    report_dict,
    run_checks,
)
from ddtree.smoke.models import ARCHES as SMOKE_ARCHES

MIN_PYTHON = (3, 10)

# Modules whose import registers more checks (e.g. "selfcheck.patches"); one line per module.
CHECK_MODULES: tuple[str, ...] = (
    "selfcheck.image",
    "selfcheck.weights",
    "selfcheck.sbom",
    "selfcheck.tree",
)


# ---------------------------------------------------------------- the first checks: what exists now


@check("package")
def _package(ctx: Context) -> CheckResult:
    location = Path(ddtree.__file__).resolve().parent
    return passed(
        f"ddtree {__version__} at {location}", name="ddtree", version=__version__, location=str(location)
    )


@check("python")
def _python(ctx: Context) -> CheckResult:
    version = platform.python_version()
    data = {
        "version": version,
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "minimum": ".".join(map(str, MIN_PYTHON)),
    }
    if sys.version_info[:2] < MIN_PYTHON:
        return failed(
            f"Python {version} is older than {data['minimum']}; use the image's interpreter", **data
        )
    return passed(f"{data['implementation']} {version} ({sys.executable})", **data)


@check("platform")
def _platform(ctx: Context) -> CheckResult:
    os_release = read_os_release()
    libc, libc_version = platform.libc_ver()
    data = {
        "system": platform.system(),
        "machine": platform.machine(),
        "kernel": platform.release(),
        "os": os_release.get("PRETTY_NAME", "unknown"),
        "libc": f"{libc} {libc_version}".strip(),
    }
    return passed(
        f"{data['os']}, {data['machine']}, {data['libc'] or 'libc unknown'}, kernel {data['kernel']}", **data
    )


RUNTIME_DEPENDENCIES = ("PyYAML", "packaging")


@check("dependencies")
def _dependencies(ctx: Context) -> CheckResult:
    versions: dict[str, str | None] = {}
    for dist in RUNTIME_DEPENDENCIES:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    missing = [name for name, version in versions.items() if version is None]
    if missing:
        return failed(f"missing: {', '.join(missing)} (the image must install them)", **versions)
    return passed(", ".join(f"{k} {v}" for k, v in versions.items()), **versions)


# ---------------------------------------------------------------- CLI


def _cmd_selfcheck(args: argparse.Namespace) -> int:
    if args.live:
        from ddtree.selfcheck import live

        return live.selfcheck_live(args)
    if args.smoke:
        from ddtree.smoke import check as smoke

        return smoke.selfcheck_smoke(args)
    ctx = Context(
        offline=args.offline,
        options={"full_hash": args.full_hash, "weights_manifest": args.weights_manifest, "full": args.full},
    )
    outcomes = load_check_modules(CHECK_MODULES)
    outcomes += run_checks(REGISTRY, ctx, args.only or ())
    report = report_dict(outcomes, ctx)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report))
    return int(report["exit_code"])


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "selfcheck", help="check that what runs here is what was measured (exit 0 pass, 1 fail, 2 error)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--offline", action="store_true", help="skip checks that need the network")
    mode.add_argument("--live", metavar="URL", help="judge a running server: REPRODUCED, DEGRADED or FAILED")
    mode.add_argument("--smoke", action="store_true", help="serve tiny models on this GPU: DDTree == greedy")
    parser.add_argument(
        "--full", action="store_true", help="every installed file against its RECORD, and the tree digest"
    )
    parser.add_argument("--full-hash", action="store_true", help="sha256 every weight shard (reads all)")
    parser.add_argument("--weights-manifest", metavar="FILE", help="`sha256  path` lines for --full-hash")
    parser.add_argument(
        "--tolerance", type=arg_type(FRACTION), default=0.10, help="--live: relative tolerance (0.10)"
    )
    parser.add_argument(
        "--max-tokens", type=arg_type(COUNT), default=256, help="--live: tokens to generate (256)"
    )
    parser.add_argument("--reference", metavar="FILE", help="--live: reference results (env/reference)")
    parser.add_argument(
        "--timeout", type=arg_type(SECONDS), default=600.0,
        help="--live: seconds one whole request may take, keep-alives included (600)",
    )  # fmt: skip
    parser.add_argument(
        "--runs", type=arg_type(COUNT), default=3, help="--live: measured greedy runs (median, spread; 3)"
    )
    parser.add_argument(
        "--receipt", default="receipt-live.json", metavar="FILE",
        help="--live: write the receipt here (default receipt-live.json; '' for none)",
    )  # fmt: skip
    parser.add_argument(
        "--smoke-tp", type=int, default=1, metavar="N",
        help="--smoke: tensor-parallel size 1, 2 or 4 (tiny models split over N GPUs: the TP top-k merge)",
    )  # fmt: skip
    parser.add_argument(
        "--arch", choices=SMOKE_ARCHES, default=None,
        help="--smoke: the tiny target: gqa (Qwen3) or mla (Kimi K2.6's DeepSeek-V3 MLA + MoE); default "
        "DDTREE_SMOKE_ARCH, else gqa",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these checks")
    parser.set_defaults(func=_cmd_selfcheck)
