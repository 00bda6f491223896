"""The request options on the drafter's logits (patch ddtree-draft-penalties, issue 28) in the real patched
sglang on CPU.

The verify applies penalties, logit_bias and min_new_tokens exactly per node (patch ddtree-request-options),
but an unpenalized drafter rarely proposes the token the penalized target picks (DDTREE-16 on the H200,
2026-12-03: frequency_penalty 0.5 took the acceptance from 2.70 to 1.78 tokens per verify). The drafter now
sees the running state at the root. The probe is tests/unit/draft_penalties_probe.py.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from ddtree_build.paths import REPO_ROOT

from tests.unit.test_ddtree_kernels import run_script
from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("draft_penalties_probe.py")
TREE_PENALTIES = "sglang/srt/speculative/tree_penalties.py"


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


KERNEL_CHECK = r"""
import json, sys
import torch
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests/unit"]  # the repository root: the probe's batches
from ddt import tree_penalties as tp
import draft_penalties_probe as probe

batch = probe.mixed_batch()
bs, depth, vocab = len(probe.MIXED), probe.DEPTH, probe.VOCAB
adjustment = tp.draft_adjustment(batch.sampling_info, torch.tensor(probe.ROOTS), depth)
logits = torch.randn(bs * depth, vocab, generator=torch.Generator().manual_seed(4)) * 3
outs = {}
for forced in (False, True):
    tp._kernel_applies = lambda logits, tables, forced=forced: forced
    whole = logits.clone()
    tp.adjust_draft_logits(whole, adjustment)
    split = logits.clone()
    for first in range(0, bs, 2):  # views: rows wider than their shard, tables sliced by request and column
        for start, end in ((0, 17), (17, vocab)):
            view = split[first * depth : (first + 2) * depth, start:end]
            tp.adjust_draft_logits(view, adjustment, row_start=first * depth, col_start=start)
    outs[forced] = (whole, split)
bits = lambda t: t.contiguous().view(torch.int32)
print("DRAFT-KERNEL " + json.dumps({
    "whole_bit_equal": bool(torch.equal(bits(outs[True][0]), bits(outs[False][0]))),
    "split_bit_equal": bool(torch.equal(bits(outs[True][1]), bits(outs[False][0]))),
    "changed_rows": int((outs[True][0] != logits).any(dim=1).sum()),
}))
"""


def test_the_running_kernel_gives_the_torch_paths_draft_logits_on_sliced_tables(
    tmp_path_factory: pytest.TempPathFactory,
    sglang_cpu_path: str,  # noqa: F811
) -> None:
    """On CUDA adjust_draft_logits runs the running-penalties Triton kernel (patch ddtree-request-options) on
    tables sliced by request and column and on logits views wider than their shard: in Triton's interpreter it
    equals the torch path bit for bit, whole and split (the request without options keeps its rows)."""
    package = tmp_path_factory.mktemp("draft") / "ddt"  # the patched tree_penalties.py (0011 + 0031) alone
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(Path(sglang_cpu_path.split(os.pathsep)[0]) / TREE_PENALTIES, package / "tree_penalties.py")
    got = run_script(KERNEL_CHECK, "DRAFT-KERNEL", package, sglang_cpu_path, interpret=True, timeout=900,
                     args=[str(REPO_ROOT)])  # fmt: skip
    assert got == {"whole_bit_equal": True, "split_bit_equal": True, "changed_rows": 12}, got
