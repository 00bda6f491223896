"""The request options on the drafter's logits (patch ddtree-draft-penalties, issue 28) in the real patched
sglang on CPU.

The verify applies penalties, logit_bias and min_new_tokens exactly per node (patch ddtree-request-options),
but an unpenalized drafter rarely proposes the token the penalized target picks (DDTREE-16 on the H200,
2026-12-03: frequency_penalty 0.5 took the acceptance from 2.70 to 1.78 tokens per verify). The drafter now
sees the running state at the root. The probe is tests/unit/draft_penalties_probe.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("draft_penalties_probe.py")


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_probe(
        PROBE, "DRAFT-PENALTIES-PROBE", sglang_cpu_path, env={"SGLANG_DDTREE_DRAFT_PENALTIES": None}
    )


def test_adjusted_draft_logits_equal_the_options_applied_by_hand_from_the_counts(facts: dict) -> None:
    """A mixed batch (every option; none; repetition only; logit_bias + min_new_tokens): each request's rows
    equal the hand reference (history + root counted), the request without options keeps its logits bit for
    bit, and min_new_tokens bans EOS/stop only on the rows whose output would still be too short."""
    got = facts["reference"]["per_request"]
    for request in got:
        assert request["same_inf"] and request["max_abs_diff"] < 1e-5, got
    assert [r["changed"] for r in got] == [True, False, True, True], got
    assert got[1]["bit_equal_input"], got
    assert got[0]["inf_rows"] == [1, 1, 0, 0], got  # 4 output tokens, min_new_tokens 6
    assert got[3]["inf_rows"] == [0, 0, 0, 0], got  # 4 output tokens, min_new_tokens 3: nothing held back


def test_shards_and_request_chunks_give_the_same_logits_as_the_whole_batch(facts: dict) -> None:
    """The TP path: column shards (col_start) and chunks of whole requests (row_start); a chunk that cuts a
    request is refused; LM-head columns past the tables' vocabulary are left as they are."""
    got = facts["reference"]
    assert got["split_equal"], got
    assert got["padded_equal"], got
    assert got["misaligned_refused"] and "whole requests" in got["misaligned_refused"], got


def test_a_batch_without_options_has_no_adjustment(facts: dict) -> None:
    assert facts["no_options"] == {"adjustment_is_none": True}


def test_switch_reads_1_and_0_and_refuses_other_values(facts: dict) -> None:
    got = facts["switch"]
    assert got["unset"] is True and got["'1'"] is True and got["'0'"] is False, got
    for value in ("'2'", "'true'", "''", "' 1'"):
        message = got[value]
        assert isinstance(message, str) and message.startswith("refused: SGLANG_DDTREE_DRAFT_PENALTIES="), got
        assert "\n" not in message, message


@pytest.mark.parametrize("mode", ["ddtree", "dflash"])
def test_only_a_batch_with_options_takes_the_adjusted_eager_draft_stage(facts: dict, mode: str) -> None:
    """_build_verify_input (v1 and the spec-v2 step both build through it): options and the switch on ->
    adjust_draft_logits, no graph replay, the tree (DDTREE) / chain (DFLASH) from the hand-adjusted logits,
    the request without options unchanged; the switch off, or a batch without options -> today's captured
    stage (one replay) and no adjust call."""
    got = facts[f"{mode}_routing"]
    shape = "tree" if mode == "ddtree" else "chain"
    assert got["options"]["adjust"] >= 1 and got["options"]["replay"] == 0, got
    assert got[f"options_{shape}_equals_hand_reference"], got
    assert got[f"options_{shape}_differs_from_unadjusted"], got
    if mode == "ddtree":
        assert got["unoptioned_request_tree_unchanged"], got
    assert got["switch_off"] == {"replay": 1, "adjust": 0}, got
    assert got[f"switch_off_{shape}_is_unadjusted"], got
    assert got["no_options"] == {"replay": 1, "adjust": 0}, got
    assert got[f"no_options_{shape}_is_unadjusted"], got


@pytest.mark.parametrize("mode", ["ddtree", "dflash"])
def test_greedy_decoding_with_the_adjusted_drafter_equals_plain_decoding_and_accepts_more(
    facts: dict, mode: str
) -> None:
    """Whole greedy decodes with every option (six requests, a Markov target whose 7 <-> 9 loop the penalties
    break): the outputs equal plain decoding with and without the drafter's adjustment (the verify is exact),
    and the adjusted drafter's proposals are accepted more (more tokens per verify)."""
    adjusted, unadjusted = facts["decode"][f"{mode}_adjusted"], facts["decode"][f"{mode}_unadjusted"]
    assert all(adjusted["equal"]) and all(unadjusted["equal"]), facts["decode"]
    assert adjusted["tokens_per_verify"] > unadjusted["tokens_per_verify"] * 1.05, facts["decode"]
