"""Server arguments in any spelling (issue 30): generated extra arguments (aliases, abbreviations, `=`,
repeats, values in and out of range, words) planned by `ddtree serve` with SGLang's own parser and with the
token fallback used where SGLang is absent.

Properties: every plan ends accepted or refused with one line and exit 2, never a traceback; accepted with
SGLang's parser, every checked value SGLang will use is in range and TP is the value SGLang reads; accepted
by the fallback, SGLang either refuses the line itself or reads the same values (no spelling slips past).

Real parts: the real pinned SGLang 0.5.13.post1 wheel with the project's patch series applied (the CPU
environment tests/unit/test_ddtree_sglang.py builds under .cache/), its real parser, the real profile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree.serve import values as serve_values
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_ddtree_sglang import sglang_cpu_path  # noqa: F401 - the fixture that builds it

REPO = Path(__file__).resolve().parents[2]
# spellings SGLang 0.5.13.post1 reads for each checked option: aliases, abbreviations, the profile's --tp
SPELLINGS = {
    "--tp-size": ["--tp-size", "--tp", "--tensor-parallel-size", "--tensor-parallel-si", "--tp-s"],
    "--port": ["--port", "--po", "--por"],
    "--speculative-num-draft-tokens": ["--speculative-num-draft-tokens", "--speculative-num-draft-tok"],
    "--mem-fraction-static": ["--mem-fraction-static", "--mem-fraction", "--mem-frac"],
    "--context-length": ["--context-length", "--context-len"],
}
VALUES = st.one_of(
    st.integers(-2, 70_000).map(str),
    st.sampled_from(
        ["8", "4", "2", "1", "0", "65", "0.5", "1.0", "1e3", "abc", "", "nan", "inf", "31000", "32k", "1M"]
    ),
)


@st.composite
def extras(draw) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        flag = draw(st.sampled_from(sorted(SPELLINGS)))
        spelling = draw(st.sampled_from(SPELLINGS[flag]))
        value = draw(VALUES)
        argv += [f"{spelling}={value}"] if draw(st.booleans()) else [spelling, value]
    return argv


class Driver:
    """tests/unit/server_flags_driver.py in a subprocess: one SGLang import for all examples."""

    def __init__(self, path: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([path, str(REPO / "entrypoint"), str(REPO)])}
        self.proc = subprocess.Popen(
            [sys.executable, "-W", "ignore", "-m", "tests.unit.server_flags_driver"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=REPO, env=env,
        )  # fmt: skip
        first = json.loads(self.proc.stdout.readline() or "{}")  # type: ignore[union-attr]
        if not first.get("ready"):
            pytest.fail("SGLang's server parser could not be built in the CPU environment")

    def ask(self, extra: list[str]) -> dict:
        self.proc.stdin.write(json.dumps({"extra": extra}) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def driver(sglang_cpu_path: str):  # noqa: F811 - the imported fixture
    handle = Driver(sglang_cpu_path)
    yield handle
    handle.close()


def _numbers(values: dict) -> dict:
    return {flag: None if text is None else float(text) for flag, text in values.items()}


def _in_range(values: dict) -> None:
    for flag, text in values.items():
        if flag == "tp" or text is None:
            continue
        bounds, _ = serve_values.CHECKED_NUMBERS[flag]
        assert bounds.check(text) is not None, (flag, text)


@settings(max_examples=max(20, settings.default.max_examples))
@given(extra=extras())
def test_every_spelling_is_checked_on_the_value_sglang_uses(driver: Driver, extra: list[str]) -> None:
    answer = driver.ask(extra)
    for side in ("sglang", "tokens"):
        result = answer[side]
        assert result["code"] in (0, 2), (side, extra, result)
        if result["code"]:
            assert "\n" not in result["error"]
    real, tokens = answer["sglang"], answer["tokens"]
    if real["code"] == 0:
        _in_range(real["values"])
        assert str(real["values"]["tp"]) == real["values"]["--tp-size"], real
    if tokens["code"] == 0 and real["code"] == 0:  # the same numbers ("1" from the tokens, 1.0 from SGLang)
        assert _numbers(tokens["values"]) == _numbers(real["values"]), (extra, tokens, real)


@pytest.mark.parametrize(
    ("extra", "tp", "port"),
    [
        (["--tp-size", "4"], "4", "30000"),  # after the profile's --tp 8: SGLang keeps the last
        (["--tensor-parallel-size", "2"], "2", "30000"),
        (["--po", "31000"], "8", "31000"),
        (["--tp-s=1", "--por=31001"], "1", "31001"),
    ],
)
def test_the_value_sglang_uses_is_the_one_read(driver: Driver, extra: list[str], tp: str, port: str) -> None:
    answer = driver.ask(extra)
    assert answer["sglang"]["code"] == 0, answer
    assert (answer["sglang"]["values"]["--tp-size"], answer["sglang"]["values"]["--port"]) == (tp, port)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--tensor-parallel-size", "3"], None),  # in range; the heads/GPU checks judge it later
        (["--tensor-parallel-size", "0"], "--tensor-parallel-size/--tp-size '0' is not an integer >= 1"),
        (["--context-length", "32k"], None),  # SGLang reads 32768 (human_readable_int): in range
        (["--po", "0"], "--port '0' is not an integer >= 1 and <= 65535"),
        (["--mem-frac", "1.5"], "--mem-fraction-static '1.5' is not a number > 0"),
        (["--tp-s", "x"], "SGLang's argument parser refuses the server command line: argument "),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_out_of_range_in_any_spelling_is_refused(driver: Driver, extra: list[str], expected) -> None:
    result = driver.ask(extra)["sglang"]
    if expected is None:
        assert result["code"] == 0, result
    else:
        assert result["code"] == 2 and expected in result["error"], result


def test_the_fallback_knows_every_option_that_is_a_prefix_of_one_it_reads(driver: Driver) -> None:
    """A real option that is a strict prefix of a read one (`--model` of `--model-path`) must be an alias the
    fallback resolves, or the fallback would refuse it as an abbreviation."""
    driver.proc.stdin.write(json.dumps({"prefixes": True}) + "\n")  # type: ignore[union-attr]
    driver.proc.stdin.flush()  # type: ignore[union-attr]
    found = json.loads(driver.proc.stdout.readline())["prefixes"]  # type: ignore[union-attr]
    from ddtree.serve import server_flags

    assert found and set(found) <= set(server_flags.ALIASES), found


def test_the_fallback_refuses_abbreviations_it_cannot_resolve(driver: Driver) -> None:
    result = driver.ask(["--po", "0"])["tokens"]
    assert result["code"] == 2 and "--po abbreviates --port" in result["error"], result


ENV_NAMES = ["DDTREE_PORT", "DDTREE_TP", "DDTREE_HOST", "DDTREE_MODEL_DIR", "DDTREE_DRAFTER_DIR",
             "DDTREE_EXTRA_ARGS", "DDTREE_SKIP_CHECKS", "DDTREE_MIN_SHM_GIB", "DDTREE_API_KEY"]  # fmt: skip
ENV_VALUES = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=16),
    st.sampled_from(["8", "0", "-1", "65536", "1e400", "nan", "'unclosed", "--tp 3", "--po 0", "--tp=x"]),
)


@given(env=st.dictionaries(st.sampled_from(ENV_NAMES), ENV_VALUES, max_size=4), dry=st.booleans())
def test_generated_environments_end_in_one_line(env: dict[str, str], dry: bool, capsys, monkeypatch) -> None:
    """`ddtree serve` (no SGLang in this process: the token fallback) with generated DDTREE_* values:
    accepted or one line with exit 1/2, and the API key never shown. No exec: execvp is replaced."""
    from ddtree import cli
    from ddtree.serve import server_flags

    from tests.bad_input import assert_clean_outcome, run_cli

    monkeypatch.setattr(server_flags, "sglang_parser", lambda: None)
    monkeypatch.setattr(os, "execvp", lambda *a: (_ for _ in ()).throw(AssertionError("exec")))
    for name in [n for n in os.environ if n.startswith("DDTREE_")]:
        monkeypatch.delenv(name)
    key = "s3cr3t-api-key-0123"
    if "DDTREE_API_KEY" in env:  # a recognisable key: its value is not what is generated here
        env["DDTREE_API_KEY"] = key
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = ["serve", "--env-dir", str(REPO / "env"), "--target", "pro6000"] + (["--dry-run"] if dry else [])
    code, out, err = run_cli(cli.main, capsys, argv)
    assert_clean_outcome(code, err, secrets=[key])
    assert key not in "\n".join(out)
    if code == 0:
        assert dry, out
