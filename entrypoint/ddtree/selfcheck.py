"""`ddtree selfcheck`: named checks, each pass/fail/skip with a one-line detail; a table or JSON.

The self-check answers "is what runs here what was measured?" truthfully: a check reports only what it
looked at. It grows by registration, not by editing this file's runner:

    from ddtree.selfcheck import check, passed, failed, skipped

    @check("gpu", needs_network=False)
    def gpu_check(ctx):
        ...
        return passed("8 x RTX PRO 6000 (sm_120)", count=8)

and the module's name goes into CHECK_MODULES below (a one-line edit). A check may also raise UserError
(reported as fail, with its message); any other exception means the check could not run ("error").

Exit codes: 0 every check passed or was skipped, 1 a check failed, 2 a check could not run (and none
failed). Statuses in order of severity: fail > error > skip > pass.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ddtree import __version__
from ddtree.errors import UserError
from ddtree.numbers import COUNT, FRACTION, arg_type

Status = Literal["pass", "fail", "skip", "error"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "skip", "error")
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
JSON_SCHEMA_VERSION = 1
MIN_PYTHON = (3, 10)

# Modules whose import registers more checks (e.g. "selfcheck_patches"); one line per module.
CHECK_MODULES: tuple[str, ...] = (
    "selfcheck_image",
    "selfcheck_weights",
    "selfcheck_sbom",
    "selfcheck_tree",
)


@dataclass(frozen=True)
class CheckResult:
    """What one check saw: a status, one line for people, and facts for machines."""

    status: Status
    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)


def passed(detail: str, **data: Any) -> CheckResult:
    return CheckResult("pass", detail, data)


def failed(detail: str, **data: Any) -> CheckResult:
    return CheckResult("fail", detail, data)


def skipped(detail: str, **data: Any) -> CheckResult:
    return CheckResult("skip", detail, data)


@dataclass(frozen=True)
class Context:
    """What a check may depend on: offline mode and the environment (injectable for tests)."""

    offline: bool = True
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    # Command-line choices checks may read (e.g. full_hash, weights_manifest).
    options: Mapping[str, Any] = field(default_factory=dict)


CheckFunc = Callable[[Context], CheckResult]


@dataclass(frozen=True)
class Check:
    name: str
    func: CheckFunc
    needs_network: bool = False


REGISTRY: list[Check] = []


def check(name: str, needs_network: bool = False) -> Callable[[CheckFunc], CheckFunc]:
    """Register `func` as the check `name` (names are unique; the run keeps registration order)."""

    def register_func(func: CheckFunc) -> CheckFunc:
        if any(existing.name == name for existing in REGISTRY):
            raise ValueError(f"selfcheck: a check named {name!r} is already registered")
        REGISTRY.append(Check(name, func, needs_network))
        return func

    return register_func


@dataclass(frozen=True)
class Outcome:
    name: str
    result: CheckResult
    seconds: float


def run_check(item: Check, ctx: Context) -> Outcome:
    """Run one check; its failures and crashes become results, never exceptions."""
    start = time.monotonic()
    if item.needs_network and ctx.offline:
        result = skipped("needs the network; skipped with --offline")
    else:
        try:
            result = item.func(ctx)
            if not isinstance(result, CheckResult):
                result = CheckResult("error", f"check returned {type(result).__name__}, not a CheckResult")
        except UserError as exc:
            result = failed(str(exc))
        except Exception as exc:
            result = CheckResult("error", f"could not run: {type(exc).__name__}: {exc}")
    return Outcome(item.name, result, time.monotonic() - start)


def load_check_modules(modules: Iterable[str]) -> list[Outcome]:
    """Import the modules that register checks; one that cannot load is reported, not fatal."""
    problems = []
    for name in modules:
        try:
            importlib.import_module(f"ddtree.{name}")
        except Exception as exc:
            problems.append(
                Outcome(f"load:{name}", CheckResult("error", f"{type(exc).__name__}: {exc}"), 0.0)
            )
    return problems


def run_checks(checks: Sequence[Check], ctx: Context, only: Sequence[str] = ()) -> list[Outcome]:
    if only:
        unknown = sorted(set(only) - {c.name for c in checks})
        if unknown:
            known = ", ".join(c.name for c in checks)
            raise UserError(f"selfcheck: no check named {', '.join(unknown)}; known: {known}", EXIT_ERROR)
        checks = [c for c in checks if c.name in only]
    return [run_check(item, ctx) for item in checks]


def overall(outcomes: Sequence[Outcome]) -> tuple[Status, int]:
    """The run's status and exit code: any fail -> 1, else any error -> 2, else 0."""
    statuses = {o.result.status for o in outcomes}
    if "fail" in statuses:
        return "fail", EXIT_FAIL
    if "error" in statuses:
        return "error", EXIT_ERROR
    return "pass", EXIT_PASS


def report_dict(outcomes: Sequence[Outcome], ctx: Context) -> dict[str, Any]:
    status, code = overall(outcomes)
    return {
        "schema": JSON_SCHEMA_VERSION,
        "tool": "ddtree",
        "version": __version__,
        "offline": ctx.offline,
        "status": status,
        "exit_code": code,
        "counts": {s: sum(o.result.status == s for o in outcomes) for s in STATUSES},
        "checks": [
            {
                "name": o.name,
                "status": o.result.status,
                "detail": o.result.detail,
                "data": dict(o.result.data),
                "seconds": round(o.seconds, 3),
            }
            for o in outcomes
        ],
    }


def format_table(report: Mapping[str, Any]) -> str:
    rows = [(c["name"], c["status"].upper(), c["detail"]) for c in report["checks"]]
    width = max([len("CHECK"), *(len(r[0]) for r in rows)])
    lines = [f"{'CHECK':<{width}}  STATUS  DETAIL"]
    lines += [f"{name:<{width}}  {status:<6}  {detail}" for name, status, detail in rows]
    counts = ", ".join(f"{n} {s}" for s, n in report["counts"].items() if n)
    mode = "offline" if report["offline"] else "online"
    lines.append(f"selfcheck ({mode}): {report['status'].upper()} ({counts or 'no checks'})")
    return "\n".join(lines)


# ---------------------------------------------------------------- the first checks: what exists now


@check("package")
def _package(ctx: Context) -> CheckResult:
    location = Path(__file__).resolve().parent
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


def _os_release(path: Path = Path("/etc/os-release")) -> dict[str, str]:
    facts: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return facts
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            facts[key.strip()] = value.strip().strip('"')
    return facts


@check("platform")
def _platform(ctx: Context) -> CheckResult:
    os_release = _os_release()
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
        from ddtree import live

        return live.selfcheck_live(args)
    if args.smoke:
        from ddtree import smoke

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
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these checks")
    parser.set_defaults(func=_cmd_selfcheck)
