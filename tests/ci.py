"""CI's steps (`.ci/run`): `make test`, then the full-image tier on the image `make image` builds.

Each step runs even when the one before failed, so the closing lines always tell both: one line per step
(exit code, time, its tiers' counts), then `ci: N passed, N failed, N skipped` over all steps. A step
that failed outside any test (engine set-up, a crash before pytest) or that reported no counts is one
failure in that line, never a silent zero, and CI exits non-zero when any step did.

Standard library only: it runs with the system python3 before `make` has made the venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SUMMARY_ENV = "DDTREE_TEST_SUMMARY"  # read by tests/run.py
FIELDS = ("passed", "failed", "skipped")
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("make test", ("make", "test")),
    ("make test-slow", ("make", "test-slow")),
)


@dataclass
class StepResult:
    name: str
    exit_code: int
    seconds: float
    tiers: dict[str, dict[str, int]] = field(default_factory=dict)
    reported: bool = False  # tests/run.py wrote its summary

    def count(self, what: str) -> int:
        return sum(counts.get(what, 0) for counts in self.tiers.values())

    def unexplained_failure(self) -> bool:
        """Failed (or told nothing) without a failing test to show for it."""
        return (self.exit_code != 0 or not self.reported) and self.count("failed") == 0

    def ok(self) -> bool:
        return (
            self.exit_code == 0 and self.reported and self.count("failed") == 0 and self.count("passed") > 0
        )


def run_step(name: str, argv: Sequence[str], summary_file: Path) -> StepResult:
    print(f"ci: step {name!r}: {' '.join(argv)}", flush=True)
    summary_file.unlink(missing_ok=True)
    start = time.monotonic()
    code = subprocess.run(
        list(argv), cwd=REPO_ROOT, env={**os.environ, SUMMARY_ENV: str(summary_file)}
    ).returncode
    result = StepResult(name, code, time.monotonic() - start)
    if summary_file.is_file():
        record = json.loads(summary_file.read_text())
        result.tiers = record.get("tiers", {})
        result.reported = True
    return result


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def step_line(result: StepResult) -> str:
    status = "ok" if result.ok() else "FAILED"
    tiers = "; ".join(
        f"{tier} " + ", ".join(f"{counts.get(f, 0)} {f}" for f in FIELDS)
        for tier, counts in result.tiers.items()
    )
    line = f"ci: {status}: {result.name!r} exit {result.exit_code} in {_minutes(result.seconds)}"
    if tiers:
        line += f": {tiers}"
    else:
        line += ": no test ran" if result.reported else ": no test counts reported"
    if result.unexplained_failure():
        line += " (counted below as 1 failure: no failing test accounts for it)"
    return line


def closing_line(results: Sequence[StepResult]) -> str:
    passed = sum(r.count("passed") for r in results)
    failed = sum(r.count("failed") + (1 if r.unexplained_failure() else 0) for r in results)
    skipped = sum(r.count("skipped") for r in results)
    return f"ci: {passed} passed, {failed} failed, {skipped} skipped"


def main(steps: Sequence[tuple[str, Sequence[str]]] = STEPS) -> int:
    results = []
    with tempfile.TemporaryDirectory(prefix="ddtree-ci-") as tmp:
        for index, (name, argv) in enumerate(steps):
            results.append(run_step(name, argv, Path(tmp) / f"step-{index}.json"))
    print()
    for result in results:
        print(step_line(result))
    print(closing_line(results), flush=True)
    return 0 if all(r.ok() for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
