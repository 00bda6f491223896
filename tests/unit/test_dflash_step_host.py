"""The host-light DFLASH/DDTREE step (patch 0008-dflash-step-host) on CPU, in the real patched sglang
0.5.13.post1.

Each new piece is compared with the upstream code it replaces, in the same patched tree, on the same inputs
(tests/unit/dflash_step_probe.py runs them; TRITON_INTERPRET=1 runs the Triton kernels on CPU): the compact
draft cache rewrite (kernel and torch fallback vs DFlashWorker's masked gather + assign), the tree mask kernel
vs ddtree_utils.flatten_verify_mask, the draft lengths computed on the host, DFLASH's verify with
SGLANG_DFLASH_FAST_STEP=1 vs =0, the keep/free index builders, and the mask policy (no host mask for a chain
on the triton backend unless the target slides a window). Stand-ins are named in the probe's docstring. The
step's speed is measured on the device (benchmarks/pair, `device_pair.sh profile`), not here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("dflash_step_probe.py")


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    env = {"TRITON_INTERPRET": "1", "SGLANG_DFLASH_FAST_STEP": None}
    return run_probe(PROBE, "DFLASH-STEP-PROBE", sglang_cpu_path, timeout=600, env=env)


@pytest.mark.parametrize("case", ["short_and_long_p1", "page16", "window_2048_over_blocks"])
@pytest.mark.parametrize("path", ["kernel", "torch"])
def test_compact_rows_equal_upstreams_masked_gather(facts: dict, case: str, path: str) -> None:
    got = facts["compact"][case]
    assert got["kernel_module"], "the Triton kernel module did not load under the interpreter"
    assert got[path]["lens_equal"], f"{path}: draft lengths differ from upstream's ({got['lens']})"
    assert got[path]["rows_equal"], f"{path}: draft req_to_token rows differ from upstream's"


def test_compact_cases_cover_short_clamped_and_page_aligned_rows(facts: dict) -> None:
    assert facts["compact"]["short_and_long_p1"]["lens"] == [5, 64, 64, 64]
    # page 16: 300 -> visible 64 from 236, aligned to 224 -> 76 slots; 100 -> from 36, aligned to 32 -> 68
    assert facts["compact"]["page16"]["lens"] == [5, 76, 68, 17]
    assert facts["compact"]["window_2048_over_blocks"]["lens"] == [2048, 2048, 1, 700]


@pytest.mark.parametrize("case", ["short_and_long_p1", "page16", "window_2048_over_blocks"])
def test_draft_lengths_on_the_host_equal_the_devices(facts: dict, case: str) -> None:
    assert facts["compact"][case]["host_lens_equal"]


def test_dflash_verify_fast_step_equals_upstream(facts: dict) -> None:
    fast, upstream = facts["dflash_verify_fast"], facts["dflash_verify_upstream"]
    assert fast == upstream


def test_dflash_verify_keeps_each_requests_committed_prefix(facts: dict) -> None:
    v = facts["dflash_verify_fast"]
    # request 0 accepts 3, 4, bonus 20; request 1 rejects at once (bonus 21); request 2 finishes at 2 tokens
    assert v["output_ids"] == [[3, 4, 20], [21], [5, 6]]
    assert v["commit_lens"] == [3, 1, 2] and v["correct"] == [2, 0, 1]
    assert v["kept_slots"] == [100, 101, 102, 105, 110, 111]
    assert v["next_hidden_rows"] == [0.0, 1.0, 2.0, 5.0, 10.0, 11.0]
    assert sorted(v["freed"] + v["kept_slots"]) == list(range(100, 115))
    assert v["req_to_token"][2][4:7] == [100, 101, 102] and v["req_to_token"][0][9] == 105
    assert v["seq_lens"] == [7, 10, 8] == v["seq_lens_cpu"] and v["seq_lens_sum"] == 25


def test_keep_and_free_indices_follow_the_chain_and_the_path(facts: dict) -> None:
    ix = facts["indices"]
    assert ix["chain_kept"] == [0, 1, 8, 9, 10] and ix["chain_freed"] == [2, 3, 4, 5, 6, 7, 11]
    # tree width 9: request 0 keeps root, node 4 (slot 5), node 6 (slot 7); request 2 keeps 2 of its path
    assert ix["tree_kept"] == [0, 5, 7, 9, 18, 19]
    assert sorted(ix["tree_kept"] + ix["tree_freed"]) == list(range(27))


def test_host_lists_reach_the_device_helper_unchanged_in_value_and_dtype(facts: dict) -> None:
    """host_ints_to_device (torch.frombuffer over an array for int64/int32 since patch 0032): every value,
    the extremes of each width included, and the dtype asked for; empty lists and other dtypes too."""
    for case in facts["host_ints"]:
        assert case["got"] == case["values"], case
        assert case["got_dtype"] == case["dtype"], case
    assert len(facts["host_ints"]) == 6


def test_chain_verify_on_triton_needs_no_host_mask_unless_the_target_slides(facts: dict) -> None:
    fast, upstream = facts["mask_policy"]["1"], facts["mask_policy"]["0"]
    assert fast == {"triton": False, "triton_window": True, "flashinfer": False, "hybrid_triton": False}
    assert upstream == {"triton": True, "triton_window": True, "flashinfer": False, "hybrid_triton": True}


@pytest.mark.parametrize("case", ["bs3_budget8", "bs1_budget16_long", "bs2_budget32"])
def test_tree_mask_kernel_equals_the_flat_mask_of_ddtree_utils(facts: dict, case: str) -> None:
    got = facts["tree_mask"][case]
    assert got["dtype"] == "torch.bool"
    assert got["equal"], f"{case}: the kernel's flat mask differs from flatten_verify_mask's"


@pytest.mark.parametrize("case", ["three_requests_window", "one_request", "no_window_full_blocks"])
def test_padded_kv_append_writes_what_the_eager_append_writes(facts: dict, case: str) -> None:
    """Patch ddtree-step-graph: the KV append its CUDA graph captures (run eagerly on CPU, the replay is
    checked on the device) places every committed row where the eager append does, sends only the padding to
    slot 0, and leaves the same compact draft rows and lengths."""
    got = facts["padded_append"][case]
    assert got["same_placement"], got
    assert got["placed"] == got["total_ctx"] == got["eager_writes"]
    assert got["padded_writes"] - got["padding_to_slot_0"] == got["total_ctx"]
    assert got["same_lens"] and got["same_draft_rows"]


def test_the_decode_loops_kv_append_replays_its_graph_and_a_prefills_does_not(facts: dict) -> None:
    """Patch ddtree-step-graph's routing (a stand-in capture on CPU): the append after a verify
    (TARGET_VERIFY) and before a draft (DECODE) replays the graph, a prefill's (EXTEND) runs eagerly; all
    three leave the same draft lengths (a copy, not the graph's output, which the next replay rewrites) and
    consume the rows."""
    got = facts["append_routing"]
    assert [got[m]["replays"] for m in ("TARGET_VERIFY", "DECODE", "EXTEND")] == [1, 1, 0]
    assert got["TARGET_VERIFY"]["lens"] == got["DECODE"]["lens"] == got["EXTEND"]["lens"] == [16, 9]
    for mode in ("TARGET_VERIFY", "DECODE", "EXTEND"):
        assert got[mode]["ctx_lens_zeroed"] and got[mode]["hidden_emptied"], mode
        assert got[mode]["committed_rows_written"] == 5, mode
    assert got["TARGET_VERIFY"]["lens_not_the_graph_output"] is True


def test_dflash_chain_stage_is_the_root_then_the_greedy_block(facts: dict) -> None:
    """Patch ddtree-step-graph's DFLASH chain stage, the function its CUDA graph captures (run eagerly on
    CPU; the served replay is checked by the device smoke's greedy identity)."""
    assert facts["chain_stage"] == {"equal": True, "shape": [15]}


def test_step_graph_captures_refuse_through_one_path_and_say_why_once(facts: dict) -> None:
    """Patch ddtree-step-graph: the KV append, the chain stage and the tree stage are refused by
    step_graphs.capture_for_target: the switch first (on unless SGLANG_DFLASH_STEP_GRAPHS=0: then all three
    eager), then the device, then
    each stretch's own conditions, asked only once those pass (the RoPE cache is pinned for an append that
    got that far, at the target's context - 1, and for no other); the reason is kept on the worker and logged
    once at rank 0 under the stretch's name."""
    got = facts["capture_refusals"]
    off = got["switch_off"]
    for stretch, name in (("kv_append", "DFLASH KV append"), ("chain", "DFLASH chain stage"),
                          ("tree", "DDTREE tree stage")):  # fmt: skip
        assert off[stretch]["graphs"] is None, stretch
        assert len(off[stretch]["logged"]) == 1, off[stretch]
        assert off[stretch]["logged"][0].startswith(f"{name} runs eagerly: SGLANG_DFLASH_STEP_GRAPHS=0")
    assert off["kv_append"]["refusal"] == "SGLANG_DFLASH_STEP_GRAPHS=0 (switched off)"
    assert got["unset_slow_step"]["refusal"] == "SGLANG_DFLASH_FAST_STEP=0", "unset is on: the switch passes"
    assert off["tree"]["refusal"] == off["kv_append"]["refusal"]
    on = got["switch_on"]
    assert all(case["graphs"] is None for case in on.values()), on
    assert on["kv_append_slow_step"]["refusal"] == "SGLANG_DFLASH_FAST_STEP=0"
    assert on["kv_append_no_fused_helper"]["refusal"] == "the fused KV materialization is off"
    assert on["kv_append_pins_rope"]["refusal"] == "pinning refused (stand-in)"
    assert on["kv_append_pins_rope"]["logged"] == [
        "DFLASH KV append runs eagerly: pinning refused (stand-in)"
    ]
    assert on["kv_append_cpu"]["refusal"] == "the device is cpu, not CUDA"
    assert (
        on["kv_append_rank1"]["refusal"] == "pinning refused (stand-in)"
        and on["kv_append_rank1"]["logged"] == []
    )
    assert got["pinned"] == [63, 63], "only the two appends that passed the common checks pin the RoPE cache"
    assert on["chain_no_lm_head"]["logged"] == [
        "DFLASH chain stage runs eagerly: the target has no LM head weight"
    ]
    assert on["chain_cpu"]["logged"] == ["DFLASH chain stage runs eagerly: the device is cpu, not CUDA"]
    assert on["tree_cpu"]["refusal"] == "the device is cpu, not CUDA"
    assert on["tree_cpu"]["logged"] == ["DDTREE tree stage runs eagerly: the device is cpu, not CUDA"]
    assert got["target_lm_head"] == {
        "is_the_targets": True,
        "none_without_one": True,
        "tree_worker_inherits": True,
    }
