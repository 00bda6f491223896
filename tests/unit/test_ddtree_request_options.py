"""Request options per verify row (patch ddtree-request-options) in the real patched sglang on CPU.

tree_penalties.adjust_verify_logits adjusts every row of a DDTREE tree (or a DFLASH chain) for the output it
would follow; the reference (tests/unit/request_options_probe.py) is plain decoding one token at a time:
SGLang's own penalizers fed the request's output and then the row's root-to-node path, token by token, and
the scheduler's forward copy of SamplingBatchInfo applying them. Frequency, presence and repetition penalties,
min_new_tokens (EOS and a stop id, with the boundary inside the tree) and logit_bias, five requests with
different settings in one batch, random trees with repeated tokens (the root's too) and padding nodes.
advance_penalties is checked over several verify steps against plain decoding's one-token-per-step feeding.
Stand-ins are named in the probe's docstring. The GPU side (crafted models, DDTREE/DFLASH vs plain decoding
through the server) is tests/gpu/stress_ddtree.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("request_options_probe.py")


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_probe(PROBE, "REQUEST-OPTIONS-PROBE", sglang_cpu_path)


@pytest.mark.parametrize("case", ["tree_n9", "tree_n17", "tree_fresh", "chain_b8"])
def test_every_row_equals_plain_decoding_fed_its_path_one_token_at_a_time(facts: dict, case: str) -> None:
    got = facts[case]
    assert got["same_inf"], f"{case}: the banned (-inf) entries differ from plain decoding's"
    assert got["max_abs_diff"] == 0.0 and got["bit_equal_fraction"] == 1.0, got
    assert got["argmax_equal"], got


@pytest.mark.parametrize("case", ["tree_n9", "tree_n17", "chain_b8"])
def test_cases_need_per_row_adjustment(facts: dict, case: str) -> None:
    """The cases tell per-row adjustment apart: one adjustment per request (what verify did before) differs
    from the reference, and min_new_tokens' boundary falls inside the tree (EOS banned on some rows only)."""
    got = facts[case]
    assert not got["per_request_matches_reference"], got
    assert got["min_new_boundary_inside"], got
    assert got["changed_rows"] > got["rows"] // 2, got


def test_advancing_by_committed_rows_equals_plain_decodings_feeding(facts: dict) -> None:
    got = facts["advance"]
    assert got["same_inf"] and got["max_abs_diff"] == 0.0 and got["argmax_equal"], got
    assert min(got["output_lens"]) > 4, "the steps should commit several tokens per request"


@pytest.mark.parametrize("mode", ["ddtree", "dflash"])
def test_speculative_greedy_decoding_equals_plain_decoding_with_every_option(facts: dict, mode: str) -> None:
    """Whole decodes through DDTreeVerifyInput.verify / DFlashVerifyInput.verify on a Markov target (a logit
    table: a 7 <-> 9 loop that penalties break, EOS right after 11 that min_new_tokens bans), six requests
    with different options in one batch, finished ones filtered out as the scheduler does."""
    got = facts["decode"][mode]
    assert all(got["equal"]), (
        f"{mode} differs from plain decoding: {got['outputs']} vs {facts['decode']['plain']}"
    )
    assert got["accepted"] > got["steps"], (
        f"{mode}: too few drafts accepted to exercise multi-token steps: {got}"
    )


def test_decode_options_change_the_greedy_output(facts: dict) -> None:
    """Each option's request decodes differently from the same request without options (the last has none)."""
    changed = facts["decode"]["options_change_output"]
    assert changed == [True] * (len(changed) - 1) + [False], changed
    assert len(facts["decode"]["plain"][2]) > 14, "min_new_tokens 14 must keep EOS away for 14 tokens"


def test_sampling_at_temperature_1_with_every_option_keeps_plain_decodings_distribution(facts: dict) -> None:
    """20000 requests, two DDTREE sampling verify steps: the first two tokens' joint counts against plain
    decoding's exact distribution (chi-square, p = 0.001), and against the distribution without each row's
    path (the old per-request adjustment), which must be rejected. min_new_tokens 2 bans EOS first."""
    got = facts["chi_square"]
    assert got["stat"] < got["critical"], got
    assert got["without_path_stat"] > got["without_path_critical"], got
    assert got["first_is_eos"] == 0, got


def test_the_device_script_runs_its_equality_check_on_cpu(sglang_cpu_path: str) -> None:  # noqa: F811
    """tests/gpu/request_options_gpu.py --device cpu: the script's own path (batches, trees, the step, the
    verdict) works before it meets the H200; the CUDA parts run only there (device_ddtree.sh options)."""
    script = Path(__file__).resolve().parents[1] / "gpu" / "request_options_gpu.py"
    env = {**os.environ, "PYTHONPATH": sglang_cpu_path, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(script), "--device", "cpu"], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "ok   cpu equals CPU" in done.stdout and "request-options: PASS" in done.stdout, done.stdout
