"""Run pytest, end with one count line per tier, and refuse a run that executed no test.

"no tests ran" must never pass silently. The closing lines are `TIER: N passed, N failed, N skipped`
(one per tier that ran), then `total: ...` when more than one ran: the plain closing-line form CI reads.
With DDTREE_TEST_SUMMARY=FILE the same counts and the exit code are written there as JSON, for
tests/ci.py, which sums the steps of a CI run.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

import pytest

from tests.conftest import TIERS

OTHER = "other"  # a test outside tests/<tier>/ (a path given by hand)
SUMMARY_ENV = "DDTREE_TEST_SUMMARY"


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0

    def line(self, label: str) -> str:
        return f"{label}: {self.passed} passed, {self.failed} failed, {self.skipped} skipped"


def tier_of(nodeid: str) -> str:
    """The tier a test belongs to: its folder under tests/ (as tests/conftest.py marks it)."""
    parts = PurePosixPath(nodeid.split("::", 1)[0]).parts
    if len(parts) >= 2 and parts[0] == "tests" and parts[1] in TIERS:
        return parts[1]
    return OTHER


class TierCounter:
    """One outcome per test: failed when any phase failed (a setup or teardown error too), else skipped
    when a phase skipped (xfail included), else passed. A file that fails to collect counts as failed."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.executed = 0

    def _record(self, nodeid: str, outcome: str) -> None:
        previous = self.outcomes.get(nodeid)
        if previous == "failed" or (previous == "skipped" and outcome == "passed"):
            return
        self.outcomes[nodeid] = outcome

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and not report.skipped:
            self.executed += 1
        if report.failed:
            self._record(report.nodeid, "failed")
        elif report.skipped:
            self._record(report.nodeid, "skipped")
        elif report.when == "call":
            self._record(report.nodeid, "passed")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._record(report.nodeid, "failed")

    def by_tier(self) -> dict[str, Counts]:
        tiers: dict[str, Counts] = {}
        for nodeid, outcome in self.outcomes.items():
            counts = tiers.setdefault(tier_of(nodeid), Counts())
            setattr(counts, outcome, getattr(counts, outcome) + 1)
        order = [*TIERS, OTHER]
        return dict(sorted(tiers.items(), key=lambda item: order.index(item[0])))


def closing_lines(tiers: dict[str, Counts]) -> list[str]:
    lines = [counts.line(tier) for tier, counts in tiers.items()]
    if len(tiers) > 1:
        total = Counts(*(sum(getattr(c, f) for c in tiers.values()) for f in ("passed", "failed", "skipped")))
        lines.append(total.line("total"))
    return lines


def write_summary(path: Path, code: int, tiers: dict[str, Counts]) -> None:
    from ddtree.fsutil import atomic_write

    record = {"exit": code, "tiers": {tier: asdict(counts) for tier, counts in tiers.items()}}
    atomic_write(path, json.dumps(record, indent=1) + "\n")


def main(argv: list[str]) -> int:
    counter = TierCounter()
    code = int(pytest.main(argv, plugins=[counter]))
    if code == pytest.ExitCode.NO_TESTS_COLLECTED or (code == 0 and counter.executed == 0):
        print("error: no test was executed; check the -m marker expression", file=sys.stderr)
        code = 1
    tiers = counter.by_tier()
    sys.stdout.flush()
    for line in closing_lines(tiers) or [Counts().line("total")]:
        print(line)
    summary = os.environ.get(SUMMARY_ENV)
    if summary:
        write_summary(Path(summary), code, tiers)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
