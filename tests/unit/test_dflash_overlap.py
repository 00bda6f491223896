"""Overlap scheduling for DFLASH/DDTREE (issue 25): the switch (patch dflash-overlap-switch), the spec-v2
inputs (patch dflash-overlap-inputs), DFLASH's v2 decode step (patch dflash-overlap-step) and DDTREE's
(patch ddtree-overlap-step), in the real patched sglang 0.5.13.post1 on CPU (no GPU here: the models are
scripts, see below).

SGLANG_DFLASH_OVERLAP is read once per process, so tests/unit/dflash_overlap_probe.py runs twice: switch off
(today's path must be unchanged: overlap forced off, v1 everywhere) and switch on. With it on, a host
simulation drives the real ScheduleBatch / Req / ReqToTokenPool / TokenToKVPoolAllocator / ChunkCache,
Scheduler.run_batch's overlap branch and the real result processor through requests arriving, decoding with
scripted acceptance, stopping and finishing one step late, and checks every forward's KV slots and the final
allocator state; the worker is either a script or the real DFlashWorker's / DDTreeWorker's steps (made
without __init__, its target and drafter scripted). One v2 decode step of each real worker is also compared
with one v1 step from the same state, and its device-to-host copies are counted. The stand-ins (scripted
models, torch loops for the Triton kernels, a batch selection that mirrors get_next_batch_to_run with a
simple admission budget or the real PrefillAdder under chunked prefill) are listed in the probe's docstrings.
Chunked prefill, aborts in flight (the real Scheduler.abort_request) and retraction with the radix cache run
through the same loop.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path, write_tiny_pair  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("dflash_overlap_probe.py")
MARKER = "DFLASH-OVERLAP-PROBE"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return write_tiny_pair(tmp_path_factory.mktemp("overlap-models"))


@pytest.fixture(scope="module")
def off(sglang_cpu_path: str, models: tuple[str, str]) -> dict:  # noqa: F811
    return run_probe(PROBE, MARKER, sglang_cpu_path, *models, timeout=600, env={"SGLANG_DFLASH_OVERLAP": "0"})


@pytest.fixture(scope="module")
def unset(sglang_cpu_path: str, models: tuple[str, str]) -> dict:  # noqa: F811
    return run_probe(
        PROBE, MARKER, sglang_cpu_path, *models, timeout=600, env={"SGLANG_DFLASH_OVERLAP": None}
    )


@pytest.fixture(scope="module")
def on(sglang_cpu_path: str, models: tuple[str, str]) -> dict:  # noqa: F811
    return run_probe(PROBE, MARKER, sglang_cpu_path, *models, timeout=600, env={"SGLANG_DFLASH_OVERLAP": "1"})


TODAY_WARNING = (
    "Overlap scheduler is disabled when using DFLASH speculative decoding (spec v2 is not supported yet)."
)


@pytest.mark.parametrize("case", ["dflash", "dflash_page64", "dflash_disabled", "ddtree", "ddtree_disabled"])
def test_switch_off_keeps_todays_settings(off: dict, case: str) -> None:
    got = off[f"args_{case}"]
    assert got["overlap_disabled"] is True
    assert got["overlap_warnings"] == [TODAY_WARNING]


@pytest.mark.parametrize("case", ["dflash", "dflash_page64", "dflash_disabled", "ddtree", "ddtree_disabled"])
def test_switch_unset_on_the_cpu_keeps_v1_without_a_warning(unset: dict, case: str) -> None:
    """Patch dflash-overlap-default: unset means auto, overlap only on a CUDA server at TP 1 (the probe's
    servers are --device cpu), and the default's choice is an info line, not a warning
    (tests/unit/test_dflash_overlap_default.py has the rule's every branch)."""
    got = unset[f"args_{case}"]
    assert got["overlap_disabled"] is True
    assert got["overlap_warnings"] == []


@pytest.mark.parametrize("algo", ["dflash", "ddtree"])
def test_switch_unset_on_the_cpu_runs_the_v1_worker(unset: dict, algo: str) -> None:
    got = unset[f"algo_{algo}"]
    assert got["spec_v2"] is False and got["future_map"] == "FutureMap"
    assert got["worker_start"] == "past the switch"


@pytest.mark.parametrize("algo", ["dflash", "ddtree"])
def test_switch_off_keeps_v1_everywhere(off: dict, algo: str) -> None:
    got = off[f"algo_{algo}"]
    assert got["spec_v2"] is False and got["future_map"] == "FutureMap"
    assert got["worker"] == {"dflash": "DFlashWorker", "ddtree": "DDTreeWorker"}[algo]
    assert got["worker_start"] == "past the switch", "the worker must not refuse with the switch off"
    assert got["row_headroom"] == 4 + got["verify_tokens"], "req_to_token rows unchanged with the switch off"


@pytest.mark.parametrize(("algo", "verify_tokens"), [("dflash", 8), ("ddtree", 9)])
def test_switch_on_keeps_overlap_and_makes_spec_v2(on: dict, algo: str, verify_tokens: int) -> None:
    args = on[f"args_{algo}"]
    assert args["overlap_disabled"] is False and args["num_draft_tokens"] == verify_tokens
    assert len(args["overlap_warnings"]) == 1 and "keep overlap scheduling on" in args["overlap_warnings"][0]
    got = on[f"algo_{algo}"]
    assert got["spec_v2"] is True
    assert got["worker"] == {"dflash": "DFlashWorker", "ddtree": "DDTreeWorker"}[algo], "create_worker raised"
    assert got["future_map"] == "DFlashFutureMap"
    # the spec-v2 branch of get_draft_kv_pool used to assume EAGLE's nested draft runner
    assert got["draft_kv_pool"] == ["dflash-draft-pool", "drafter-config"]
    assert got["row_headroom"] == 4 + 2 * verify_tokens


def test_switch_on_dflash_and_ddtree_both_start(on: dict) -> None:
    """DFLASH's chain (patch dflash-overlap-step) and DDTREE's tree (patch ddtree-overlap-step) have their v2
    steps: both workers go past the switch and on to read their (absent) target."""
    assert on["algo_dflash"]["worker_start"] == "past the switch"
    assert on["algo_ddtree"]["worker_start"] == "past the switch"


def test_switch_on_ddtree_refuses_a_block_longer_than_its_verify(on: dict) -> None:
    """The drafter's block takes req_to_token[seq_len : seq_len + B] from a reservation sized for N =
    budget + 1: block 8 with budget 8 or 7 runs; with budget 4 (N 5) the worker refuses, naming the flag."""
    got = on["ddtree_v2_refusals"]
    assert got["8"] is None and got["7"] is None
    assert "block (8) is longer than the tree verify (budget + 1 = 5)" in got["4"]
    assert "--speculative-ddtree-budget" in got["4"]


def test_switch_on_with_page_size_64_is_refused_with_one_warning(on: dict) -> None:
    args = on["args_dflash_page64"]
    assert args["overlap_disabled"] is True
    assert len(args["overlap_warnings"]) == 1, args["overlap_warnings"]
    assert "SGLANG_DFLASH_OVERLAP=1 refused (--page-size 64" in args["overlap_warnings"][0]
    got = on["algo_dflash_page64"]
    assert (
        got["spec_v2"] is False
        and got["future_map"] == "FutureMap"
        and got["worker_start"] == "past the switch"
    )


@pytest.mark.parametrize("case", ["dflash_disabled", "ddtree_disabled"])
def test_switch_on_with_overlap_disabled_by_the_user_runs_v1(on: dict, case: str) -> None:
    args = on[f"args_{case}"]
    assert args["overlap_disabled"] is True
    assert len(args["overlap_warnings"]) == 1 and "has no effect" in args["overlap_warnings"][0]


def test_every_refusal_names_its_flag(on: dict) -> None:
    r = on["refusals"]
    assert r["ok"] is None
    for case, flag in (
        ("page64", "--page-size 64"),
        ("dp_attention", "--enable-dp-attention"),
        ("pp2", "--pp-size 2"),
        ("disagg", "--disaggregation-mode decode"),
        ("pdmux", "--enable-pdmux"),
    ):
        assert r[case].startswith(flag), r[case]


@pytest.mark.parametrize("mode", ["off", "on"])
def test_a_bad_switch_value_is_refused(off: dict, on: dict, mode: str) -> None:
    got = {"off": off, "on": on}[mode]["args_bad_value"]
    assert got == {
        "error": "ValueError",
        "message": "SGLANG_DFLASH_OVERLAP='yes': use 1 (overlap scheduling for DFLASH/DDTREE), 0 (off) or "
        "auto (unset: on at TP 1 on CUDA).",
    }


def test_future_map_relays_bonus_tokens_and_lengths_by_request_slot(on: dict) -> None:
    got = on["future_map_round_trip"]
    assert got["bonus"] == [30, 40], "gathered by future_indices [3, 4] after a stash at [4, 1, 3]"
    assert got["seq_lens"] == [13, 14] and got["seq_lens_cpu"] == [13, 14] and got["seq_lens_sum"] == 27
    assert got["merged_filtered"] == [1, 3]
    assert "both sides need future_indices" in got["merge_error"]
    assert got["coefficient"] == [1, 1]
    # patch 0023: the scheduler's decision passes through (0021 forced it on, so the host waited each step)
    assert got["host_lengths_forced"] is False, "DFlashFutureMap forces host lengths again"
    assert got["without_host_lengths"] == {"seq_lens": [52, 21], "seq_lens_cpu": None, "seq_lens_sum": None}


@pytest.mark.parametrize("algo", ["DFLASH", "DDTREE"])
def test_forward_copy_keeps_the_penalizer_orchestrator_for_dflash_and_ddtree(on: dict, algo: str) -> None:
    got = on["isolation"][algo]
    assert got["penalties_required"], "the case needs a penalty, or the check proves nothing"
    assert got == {
        "penalties_required": True,
        "copied": True,
        "orchestrator_kept": True,
        "accumulated": False,
        "restored": True,
    }


def test_forward_copy_still_drops_the_orchestrator_for_eagle(on: dict) -> None:
    got = on["isolation"]["EAGLE"]
    assert (
        got["penalties_required"] and not got["orchestrator_kept"] and got["accumulated"] and got["restored"]
    )


# dflash_v2*: the real DFlashWorker steps (prefill, _forward_decode_v2) on scripted models, compact draft
# window (24) or none; the others: a scripted worker
SIMULATIONS = [
    "dflash",
    "ddtree",
    "dflash_tight",
    "ddtree_tight",
    "dflash_v2",
    "dflash_v2_window",
    "dflash_v2_tight",
    "dflash_v2_radix",
    "dflash_v2_radix_window",
    "ddtree_v2",
    "ddtree_v2_window",
    "ddtree_v2_tight",
    "ddtree_v2_radix",
    "ddtree_v2_radix_window",
    # patches dflash-overlap-step-graphs / ddtree-overlap-commit-graph: the tight, window-24 runs with the v2
    # step graphs replayed (CPU stand-in: static buffers, outputs rewritten by the next replay)
    "dflash_v2_graphs",
    "ddtree_v2_graphs",
]


@pytest.mark.parametrize("algo", SIMULATIONS)
def test_simulation_checks_every_forward_and_finds_nothing(on: dict, algo: str) -> None:
    """At each forward: the slots written (the committed prefix and the N-slot verify window) are reserved,
    distinct, free of no one, shared with no other request, inside the req_to_token row; the bonus token
    relayed by the FutureMap is the one the script emitted last."""
    sim = on[f"sim_{algo}"]
    assert sim["errors"] == []
    assert sim["future_map"] == "DFlashFutureMap"
    assert sim["verify_steps"] >= 8, sim
    # every decode forward took its slots from prepare_for_verify(reserved=True): no allocation, the row's
    # reserved entries, the chain mask sized for them
    assert sim["verify_windows"] == sim["verify_steps"]


@pytest.mark.parametrize("algo", SIMULATIONS)
def test_simulation_outputs_equal_plain_decoding(on: dict, algo: str) -> None:
    """Stops inside a verify chain, max_new_tokens, a request finishing at prefill, requests joining and
    leaving: each output equals the script's plain-decoding output (trimmed at the finish by the real
    result processor, one step late)."""
    sim = on[f"sim_{algo}"]
    expected = on[
        ("expected_outputs_radix" if "radix" in algo else "expected_outputs")
        + ("_ddtree" if algo.startswith("ddtree") else "")
    ]
    assert all(sim["finished"].values()), sim["finished"]
    assert sim["outputs"] == expected


@pytest.mark.parametrize("algo", SIMULATIONS)
def test_simulation_leaks_no_slot_and_stays_inside_the_row(on: dict, algo: str) -> None:
    sim = on[f"sim_{algo}"]
    start, end = sim["kv_available"]
    assert start == end, f"{start - end} KV slots leaked"
    assert sim["req_slots_available"][0] == sim["req_slots_available"][1]
    assert sim["widest_reservation"] <= sim["row_width"]
    for estimate, allocated in sim["estimate_vs_allocated"]:
        assert allocated <= estimate, "check_decode_mem must cover what prepare_for_decode allocates"


def test_simulation_sees_penalties_inside_every_forward_with_a_penalized_request(on: dict) -> None:
    for algo in ("dflash", "ddtree", "dflash_v2"):
        seen = on[f"sim_{algo}"]["penalizer_seen"]
        with_d = [flag for rids, flag in seen if "d" in rids]
        without_d = [flag for rids, flag in seen if "d" not in rids]
        assert with_d and all(with_d), (algo, seen)
        assert without_d and not any(without_d), (algo, seen)


def test_tight_pool_retracts_and_still_decodes_like_plain_decoding(on: dict) -> None:
    """A 200-slot KV pool: check_decode_mem fails, the real retract_decode releases a request (its reserved
    slots included) while its step is in flight; it is prefilled again with its output and finishes."""
    for algo in ("dflash_tight", "dflash_v2_tight", "ddtree_v2_tight"):
        sim = on[f"sim_{algo}"]
        assert sim["retracted"], "the tight pool should force a retraction"
        assert sim["errors"] == [] and sim["kv_available"][0] == sim["kv_available"][1]


@pytest.mark.parametrize("algo", ["dflash_v2_graphs", "ddtree_v2_graphs"])
def test_simulation_replays_the_v2_step_graphs_at_every_decode_step(on: dict, algo: str) -> None:
    """Every decode step of these runs (batch sizes 1-8, all "captured") replays the v2 drafter KV append's
    and block stage's graphs, and DDTREE's its commit stage's; the pool is tight enough to retract, and the
    outputs, KV checks and leak checks above hold (SIMULATIONS)."""
    sim = on[f"sim_{algo}"]
    replays = sim["graph_replays"]
    assert replays["DFLASH KV append (spec v2)"] == sim["verify_steps"]
    assert replays["DFLASH block stage (spec v2)"] == sim["verify_steps"]  # patch dflash-overlap-block-graph
    if algo.startswith("ddtree"):
        assert replays["DDTREE commit stage (spec v2)"] == sim["verify_steps"]
        assert "DFLASH chain tail (spec v2)" not in replays
    else:  # DFLASH's greedy verify tail (patch dflash-overlap-host-trim)
        assert replays["DFLASH chain tail (spec v2)"] == sim["verify_steps"]
    assert sim["retracted"], "the tight pool should force a retraction"


FINISHING = 3  # the chain-verify request that v1 finishes after 2 tokens


def test_chain_verify_v2_accepts_what_v1_accepts(on: dict) -> None:
    """Patch dflash-overlap-step (not wired yet): verify_chain_v2 vs v1's DFlashVerifyInput.verify, greedy,
    6 random cases x 8 requests covering every accept length 0..7 of a block of 8."""
    cases = on["chain_verify"]["cases"]
    assert sorted({a for c in cases for a in c["accept"]}) == list(range(8))
    for c in cases:
        for i in range(len(c["accept"])):
            if i == FINISHING:
                continue
            assert c["v2_tokens"][i] == c["v1_tokens"][i], (i, c)
            assert c["v2_commit"][i] == c["v1_commit"][i] == c["accept"][i] + 1
            assert c["v2_bonus"][i] == c["v1_bonus"][i] == c["v2_tokens"][i][-1]
            assert c["v2_new_seq_lens"][i] == c["v1_seq_lens"][i]
            assert set(c["v2_padding"][i]) <= {0}
        assert c["shapes"] == [[8, 8], "torch.int64", "torch.int32"]


def test_chain_verify_v2_does_not_cut_at_a_finish(on: dict) -> None:
    """The scheduler trims at the stop one step later (finished_len): v2 emits the whole accepted chain."""
    for c in on["chain_verify"]["cases"]:
        v1, v2 = c["v1_tokens"][FINISHING], c["v2_tokens"][FINISHING]
        assert v2[: len(v1)] == v1 and len(v2) == c["accept"][FINISHING] + 1


def test_chain_verify_v2_syncs_nothing_and_writes_nothing(on: dict) -> None:
    for c in on["chain_verify"]["cases"]:
        assert c["v1_syncs"], "the counter must see v1's host copies (control)"
        assert c["syncs"] == []
        assert c["batch_untouched"]


@pytest.mark.parametrize("case", ["three_requests_window", "full_blocks_no_window", "block8_window"])
def test_padded_append_by_row_index_writes_what_v1_writes(on: dict, case: str) -> None:
    """Patch dflash-overlap-step: the draft KV append taking the committed rows from the whole verify output
    by row index (v2 cannot compact them: the counts are not on the host) against v1's eager append."""
    got = on["append_v2"][case]
    assert got["placed"] == got["committed"], got
    assert got["same_placement"] and got["same_lens"] and got["same_draft_rows"], got


@pytest.mark.parametrize("algo", [name for name in SIMULATIONS if name.endswith("_v2") or "_v2_" in name])
def test_real_v2_step_feeds_the_drafter_every_committed_position(on: dict, algo: str) -> None:
    """The real DFlashWorker v2 step under the overlap loop: at every block the scripted drafter checks that
    its root is the relayed bonus, its slots are the reserved ones, and the draft KV it attends to (the
    compact window or the whole row) holds each committed position's target hidden row, written by the padded
    append of the prefill and of every earlier step (errors would name the position)."""
    sim = on[f"sim_{algo}"]
    assert sim["errors"] == []
    assert sim["draft_kv_rows"] >= sum(len(tokens) for tokens in sim["outputs"].values())


@pytest.mark.parametrize("algo", [name for name in SIMULATIONS if name.startswith("ddtree_v2")])
def test_ddtree_simulations_accept_paths_off_the_first_chain(on: dict, algo: str) -> None:
    """The tree-shaped scripts make some accepted paths end in a verify row below their depth, so the KV moves
    (patch ddtree-overlap-step) are exercised in every DDTREE simulation, not only the identity case."""
    sim = on[f"sim_{algo}"]
    off_chain = [rows for rows in sim["path_rows"] if rows != list(range(len(rows)))]
    assert len(off_chain) >= 5 and sim["kv_moves"] >= len(off_chain)


@pytest.mark.parametrize("pool", ["mha", "mla"])
def test_move_path_kv_moves_the_path_on_the_real_kv_pools(on: dict, pool: str) -> None:
    """move_path_kv on SGLang's MHA (torch path standing for its Triton copy) and MLA KV pools: each committed
    position's slot gets its path row's KV in every layer, overlapping moves included, nothing else changes,
    req_to_token stays as reserved."""
    got = on["move_path_kv"][pool]
    assert got["every_layer_as_expected"] and got["rows_untouched"]
    assert got["moved"] == 3, "[0, 2, 5]: positions 1 and 2; [0, 8]: position 1; [0, 1, 2] in place"


# no draft window; a compact draft window of 16; the same with v2's drafter KV append through its step graphs
# (patch dflash-overlap-step-graphs; a CPU stand-in for the CUDA graph, see the probe's _CpuGraph)
GRAPH_PAIRS = ["step_pair_graphs", "step_pair_window_graphs"]
TREE_GRAPH_PAIRS = ["step_pair_ddtree_graphs", "step_pair_ddtree_window_graphs"]
PAIRS = ["step_pair", "step_pair_window", *GRAPH_PAIRS]
TREE_PAIRS = ["step_pair_ddtree", "step_pair_ddtree_window", *TREE_GRAPH_PAIRS]


@pytest.mark.parametrize("case", PAIRS)
def test_one_v2_step_commits_what_one_v1_step_commits(on: dict, case: str) -> None:
    """The real DFlashWorker, one decode step from the same prefilled state (three requests committing 3, all
    8 and 1 tokens, the first with a frequency penalty; scripted target and drafter): v2 (_forward_decode_v2
    on the reserved slots) and v1 (its allocator handing out the same slots) commit the same tokens, lengths
    and bonus, map the same KV slots, write the same draft KV (slot -> target hidden row) and draft rows,
    feed the penalizer the same tokens; v2 leaves the requests to the scheduler and publishes the lengths."""
    v1, v2 = on[case]["v1"], on[case]["v2"]
    assert (v1["v2"], v2["v2"]) == (False, True)
    assert v1["errors"] == [] and v2["errors"] == []
    assert v2["tokens"] == v1["tokens"] == v2["expected_tokens"]
    commits = [len(tokens) for tokens in v2["tokens"]]
    assert commits == [3, 8, 1]
    assert v2["new_lens"] == v1["new_lens"] == [5 + 3, 30 + 8, 2 + 1]
    assert v2["bonus"] == v1["bonus"] == [tokens[-1] for tokens in v2["tokens"]]
    assert v2["kv_slots"] == v1["kv_slots"]
    for slots, reserved, commit, new_len in zip(
        v2["kv_slots"], v2["reserved_before"], commits, v2["new_lens"], strict=True
    ):
        assert slots[new_len - commit :] == reserved[:commit], "the committed rows sit in the reserved slots"
    assert v2["draft_rows"] == v1["draft_rows"]
    assert v2["draft_kv_written"] == v1["draft_kv_written"]
    assert len(v2["draft_kv_written"]) == sum(commits), "one draft KV row per committed token"
    # request a has a frequency penalty: the verify feeds its committed chain rows (root, accepted drafts)
    assert v2["frequency_fed"] == v1["frequency_fed"] and len(v2["frequency_fed"][0]) == commits[0]
    assert v2["published_prefill"] == [[5, 30, 2]] and v2["published_step"] == [v2["new_lens"]]
    assert v2["requests_untouched"] and not v1["requests_untouched"]


@pytest.mark.parametrize("case", TREE_PAIRS)
def test_one_ddtree_v2_step_commits_what_one_v1_step_commits(on: dict, case: str) -> None:
    """The real DDTreeWorker (budget 12: N 13, block 8, top-k 4), one decode step from the same prefilled
    state; the scripted drafter puts the true token second at depth 3 for a, first all the way for b, second
    at depth 1 for c, so a and c accept a path whose last node lies in verify row 8 (after the wrong chain)
    and b the whole depth-7 chain: v2 (_forward_decode_v2 with the tree walk on the device, the path's target
    KV moved into the reserved slots of its positions, req_to_token untouched) and v1 (its allocator handing
    out the same slots, the host copy, the frees, the row rewritten to the path's slots) commit the same
    tokens, lengths and bonus; through their rows the target and the drafter see the same KV at every position
    (v2: the reserved slots in order; v1: the path's slots); both feed the penalizer the same tokens."""
    v1, v2 = on[case]["v1"], on[case]["v2"]
    assert (v1["v2"], v2["v2"]) == (False, True)
    assert v1["errors"] == [] and v2["errors"] == []
    assert v2["path_rows"] == v1["path_rows"] == [[0, 1, 2, 8], [0, 1, 2, 3, 4, 5, 6, 7], [0, 8]]
    assert v2["tokens"] == v1["tokens"] == v2["expected_tokens"]
    commits = [len(tokens) for tokens in v2["tokens"]]
    assert commits == [4, 8, 2]
    assert v2["stride"] == 8, "the padded tokens' stride is the block size (the tree's depth + 1)"
    assert v2["new_lens"] == v1["new_lens"] == [5 + 4, 30 + 8, 2 + 2]
    assert v2["bonus"] == v1["bonus"] == [tokens[-1] for tokens in v2["tokens"]]
    for slots_v2, slots_v1, reserved, rows, new_len in zip(
        v2["kv_slots"], v1["kv_slots"], v2["reserved_before"], v2["path_rows"], v2["new_lens"], strict=True
    ):
        start = new_len - len(rows)
        assert slots_v2[:start] == slots_v1[:start]
        assert slots_v2[start:] == reserved[: len(rows)], "v2: the row as reserved"
        assert slots_v1[start:] == [reserved[r] for r in rows], "v1: the path's slots, in path order"
    assert v2["kv_moves"] == 2, "a's and c's last node (verify row 8) moves; b's path is in place"
    assert v2["target_kv_rows"] == v1["target_kv_rows"]
    for kv, new_len in zip(v2["target_kv_rows"], v2["new_lens"], strict=True):
        assert [entry[0] for entry in kv] == list(range(new_len)), "each position's own KV"
    assert v2["draft_kv_rows"] == v1["draft_kv_rows"]
    assert sorted(v2["draft_kv_written"].values()) == sorted(v1["draft_kv_written"].values())
    assert len(v2["draft_kv_written"]) == sum(commits), "one draft KV row per committed token"
    assert v2["frequency_fed"] == v1["frequency_fed"] and len(v2["frequency_fed"][0]) == commits[0]
    assert v2["published_prefill"] == [[5, 30, 2]] and v2["published_step"] == [v2["new_lens"]]
    assert v2["requests_untouched"] and not v1["requests_untouched"]


def test_one_ddtree_v2_step_samples_what_one_v1_step_samples(on: dict) -> None:
    """Request b samples at temperature 1 from a flat target (the true token about 4%), the others are greedy
    (a with a frequency penalty and a logit bias of -100 on its 3rd token); the same seed before each step:
    v2 runs v1's logit adjustments and sampling walk (the same coins) on the device, so both commit the same
    tokens, which for b are not the greedy ones (its walk rejected and drew a bonus) and for a stop at the
    biased token (the walk saw the bias), and map the same KV slots and draft KV. The only host syncs v2
    shows are the torch stand-in of the Triton sampling walk (off CUDA, ddtree_utils'
    verify_sampling_from_logits, per_row); v1 adds its token copy."""
    v1, v2 = on["step_pair_ddtree_sampled"]["v1"], on["step_pair_ddtree_sampled"]["v2"]
    assert v1["errors"] == [] and v2["errors"] == []
    assert v2["tokens"] == v1["tokens"]
    assert v2["tokens"][2] == v2["expected_tokens"][2]
    assert v2["tokens"][0][:2] == v2["expected_tokens"][0][:2] and len(v2["tokens"][0]) == 3
    assert v2["tokens"][0][2] != v2["expected_tokens"][0][2], "the logit bias moves a's third token"
    assert v2["tokens"][1] != v2["expected_tokens"][1], "b's sampling walk should have rejected"
    assert v2["new_lens"] == v1["new_lens"] and v2["bonus"] == v1["bonus"]
    assert v2["target_kv_rows"] == v1["target_kv_rows"] and v2["draft_kv_rows"] == v1["draft_kv_rows"]
    assert v2["frequency_fed"] == v1["frequency_fed"]
    assert v2["syncs"] and all(
        "ddtree_utils.py" in call and call.endswith(" per_row") for call in v2["syncs"]
    )
    assert any("ddtree_info.py" in call and call.startswith("cpu at") for call in v1["syncs"])


@pytest.mark.parametrize("case", PAIRS + TREE_PAIRS)
def test_one_v2_step_copies_nothing_from_the_device(
    on: dict, case: str, capsys: pytest.CaptureFixture
) -> None:
    """Device-to-host copies (item, tolist, cpu, bool/int of a tensor, .to("cpu"), data-sized ops...)
    counted by a TorchFunctionMode over one decode step of the real worker (the scripted models and the
    torch stand-ins of Triton kernels uncounted; host tensors tagged). v1's count is the contrast."""
    pair = on[case]
    assert pair["counter_control"] == 1, "the counter must count a device .item() and skip a host one"
    with capsys.disabled():
        print(f"\n{case}: v1 step host syncs {len(pair['v1']['syncs'])}: {pair['v1']['syncs']}")
    assert pair["v1"]["syncs"], "v1's step copies to the host (verify's .cpu()): the counter must see it"
    assert pair["v2"]["syncs"] == []


@pytest.mark.parametrize("case", PAIRS + TREE_PAIRS)
def test_the_v2_step_replays_its_kv_append_graph_where_there_is_one(on: dict, case: str) -> None:
    """Patch dflash-overlap-step-graphs: with the v2 append's graphs captured (the worker's own
    _capture_kv_appends, through a CPU stand-in of the capture) the v2 step replays them once (the committed
    rows' draft KV written from the graph's buffers: the pair tests above find it equal to v1's eager write);
    without graphs it runs eagerly. Before the patch the v2 step always ran it eagerly (one launch per op on
    a GPU where v1 replays a graph)."""
    replays = on[case]["v2"]["graph_replays"]
    # and the block stage (patch dflash-overlap-block-graph)
    both = {"DFLASH KV append (spec v2)": 1, "DFLASH block stage (spec v2)": 1}
    if case in GRAPH_PAIRS:  # and DFLASH's greedy verify tail (patch dflash-overlap-host-trim)
        assert replays == {**both, "DFLASH chain tail (spec v2)": 1}
    elif case in TREE_GRAPH_PAIRS:  # and DDTREE's commit stage (patch ddtree-overlap-commit-graph)
        assert replays == {**both, "DDTREE commit stage (spec v2)": 1}
    else:
        assert replays == {}


V2_APPEND_INPUTS = [
    [1, [], "torch.int32"],
    [1, [], "torch.int64"],
    [1, [], "torch.int64"],
    [1, [8], "torch.int64"],
]


@pytest.mark.parametrize(("algo", "verify_rows"), [("dflash", 8), ("ddtree", 9)])
def test_the_worker_captures_the_append_of_the_step_that_runs(
    on: dict, off: dict, algo: str, verify_rows: int
) -> None:
    """DFlashWorker._capture_kv_appends (patch dflash-overlap-step-graphs): switch off, v1's append (compact
    committed rows, B per request) as before; switch on, the v2 step's (_append_padded_v2: the whole verify
    output, N rows per request, then commit lengths, new lengths, req_pool_indices and the row index [bs, B])
    and not v1's, which never runs under spec v2."""
    got_off, got_on = off[f"kv_append_capture_{algo}"], on[f"kv_append_capture_{algo}"]
    assert [c["name"] for c in got_off["captured"]] == ["DFLASH KV append"]
    off_graphs = (
        got_off["v1_graphs"],
        got_off["v2_graphs"],
        got_off["commit_graphs"],
        got_off["block_graphs"],
    )
    assert off_graphs == (True, False, False, False)
    assert got_off["captured"][0]["inputs"][0] == [8, [24], "torch.bfloat16"]
    names = ["DFLASH KV append (spec v2)"] + (["DDTREE commit stage (spec v2)"] if algo == "ddtree" else [])
    tail = [] if algo == "ddtree" else ["DFLASH chain tail (spec v2)"]  # patch dflash-overlap-host-trim
    assert [c["name"] for c in got_on["captured"]] == [*names, "DFLASH block stage (spec v2)", *tail]
    assert got_off["tail_graphs"] is False and got_on["tail_graphs"] == (algo == "dflash")
    assert got_on["captured"][0]["function"] == "_append_padded_v2"
    assert (got_on["v1_graphs"], got_on["v2_graphs"], got_on["block_graphs"]) == (False, True, True)
    assert got_on["captured"][0]["inputs"] == [[verify_rows, [24], "torch.bfloat16"], *V2_APPEND_INPUTS]
    assert got_on["commit_graphs"] == (algo == "ddtree")
    block = got_on["captured"][
        len(names)
    ]  # patch dflash-overlap-block-graph: bonus tokens, seq_lens, req_pool_indices
    assert block["function"] == "_block_stage_v2" and block["inputs"] == [[1, [], "torch.int64"]] * 3
    if algo == "ddtree":
        commit = got_on["captured"][1]
        assert commit["function"] == "_commit_stage"
        long, scalar = "torch.int64", [1, [], "torch.int64"]
        # the tree's tokens [bs, budget], accept_len, accept_idx [bs, D], bonus, lengths, req_pool_indices
        assert commit["inputs"] == [[1, [8], long], scalar, [1, [7], long], scalar, scalar, scalar]


@pytest.mark.parametrize("case", PAIRS + TREE_PAIRS)
def test_one_v2_step_never_reads_the_batchs_host_lengths(on: dict, case: str) -> None:
    """Patch 0023: the v2 step runs with batch.seq_lens_cpu / seq_lens_sum None (what DFlashFutureMap leaves
    for a Triton target, so the host never waits for the previous step's lengths) and the batch's attributes
    raise when the step's files read them; it sizes from the reserved row ends and still equals v1."""
    pair = on[case]
    assert pair["v2"]["host_reads"] == []
    mask = pair["v2"]["verify_mask"]
    if case in TREE_PAIRS:
        assert mask["built"], "DDTREE always builds its tree mask"
    if mask["built"]:
        # sized from the bound (never below the exact size), laid out from the device lengths
        assert mask["head_equal"] and mask["slack"] >= 0, mask
    assert pair["v2"]["tokens"] == pair["v2"]["expected_tokens"] == pair["v1"]["tokens"]
    assert pair["v2"]["new_lens"] == pair["v1"]["new_lens"]


@pytest.mark.parametrize(
    "algo", ["dflash_v2_radix", "dflash_v2_radix_window", "ddtree_v2_radix", "ddtree_v2_radix_window"]
)
def test_radix_cache_hands_out_prefixes_whose_target_and_draft_kv_are_right(on: dict, algo: str) -> None:
    """The real RadixCache under the v2 step: later requests reuse a running request's prompt and a finished
    request's prompt and output. At every forward the scripted target checks that each position it attends
    to holds this request's token in the target KV, and the drafter the same in the draft KV (the errors
    would name the position); after the run the tree holds the finished requests' KV, and evicting it frees
    every slot."""
    sim = on[f"sim_{algo}"]
    assert sim["errors"] == []
    hits = sim["prefix_hits"]
    assert hits["i"] == 11 and hits["j"] == 3, "prefixes of running requests' prompts"
    assert hits["h"] >= 16 and hits["k"] >= 40, "prefixes of a finished request's prompt and output"
    assert sim["radix_cached_tokens"] > 0
    assert sim["kv_available"][0] == sim["kv_available"][1]


# Chunked prefill (the real PrefillAdder, chunk 16) and aborts in flight (the real Scheduler.abort_request)
# in the overlap-loop simulation, with the real workers' v2 steps: DFLASH with a compact draft window of 24,
# DDTREE without a window, DDTREE with the radix cache and a window, DDTREE in a 160-slot pool that retracts.
CHUNKED = ["dflash_v2_chunked", "ddtree_v2_chunked", "ddtree_v2_chunked_radix"]
ABORTED = ["dflash_v2_abort", "ddtree_v2_abort", "ddtree_v2_abort_tight"]


@pytest.mark.parametrize("algo", CHUNKED + ABORTED)
def test_chunked_prefill_under_v2_checks_every_forward_and_leaks_nothing(on: dict, algo: str) -> None:
    """Long prompts prefilled over several forwards while the others decode under v2 (L: 60 tokens in four
    chunks; M: 45 tokens, its first chunk what L's last one left of the 16; e: 36; each middle chunk <= 16):
    at every forward the target checks each attended position's KV (the earlier chunks' included) and the
    drafter the draft KV of every committed position (the chunks' rows appended chunk by chunk); no slot or
    req slot leaked, the reservations inside the rows."""
    sim = on[f"sim_{algo}"]
    assert sim["errors"] == []
    chunked = {rid for rid, _ in sim["chunk_sizes"]}
    assert {"L", "M", "e"} <= chunked, sim["chunk_sizes"]
    assert all(0 < size <= 16 for _, size in sim["chunk_sizes"])
    assert len([rid for rid, _ in sim["chunk_sizes"] if rid == "L"]) == 3, "L: three middle chunks"
    assert sim["verify_steps"] >= 8 and sim["verify_windows"] == sim["verify_steps"]
    assert sim["kv_available"][0] == sim["kv_available"][1], "KV slots leaked"
    assert sim["req_slots_available"][0] == sim["req_slots_available"][1], "req slots leaked"
    assert sim["widest_reservation"] <= sim["row_width"]


@pytest.mark.parametrize("algo", CHUNKED)
def test_chunked_prefill_under_v2_outputs_equal_plain_decoding(on: dict, algo: str) -> None:
    """The chunked requests' bonus tokens of middle chunks are stashed in the FutureMap and overwritten by
    the last chunk's: every output (the chunked ones included) equals plain decoding."""
    sim = on[f"sim_{algo}"]
    assert all(sim["finished"].values()), sim["finished"]
    assert sim["outputs"] == sim["expected"]
    assert sim["prefix_hits"] == {} or "radix" in algo


def test_chunked_prefill_with_the_radix_cache_reuses_prefixes(on: dict) -> None:
    sim = on["sim_ddtree_v2_chunked_radix"]
    assert sim["radix_cached_tokens"] > 0
    # the radix scenario's h and k reuse a's prompt and output: their first chunk is what the cache lacks
    assert len(sim["chunk_sizes"]) >= 6


RADIX_TIGHT = ["dflash_v2_radix_tight", "ddtree_v2_radix_tight", "ddtree_v2_radix_tight_window"]


@pytest.mark.parametrize("algo", RADIX_TIGHT)
def test_retraction_with_the_radix_cache_under_v2(on: dict, algo: str) -> None:
    """The radix scenario, chunked, in a 160- or 240-slot pool: the real PrefillAdder counts the cached
    tokens and the allocations evict them; check_decode_mem fails and the real retract_decode releases
    requests (their reserved slots included) while their step is in flight, into the radix cache; they
    come back on a cached prefix. At every forward the target and drafter check the KV of every attended
    position (a reused prefix included); outputs equal plain decoding; evicting the tree at the end frees
    every slot."""
    sim = on[f"sim_{algo}"]
    assert sim["errors"] == []
    assert sim["retracted"], "the tight pool should force a retraction"
    assert all(sim["finished"].values()) and sim["outputs"] == sim["expected"]
    assert sim["kv_available"][0] == sim["kv_available"][1]
    assert sim["req_slots_available"][0] == sim["req_slots_available"][1]
    hits = sim["prefix_hits"]
    assert hits["i"] == 11 and hits["h"] > 0 and hits["k"] > 0, hits
    assert sim["radix_cached_tokens"] > 0


@pytest.mark.parametrize("algo", ABORTED)
def test_abort_while_a_v2_step_is_in_flight_frees_each_slot_once(on: dict, algo: str) -> None:
    """Aborts through the real Scheduler.abort_request (to_finish, method 3) while a v2 step for the request
    is in flight: y while its decode step runs, x while its prefill runs, z between two chunks (the tight
    pool: y decoding again after a retraction; x and z still waiting, popped from the queue). The
    next step still carries the request (its reservation in the row) and its result is skipped; the request
    is released once: no slot leaked or freed twice (a double free would grow the free list past the start),
    no error at any forward; the others' outputs equal plain decoding; an aborted request's output agrees
    with its plain output as far as both go."""
    sim = on[f"sim_{algo}"]
    assert sim["errors"] == []
    states = {rid: state[0] for rid, state in sim["abort_states"].items()}
    if algo == "ddtree_v2_abort_tight":
        assert "y" in sim["retracted"], "y decodes again after a retraction when it is aborted"
        assert states == {"y": "decode in flight", "x": "waiting", "z": "waiting"}
    else:
        assert states == {"y": "decode in flight", "x": "prefill in flight", "z": "chunked"}
    _, _, committed, allocated = sim["abort_states"]["y"]
    assert committed < allocated, "y's step in flight holds a reservation past its committed length"
    assert sim["kv_available"][0] == sim["kv_available"][1]
    assert sim["req_slots_available"][0] == sim["req_slots_available"][1]
    for rid, expected in sim["expected"].items():
        state = states.get(rid)
        if state is None:
            assert sim["outputs"][rid] == expected and sim["finished"][rid], rid
        elif state == "waiting":
            assert sim["outputs"][rid] == [] and sim["finish_reasons"][rid] == "NoneType", rid
        else:
            assert sim["finish_reasons"][rid] == "FINISH_ABORT", (rid, sim["finish_reasons"][rid])
            out = sim["outputs"][rid]
            # upstream's v2 result path appends a step's tokens, then check_finished takes to_finish before
            # any length check: an aborted request's output is not trimmed at max_new (v1 appends token by
            # token and stops at the first); the tight pool's y runs 5 tokens past its 60
            assert out[: len(expected)] == expected[: len(out)], rid
            assert len(out) < len(expected) + 8, "at most one step past max_new"


@pytest.mark.parametrize(
    "variant", ["none", "top_p_tight", "top_p", "top_k", "min_p_tight", "min_p", "together"]
)
def test_one_ddtree_v2_step_applies_the_sampling_filters_as_v1(on: dict, variant: str) -> None:
    """The sampled DDTREE pair with b's top-p / top-k / min-p filters, alone and together (b at temperature 1
    over a target with two runners-up, logits 3, 2.5, 2; the same seed before each step): v1 and v2 commit the
    same tokens, lengths, bonus, target and draft KV through the rows, penalizer feed. The tight filters
    (top_p 0.02, min_p 0.7) leave only the predicted token, so b's walk emits the greedy tokens: the filter
    reached v2's walk; the loose ones draw among the runners-up (b's tokens then leave the greedy ones)."""
    pair = on["step_pair_ddtree_filters"][variant]
    v1, v2 = pair["v1"], pair["v2"]
    assert v1["errors"] == [] and v2["errors"] == []
    assert v2["tokens"] == v1["tokens"]
    assert v2["new_lens"] == v1["new_lens"] and v2["bonus"] == v1["bonus"]
    assert v2["target_kv_rows"] == v1["target_kv_rows"] and v2["draft_kv_rows"] == v1["draft_kv_rows"]
    assert v2["frequency_fed"] == v1["frequency_fed"]
    greedy_b = v2["expected_tokens"][1]
    if variant.endswith("_tight"):
        assert v2["tokens"][1] == greedy_b, "a tight filter leaves the predicted token only"
    else:
        assert v2["tokens"][1] != greedy_b, "b samples: its walk should leave the greedy tokens"
    assert all("ddtree_utils.py" in call and call.endswith(" per_row") for call in v2["syncs"]), v2["syncs"]


SERVED_BUDGETS = [f"ddtree_v2_b{b}_{case}" for b in (8, 16) for case in ("chunk_abort", "radix_tight")]


@pytest.mark.parametrize("algo", SERVED_BUDGETS)
def test_ddtree_v2_at_the_served_budgets(on: dict, algo: str) -> None:
    """DDTREE at budget 8 (N 9 = B + 1, the original deployment's) and 16 (N 17, ddtree-16 of the GPU
    sitting), block 8: the chunked scenario with the three aborts in flight (window 24) and the chunked radix
    scenario in a pool that retracts (no window): no error at any forward, accepted paths off the first chain
    (KV moved), outputs equal plain decoding but for the aborted requests (a prefix), nothing leaked."""
    sim = on[f"sim_{algo}"]
    assert sim["errors"] == []
    assert sim["kv_available"][0] == sim["kv_available"][1]
    assert sim["req_slots_available"][0] == sim["req_slots_available"][1]
    assert sim["widest_reservation"] <= sim["row_width"]
    off_chain = [rows for rows in sim["path_rows"] if rows != list(range(len(rows)))]
    # path_rows is the script's view: in a wasted step past a penalized request's stream the walk may differ
    assert len(off_chain) >= 5 and sim["kv_moves"] >= 5
    aborted = sim["abort_states"]
    if algo.endswith("chunk_abort"):
        assert {rid: state[0] for rid, state in aborted.items()} == {
            "y": "decode in flight",
            "x": "prefill in flight",
            "z": "chunked",
        }
    else:
        assert sim["retracted"] and sim["radix_cached_tokens"] > 0
    for rid, expected in sim["expected"].items():
        out = sim["outputs"][rid]
        if rid in aborted:
            assert sim["finish_reasons"][rid] == "FINISH_ABORT", rid
            assert out[: len(expected)] == expected[: len(out)], rid
        else:
            assert sim["finished"][rid] and out == expected, rid
