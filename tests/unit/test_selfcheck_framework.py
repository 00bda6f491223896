"""The self-check's frame: named checks, statuses, exit codes, table and JSON (no engine needed)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest
from ddtree import __version__
from ddtree.errors import UserError
from ddtree.selfcheck import checks as framework
from ddtree.selfcheck import cmd as selfcheck  # noqa: F401 (importing selfcheck registers its first checks)
from ddtree.selfcheck.checks import Check, Context, failed, passed, skipped


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddtree.cli", "selfcheck", *args], capture_output=True, text=True, check=False
    )


def test_offline_json_reports_what_exists() -> None:
    out = _run_cli("--offline", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["status"] == "pass" and report["exit_code"] == 0 and report["offline"] is True
    assert report["version"] == __version__
    checks = {c["name"]: c for c in report["checks"]}
    assert {"package", "python", "platform", "dependencies"} <= set(checks)
    assert checks["package"]["data"]["version"] == __version__
    assert checks["python"]["data"]["version"] == platform.python_version()
    assert checks["platform"]["data"]["machine"] == platform.machine()
    # Checks of the image and the GPU host (selfcheck_image) skip on a plain checkout; none may fail.
    assert all(c["status"] in ("pass", "skip") for c in checks.values())


def test_table_has_header_rows_and_summary() -> None:
    out = _run_cli("--offline")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL"]
    assert any(line.startswith("python") and "PASS" in line for line in lines)
    assert lines[-1].startswith("selfcheck (offline): PASS")


def test_unknown_check_name_is_one_line_exit_2() -> None:
    out = _run_cli("--offline", "--only", "no-such-check")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "no-such-check" in out.stderr and "known:" in out.stderr


def _crash(ctx: Context) -> framework.CheckResult:
    raise RuntimeError("boom")


def _user_error(ctx: Context) -> framework.CheckResult:
    raise UserError("weights folder /models missing; mount it")


def test_statuses_and_exit_codes() -> None:
    checks = [
        Check("ok", lambda ctx: passed("fine", n=1)),
        Check("bad", lambda ctx: failed("wrong")),
        Check("na", lambda ctx: skipped("not here")),
        Check("crash", _crash),
        Check("user", _user_error),
        Check("net", lambda ctx: passed("reached"), needs_network=True),
        Check("wrongtype", lambda ctx: "pass"),  # type: ignore[arg-type,return-value]
    ]
    outcomes = {o.name: o.result for o in framework.run_checks(checks, Context(offline=True))}
    assert outcomes["ok"].status == "pass" and outcomes["ok"].data == {"n": 1}
    assert outcomes["bad"].status == "fail"
    assert outcomes["na"].status == "skip"
    assert outcomes["crash"].status == "error" and "RuntimeError: boom" in outcomes["crash"].detail
    assert outcomes["user"].status == "fail" and "mount it" in outcomes["user"].detail
    assert outcomes["net"].status == "skip"
    assert outcomes["wrongtype"].status == "error"
    online = framework.run_checks(checks[5:6], Context(offline=False))
    assert online[0].result.status == "pass"


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["pass", "skip"], ("pass", 0)),
        (["pass", "error"], ("error", 2)),
        (["error", "fail"], ("fail", 1)),
        ([], ("pass", 0)),
    ],
)
def test_overall(statuses: list[str], expected: tuple[str, int]) -> None:
    outcomes = [framework.Outcome(str(i), framework.CheckResult(s, ""), 0.0) for i, s in enumerate(statuses)]  # type: ignore[arg-type]
    assert framework.overall(outcomes) == expected


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="package"):
        framework.check("package")(lambda ctx: passed("again"))


def test_a_module_that_cannot_load_is_an_error_not_a_crash() -> None:
    problems = framework.load_check_modules(["no_such_selfcheck_module"])
    assert [p.name for p in problems] == ["load:no_such_selfcheck_module"]
    assert problems[0].result.status == "error"
    report = framework.report_dict(problems, Context())
    assert report["exit_code"] == 2 and report["counts"]["error"] == 1
    assert "ERROR" in framework.format_table(report)
