"""The check framework: named checks, each pass/fail/skip with a one-line detail; a table or JSON.

A check reports only what it looked at. Checks are added by registration, not by editing a runner:

    from ddtree.selfcheck.checks import check, passed, failed, skipped

    @check("gpu", needs_network=False)
    def gpu_check(ctx):
        ...
        return passed("8 x RTX PRO 6000 (sm_120)", count=8)

A check may also raise UserError (reported as fail, with its message); any other exception means the
check could not run ("error"). Commands (`ddtree selfcheck`, its --live mode) build on this floor;
it imports none of them.

Exit codes: 0 every check passed or was skipped, 1 a check failed, 2 a check could not run (and none
failed). Statuses in order of severity: fail > error > skip > pass.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ddtree import __version__
from ddtree.errors import UserError

Status = Literal["pass", "fail", "skip", "error"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "skip", "error")
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
JSON_SCHEMA_VERSION = 1


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
