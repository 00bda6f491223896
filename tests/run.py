"""Run pytest and refuse a run that executed no test: "no tests ran" must never pass silently."""

from __future__ import annotations

import sys

import pytest


class _Counter:
    def __init__(self) -> None:
        self.executed = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and not report.skipped:
            self.executed += 1


def main(argv: list[str]) -> int:
    counter = _Counter()
    code = pytest.main(argv, plugins=[counter])
    if code == pytest.ExitCode.NO_TESTS_COLLECTED or (code == 0 and counter.executed == 0):
        print("error: no test was executed; check the -m marker expression", file=sys.stderr)
        return 1
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
