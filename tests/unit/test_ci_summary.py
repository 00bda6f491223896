"""tests/run.py's tier lines and tests/ci.py's step summary: real pytest runs and real child processes on
throw-away test files, so what CI's closing lines say is checked against what really ran."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ci
from tests import run as runner

PLAIN_CLOSING = r"^(\w+: )?\d+ passed, \d+ failed(, \d+ skipped)?$"


def _suite(root: Path) -> Path:
    """A tests/ tree with a unit file (pass, fail, skip, setup error) and a docker file (one pass)."""
    (root / "tests" / "unit").mkdir(parents=True)
    (root / "tests" / "docker").mkdir(parents=True)
    (root / "tests" / "unit" / "test_mix.py").write_text(
        "import pytest\n"
        "@pytest.fixture\n"
        "def broken():\n"
        "    raise RuntimeError('setup')\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert False\n"
        "def test_skip(): pytest.skip('no')\n"
        "def test_error(broken): pass\n"
    )
    (root / "tests" / "docker" / "test_one.py").write_text("def test_ok(): pass\n")
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    return root


def _run_runner(root: Path, *args: str, summary: Path | None = None) -> subprocess.CompletedProcess:
    """tests/run.py in a child, on the throw-away suite (rootdir = root, so node ids start with tests/)."""
    env = {k: v for k, v in os.environ.items() if k != runner.SUMMARY_ENV}
    if summary is not None:
        env[runner.SUMMARY_ENV] = str(summary)
    code = "import sys; from tests import run; sys.exit(run.main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "-p", "no:cacheprovider", "--rootdir", str(root), *args]
    env["PYTHONPATH"] = str(Path(runner.__file__).resolve().parent.parent)
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_tier_of_follows_the_folder() -> None:
    assert runner.tier_of("tests/unit/test_x.py::test_a[1]") == "unit"
    assert runner.tier_of("tests/slow/test_full_image.py::test_b") == "slow"
    assert runner.tier_of("elsewhere/test_x.py::test_a") == runner.OTHER


def test_runner_ends_with_one_line_per_tier_and_a_total(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    summary = tmp_path / "summary.json"
    out = _run_runner(root, "tests", summary=summary)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 1, out.stdout + out.stderr
    # The setup error counts as failed; the skip as skipped.
    assert lines[-3:] == [
        "unit: 1 passed, 2 failed, 1 skipped",
        "docker: 1 passed, 0 failed, 0 skipped",
        "total: 2 passed, 2 failed, 1 skipped",
    ]
    assert re.match(PLAIN_CLOSING, lines[-1])
    record = json.loads(summary.read_text())
    assert record["exit"] == 1
    assert record["tiers"]["unit"] == {"passed": 1, "failed": 2, "skipped": 1}


def test_runner_refuses_a_run_that_executed_nothing(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    summary = tmp_path / "summary.json"
    out = _run_runner(root, "tests/unit", "-k", "test_skip", summary=summary)
    assert out.returncode == 1
    assert "no test was executed" in out.stderr
    assert out.stdout.strip().splitlines()[-1] == "unit: 0 passed, 0 failed, 1 skipped"
    assert json.loads(summary.read_text())["exit"] == 1


def test_runner_counts_a_file_that_fails_to_collect(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    (root / "tests" / "docker" / "test_broken.py").write_text("import no_such_module_here\n")
    out = _run_runner(root, "tests/docker")
    assert out.returncode != 0
    assert out.stdout.strip().splitlines()[-1] == "docker: 0 passed, 1 failed, 0 skipped"


def _step(tmp_path: Path, name: str, exit_code: int, tiers: dict | None) -> tuple[str, list[str]]:
    """A CI step that writes `tiers` as tests/run.py would (or nothing) and exits with `exit_code`."""
    write = ""
    if tiers is not None:
        record = json.dumps({"exit": exit_code, "tiers": tiers})
        write = f"open(os.environ[{ci.SUMMARY_ENV!r}], 'w').write({record!r}); "
    return name, [sys.executable, "-c", f"import os, sys; {write}sys.exit({exit_code})"]


def test_ci_passes_only_when_every_step_passed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = [
        _step(tmp_path, "make test", 0, {"unit": {"passed": 3, "failed": 0, "skipped": 1}}),
        _step(tmp_path, "make test-slow", 0, {"slow": {"passed": 5, "failed": 0, "skipped": 0}}),
    ]
    assert ci.main(steps) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "ci: 8 passed, 0 failed, 1 skipped"
    assert lines[-3].startswith("ci: ok: 'make test' exit 0 in 0 min")
    assert lines[-2].endswith("slow 5 passed, 0 failed, 0 skipped")


def test_ci_fails_and_says_so_when_the_first_step_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The second step still runs, so both are told; a failure outside any test is counted, not hidden."""
    steps = [
        _step(tmp_path, "make test", 2, None),  # e.g. the engine could not be set up
        _step(tmp_path, "make test-slow", 0, {"slow": {"passed": 5, "failed": 0, "skipped": 0}}),
    ]
    assert ci.main(steps) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].startswith("ci: FAILED: 'make test' exit 2")
    assert "no test counts reported" in lines[-3] and "1 failure" in lines[-3]
    assert lines[-2].startswith("ci: ok: 'make test-slow'")
    assert lines[-1] == "ci: 5 passed, 1 failed, 0 skipped"


def test_ci_fails_when_the_full_image_tier_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = [
        _step(tmp_path, "make test", 0, {"unit": {"passed": 3, "failed": 0, "skipped": 0}}),
        _step(tmp_path, "make test-slow", 1, {"slow": {"passed": 2, "failed": 3, "skipped": 0}}),
    ]
    assert ci.main(steps) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("ci: FAILED: 'make test-slow' exit 1")
    assert lines[-1] == "ci: 5 passed, 3 failed, 0 skipped"


def test_ci_does_not_take_silence_for_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A step that exits 0 without reporting counts (a target that ran no pytest) fails CI."""
    steps = [_step(tmp_path, "make test", 0, None)]
    assert ci.main(steps) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == "ci: 0 passed, 1 failed, 0 skipped"


def test_ci_names_a_step_whose_runner_ran_no_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tests/run.py exits 1 with empty counts when a marker selects nothing; CI says so and fails."""
    steps = [_step(tmp_path, "make test-slow", 1, {})]
    assert ci.main(steps) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("ci: FAILED: 'make test-slow' exit 1") and ": no test ran (" in lines[-2]
    assert lines[-1] == "ci: 0 passed, 1 failed, 0 skipped"
