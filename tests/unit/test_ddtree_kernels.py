"""DDTree's Triton top-k + log-sum-exp kernels (patches: sglang/srt/speculative/ddtree_kernels.py) on CPU.

Triton's interpreter (TRITON_INTERPRET=1) runs the real kernel source from the patch text on CPU tensors,
with the pinned triton 3.6.0 from the CPU sglang environment (test_ddtree_sglang.py builds it). The same
kernels compiled for a GPU are checked on the device by tests/gpu/test_ddtree_core_gpu.py.
Reference: a stable descending torch.sort (value desc, ties by index asc) and torch.logsumexp.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ddtree_build.paths import REPO_ROOT

from tests.sglang_sources import import_new_module, new_file_text, write_package
from tests.unit.test_ddtree_sglang import sglang_cpu_path  # noqa: F401  (fixture)

KERNELS = "sglang/srt/speculative/ddtree_kernels.py"
UTILS = "sglang/srt/speculative/ddtree_utils.py"
CHECK = r"""
import json, os, sys, torch
from ddt import ddtree_kernels as dk, ddtree_utils as du

def reference(x, k):
    values, index = torch.sort(x.float(), dim=-1, descending=True, stable=True)
    return values[:, :k], index[:, :k], torch.logsumexp(x.float(), dim=-1)

gen = torch.Generator().manual_seed(0)
cases = {
    "kimi_vocab_k4": (torch.randn(3, 163840, generator=gen), 4),
    "short_last_tile": (torch.randn(2, 4097, generator=gen), 8),
    "one_tile": (torch.randn(5, 1000, generator=gen), 3),
    "k16_tp8_shard": (torch.randn(2, 20480, generator=gen), 16),
    "k_equals_vocab": (torch.randn(1, 5, generator=gen), 5),
    "heavy_ties": (torch.randint(0, 3, (4, 9000), generator=gen).float(), 8),
    "bf16": (torch.randn(3, 6000, generator=gen).to(torch.bfloat16), 4),
    "strided_rows": (torch.randn(3, 8, 7000, generator=gen)[:, 2, :], 4),
}
minus_inf = torch.full((2, 5000), float("-inf"))
minus_inf[0, 4999] = 0.0
cases["minus_inf"] = (minus_inf, 4)
result = {}
for variant, switch in (("", "0"), (":prefilter", "1")):  # the default tile kernel, and the opt-in prefilter
    os.environ["SGLANG_DDTREE_TOPK_PREFILTER"] = switch
    for name, (x, k) in cases.items():
        values, index, lse = dk.topk_logsumexp(x, k)
        ref_values, ref_index, ref_lse = reference(x, k)
        result[name + variant] = {
            "values": torch.equal(values, ref_values),
            "index": torch.equal(index, ref_index),
            "index_dtype": str(index.dtype),
            "lse": bool(torch.allclose(lse, ref_lse, rtol=1e-5, atol=1e-4)),
        }
os.environ.pop("SGLANG_DDTREE_TOPK_PREFILTER")
try:
    dk.topk_logsumexp(torch.zeros(2, 10), 11)
    result["k_too_large"] = "no error"
except ValueError as exc:
    result["k_too_large"] = str(exc)

# The tree build kernel against ddtree_utils' torch path (CPU tensors take the torch path there).
trees = {
    "pro6000_b8_k4_d7": (2, 8, 4, 7, 1000),
    "b16_k4_d7": (3, 16, 4, 7, 500),
    "b32_k4_d7": (1, 32, 4, 7, 300),
    "b64_k4_d3": (2, 64, 4, 3, 100),
    "b16_k2_d15": (2, 16, 2, 15, 64),
    "topk1_chain": (2, 8, 1, 4, 50),
    "padding_vocab3": (2, 16, 4, 2, 3),
}
names = ["tokens", "parents", "verify_depth", "scores", "valid", "mask", "path"]
for name, (bs, budget, topk, depth, vocab) in trees.items():
    for variant in ("random", "ties"):
        if variant == "random":
            lp = (3 * torch.randn(bs, depth, vocab, generator=gen)).log_softmax(-1)
        else:
            lp = torch.randint(-3, 0, (bs, depth, vocab), generator=gen).float()
        values, ids = du.draft_topk(lp, topk, budget)
        tree = du.build_ddtree_from_topk(values, ids, budget)
        plan = du._plan(budget, values.shape[-1], depth, values.device)
        got = dk.build_tree(values, ids, plan)
        want = (tree.tokens, tree.parents, tree.verify_depth, tree.scores, tree.valid.expand(bs, budget),
                tree.mask, tree.path)
        result[f"tree_{name}_{variant}"] = {
            "padding": plan.has_padding,
            "differ": [n for n, g, w in zip(names, got, want)
                       if g.dtype != w.dtype or g.shape != w.shape or not torch.equal(g, w)],
        }
        # Greedy verification kernel vs the torch walk, the target agreeing with the drafter's top-1 80%.
        depth_n = torch.cat([tree.depth.new_zeros(bs, 1), tree.depth], dim=1)
        top1 = lp.argmax(-1).gather(1, depth_n.clamp(max=depth - 1))
        agree = torch.rand(bs, budget + 1, generator=gen) < 0.8
        target = torch.where(agree, top1, torch.randint(0, vocab, (bs, budget + 1), generator=gen))
        want = tree.verify_greedy(target)
        got = dk.verify_greedy(tree.tokens, tree.parents, target, tree.mask, tree.path, tree.verify_depth,
                               tree.valid if tree.has_padding else None)
        result[f"verify_{name}_{variant}"] = {
            "differ": [n for n, g, w in zip(["accept_len", "accept_idx", "bonus"], got, want)
                       if g.dtype != w.dtype or not torch.equal(g, w)],
            "max_accept": int(want[0].max()),
        }
print("KERNEL-CHECK " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def kernel_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A package `ddt` holding the patch series' new speculative files (ddtree_kernels, ddtree_utils, ...)."""
    package = write_package(tmp_path_factory.mktemp("kernels") / "ddt", str(Path(KERNELS).parent))
    assert (package / "ddtree_utils.py").is_file() and (package / "ddtree_kernels.py").is_file()
    return package


def run_script(
    script: str, marker: str, package: Path, sglang_path: str, *, interpret: bool, timeout: float, args=()
) -> dict:
    """Run `script` in a fresh process beside the series' kernel package (in Triton's interpreter, or with
    its real compiler) and return the JSON it printed after `marker`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package.parent), sglang_path])}
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True, text=True, env=env, timeout=timeout, cwd=package.parent,
    )  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(f"{marker} ")]
    assert lines, f"{marker} printed nothing (rc {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix(f"{marker} "))


@pytest.fixture(scope="module")
def kernel_results(kernel_package: Path, sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_script(CHECK, "KERNEL-CHECK", kernel_package, sglang_cpu_path, interpret=True, timeout=600)


CASES = ["kimi_vocab_k4", "short_last_tile", "one_tile", "k16_tp8_shard", "k_equals_vocab", "heavy_ties",
         "bf16", "strided_rows", "minus_inf"]  # fmt: skip


@pytest.mark.parametrize("variant", ["", ":prefilter"], ids=["tile", "prefilter"])
@pytest.mark.parametrize("case", CASES)
def test_topk_and_logsumexp_equal_the_sort_reference(kernel_results: dict, case: str, variant: str) -> None:
    """Both tile kernels: the default (validated on an H200) and the opt-in group prefilter."""
    got = kernel_results[case + variant]
    assert got == {"values": True, "index": True, "index_dtype": "torch.int64", "lse": True}


TREES = [
    "pro6000_b8_k4_d7",
    "b16_k4_d7",
    "b32_k4_d7",
    "b64_k4_d3",
    "b16_k2_d15",
    "topk1_chain",
    "padding_vocab3",
]
PADDED = {"topk1_chain", "padding_vocab3"}  # fewer candidate paths than the budget: padding nodes


@pytest.mark.parametrize("variant", ["random", "ties"])
@pytest.mark.parametrize("case", TREES)
def test_tree_build_kernel_equals_the_torch_build(kernel_results: dict, case: str, variant: str) -> None:
    got = kernel_results[f"tree_{case}_{variant}"]
    assert got["differ"] == [], f"fields that differ from build_ddtree_from_topk: {got['differ']}"
    assert got["padding"] is (case in PADDED)


@pytest.mark.parametrize("variant", ["random", "ties"])
@pytest.mark.parametrize("case", TREES)
def test_greedy_verify_kernel_equals_the_torch_walk(kernel_results: dict, case: str, variant: str) -> None:
    got = kernel_results[f"verify_{case}_{variant}"]
    assert got["differ"] == [], f"outputs that differ from verify_greedy: {got['differ']}"


def test_greedy_verify_cases_accept_draft_nodes(kernel_results: dict) -> None:
    accepted = [kernel_results[f"verify_{case}_random"]["max_accept"] for case in TREES]
    assert max(accepted) >= 3, f"the cases barely exercise acceptance: {accepted}"


def test_k_beyond_the_limit_is_a_clear_error(kernel_results: dict) -> None:
    assert "needs 1 <= k <= min(32, 10), got 11" in kernel_results["k_too_large"]


def test_kernel_module_is_in_the_series_beside_ddtree_utils() -> None:
    text = new_file_text(KERNELS)
    assert "def topk_logsumexp(" in text and "@triton.jit" in text
    utils = new_file_text("sglang/srt/speculative/ddtree_utils.py")
    assert 'importlib.import_module(f"{__package__}.ddtree_kernels")' in utils


def test_torch_fallback_of_vocab_topk_logsumexp_orders_ties_by_index() -> None:
    """Off CUDA, ddtree_utils.vocab_topk_logsumexp is torch.topk + merge_topk + logsumexp: same contract."""
    import torch

    du = import_new_module(UTILS, "series_ddtree_utils")
    gen = torch.Generator().manual_seed(3)
    scores = torch.randint(0, 4, (6, 3000), generator=gen).float()
    values, index, lse = du.vocab_topk_logsumexp(scores, 5)
    ref_values, ref_index = torch.sort(scores, dim=-1, descending=True, stable=True)
    assert torch.equal(values, ref_values[:, :5]) and torch.equal(index, ref_index[:, :5])
    assert torch.allclose(lse, torch.logsumexp(scores, dim=-1))


SAMPLING_CHECK = r"""
import json, torch
from ddt import ddtree_kernels as dk, ddtree_utils as du

gen = torch.Generator().manual_seed(7)
result = {}

def per_request(values, n):
    return None if values is None else values.repeat_interleave(n)

# 1. The cut (which tokens each row keeps, and their mass) against sampling_target_probs' sorted order.
filters = {  # per request: top_k (1: greedy), top_p, min_p
    "top_k": torch.tensor([1, 5, 1 << 30, 40, 300, 1 << 30]),
    "top_p": torch.tensor([1.0, 0.9, 0.95, 0.5, 0.99, 1.0]),
    "min_p": torch.tensor([0.0, 0.05, 0.0, 0.0, 0.01, 0.1]),
}
temps = torch.tensor([1.0, 0.7, 1.3, 2.0, 0.5, 1.0])
n, vocab = 3, 700
logits = {
    "randn": torch.randn(6 * n, vocab, generator=gen) * 3,
    # bf16-rounded integers: many exactly tied logits, so the cut falls inside runs of ties
    "ties": (torch.randn(6 * n, vocab, generator=gen) * 3).to(torch.bfloat16).float().round(),
}
# A language model's shape over five tiles: a low bulk and a few high tokens, so most tiles hold no
# candidate and their mass is rescaled from their own maximum instead of read again.
peaked = torch.randn(6 * n, 20000, generator=gen)
high = torch.randint(0, 4096, (6 * n, 12), generator=gen)  # all in the first tile
peaked.scatter_add_(1, high, 16 + 6 * torch.rand(6 * n, 12, generator=gen))
logits["peaked"] = peaked
variants = {  # name: (logits, which filters, top-p after top-k, candidate cap, candidate floor)
    "all_filters": ("randn", ("top_k", "top_p", "min_p"), False, 64, 2.0**-14),
    "all_filters_renorm": ("randn", ("top_k", "top_p", "min_p"), True, 64, 2.0**-14),
    "ties": ("ties", ("top_k", "top_p", "min_p"), False, 64, 2.0**-14),
    "ties_renorm_bisection": ("ties", ("top_k", "top_p", "min_p"), True, 8, 0.5),
    "bisection": ("randn", ("top_k", "top_p", "min_p"), False, 8, 0.5),
    "top_k_only_bisection": ("ties", ("top_k",), False, 8, 0.5),
    "temperature_only": ("randn", (), False, 64, 2.0**-14),
    "peaked_tiles": ("peaked", ("top_k", "top_p", "min_p"), False, 64, 2.0**-14),
    "peaked_tiles_temperature_only": ("peaked", (), False, 64, 2.0**-14),
}
for name, (which, on, renorm, cap, floor) in variants.items():
    x = logits[which]
    params = [filters[f] if f in on else None for f in ("top_k", "top_p", "min_p")]
    want = du.sampling_target_probs(x, per_request(temps, n), *(per_request(v, n) for v in params),
                                    top_p_after_top_k=renorm)
    cut = dk.filter_rows(x, temps, *params, n, top_p_after_top_k=renorm, candidate_cap=cap,
                         candidate_floor=floor)
    z = x / per_request(temps, n).unsqueeze(1)
    key = du._float_key(z)
    width = x.shape[1]
    tile_max = torch.nn.functional.pad(z, (0, -width % 4096), value=float("-inf")).view(z.shape[0], -1, 4096)
    skipped = torch.exp(tile_max.amax(dim=2) - z.amax(dim=1, keepdim=True)) < floor
    index = torch.arange(width).unsqueeze(0)
    kept = (key > cut["cut_key"].unsqueeze(1)) | (
        (key == cut["cut_key"].unsqueeze(1)) & (index <= cut["cut_idx"].unsqueeze(1)))
    probs = torch.where(kept, torch.exp(z - cut["row_max"].unsqueeze(1)) / cut["kept_mass"].unsqueeze(1), 0.0)
    result[f"cut_{name}"] = {
        "skipped_tiles": int(skipped.sum()),
        "same_kept": torch.equal(kept, want > 0),
        "probs_close": bool(torch.allclose(probs, want, rtol=1e-5, atol=1e-7)),
        "row_max": torch.equal(cut["row_max"], z.amax(dim=1)),
        "searched": int(cut["searched"].sum()),
        "rows": int(cut["searched"].numel()),
        "kept_sizes": sorted(set((want > 0).sum(dim=1).tolist())),
    }
    off = ~torch.isclose(probs, want, rtol=1e-5, atol=1e-7)
    if off.any():  # what a failure needs to be understood: the rows, their path and both masses
        bad = off.any(dim=1).nonzero().flatten()
        result[f"cut_{name}"]["off_rows"] = {
            int(r): {"searched": int(cut["searched"][r]), "kept_mass": float(cut["kept_mass"][r]),
                     "reference_mass": float(torch.exp(z[r] - z[r].amax())[want[r] > 0].double().sum()),
                     "max_diff": float((probs[r] - want[r]).abs().max())}
            for r in bad[:6]
        }

# 2. The fused walk + bonus draw against verify_sampling_from_logits' torch path, the same coins.
def walk_case(bs, budget, topk, depth, vocab, params, renorm, cap, floor, draws):
    lp = (3 * torch.randn(bs, depth, vocab, generator=gen)).log_softmax(-1)
    tree = du.build_ddtree(lp, budget, topk)
    size = budget + 1
    logits = torch.randn(bs * size, vocab, generator=gen) * 2
    rows_depth = torch.cat([tree.depth.new_zeros(bs, 1), tree.depth], dim=1)
    likely = lp.argmax(-1).gather(1, rows_depth.clamp(max=depth - 1))  # the drafter's favourite next token
    logits.view(bs, size, vocab).scatter_add_(2, likely.unsqueeze(2), torch.full((bs, size, 1), 9.0))
    temps = torch.rand(bs, generator=gen) + 0.3
    valid = tree.valid if tree.has_padding else None
    same, accepted = 0, 0
    for _ in range(draws):
        coins = torch.rand(bs, depth, generator=gen)
        final = torch.rand(bs, generator=gen)
        want = du.verify_sampling_from_logits(
            tree.tokens, tree.parents, logits, temps, *params, top_p_after_top_k=renorm, coins=coins,
            final_coins=final, mask=tree.mask, valid=valid, max_depth=depth, path=tree.path,
            verify_depth=tree.verify_depth)
        got = dk.verify_sampling(
            tree.tokens, tree.parents, logits, temps, *params, coins, final, tree.mask, tree.path,
            tree.verify_depth, valid, top_p_after_top_k=renorm, candidate_cap=cap, candidate_floor=floor)
        same += all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))
        accepted += int(want[0].sum())
    return {"same": same, "draws": draws, "accepted": accepted}

mixed = (torch.tensor([1, 5, 1 << 30, 20]), torch.tensor([1.0, 0.9, 0.7, 0.95]),
         torch.tensor([0.0, 0.05, 0.0, 0.2]))
result["walk_temperature_only"] = walk_case(2, 8, 4, 7, 300, (None, None, None), False, 64, 2.0**-14, 3)
result["walk_mixed"] = walk_case(4, 8, 4, 7, 300, mixed, False, 64, 2.0**-14, 3)
result["walk_mixed_renorm_bisection"] = walk_case(4, 8, 4, 7, 300, mixed, True, 8, 0.3, 2)
result["walk_top_p_padding"] = walk_case(2, 16, 4, 2, 3, (None, torch.full((2,), 0.9), None), False, 64,
                                         2.0**-14, 3)
print("SAMPLING-CHECK " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def sampling_results(kernel_package: Path, sglang_cpu_path: str) -> dict:  # noqa: F811
    """The sampling kernels in Triton's interpreter against ddtree_utils' torch reference (one process)."""
    return run_script(SAMPLING_CHECK, "SAMPLING-CHECK", kernel_package, sglang_cpu_path, interpret=True,
                      timeout=900)  # fmt: skip


CUTS = ["all_filters", "all_filters_renorm", "ties", "ties_renorm_bisection", "bisection",
        "top_k_only_bisection", "temperature_only", "peaked_tiles",
        "peaked_tiles_temperature_only"]  # fmt: skip


@pytest.mark.parametrize("case", CUTS)
def test_sampling_filter_keeps_the_sorted_reference_prefix(sampling_results: dict, case: str) -> None:
    """Same kept tokens as sampling_target_probs' sort (ties included) and the same probabilities."""
    got = sampling_results[f"cut_{case}"]
    assert got["same_kept"] and got["probs_close"] and got["row_max"], got


def test_sampling_filter_cases_exercise_both_cut_searches(sampling_results: dict) -> None:
    """The candidate sort decides most rows at the default cap; a tiny cap forces the bisection."""
    assert sampling_results["cut_all_filters"]["searched"] < sampling_results["cut_all_filters"]["rows"]
    assert sampling_results["cut_bisection"]["searched"] >= 12
    assert sampling_results["cut_temperature_only"]["searched"] == 0
    assert sampling_results["cut_temperature_only"]["kept_sizes"] == [700]
    assert sampling_results["cut_peaked_tiles"]["skipped_tiles"] >= 40  # of 18 rows x 5 tiles
    assert sampling_results["cut_peaked_tiles"]["searched"] <= 3  # the hot (T 2) rows overflow a cap of 64
    tied_sizes = sampling_results["cut_ties"]["kept_sizes"]
    assert 1 in tied_sizes and len(tied_sizes) > 5


WALKS = ["walk_temperature_only", "walk_mixed", "walk_mixed_renorm_bisection", "walk_top_p_padding"]


@pytest.mark.parametrize("case", WALKS)
def test_sampling_verify_kernels_equal_the_torch_walk(sampling_results: dict, case: str) -> None:
    """Same accept length, accepted path and bonus token as the torch path for the same coins."""
    got = sampling_results[case]
    assert got["same"] == got["draws"], got
    assert got["accepted"] >= 1, f"the case never accepts a draft node: {got}"


def test_sampling_verify_cases_accept_many_draft_nodes(sampling_results: dict) -> None:
    accepted = [sampling_results[case]["accepted"] for case in WALKS]
    assert sum(accepted) >= 30, f"the cases barely exercise acceptance: {accepted}"


COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from ddt import ddtree_kernels as dk

def signature(pointers, scalars, constexprs):
    sig = {**pointers, **{name: "i32" for name in scalars}, **{name: "constexpr" for name in constexprs}}
    return sig, constexprs

rank_ptrs = dict(zip(
    "key_ptr ids_ptr info_ptr position_ptr row_cand_ptr tokens_ptr scores_ptr valid_ptr".split(),
    ["*i64"] * 6 + ["*fp32", "*i8"]))
rows_ptrs = dict(zip(
    "info_ptr anc_ptr position_ptr row_cand_ptr parents_ptr verify_depth_ptr mask_ptr path_ptr".split(),
    ["*i64"] * 6 + ["*i8", "*i64"]))
verify_ptrs = dict(zip(
    "tokens_ptr parents_ptr target_ptr mask_ptr path_ptr verify_depth_ptr valid_ptr accept_len_ptr "
    "accept_idx_ptr bonus_ptr".split(),
    ["*i64", "*i64", "*i64", "*i8", "*i64", "*i64", "*i8", "*i64", "*i64", "*i64"]))
kernels = {  # the pro6000 profile's shapes: vocab 163840, top-k 4, depth 7, budget 8
    "_tile_topk_kernel": signature(
        {"scores_ptr": "*fp32", "cand_value_ptr": "*fp32", "cand_index_ptr": "*i32", "tile_max_ptr": "*fp32",
         "tile_sum_ptr": "*fp32"}, ["row_stride", "num_cols"],
        {"K": 4, "K_PAD": 4, "TILE": 4096, "NONE": 2**31 - 1}),
    "_tile_topk_prefilter_kernel": signature(
        {"scores_ptr": "*fp32", "cand_value_ptr": "*fp32", "cand_index_ptr": "*i32", "tile_max_ptr": "*fp32",
         "tile_sum_ptr": "*fp32"}, ["row_stride", "num_cols"],
        {"K": 4, "K_PAD": 4, "TILE": 4096, "GROUP": 64, "NONE": 2**31 - 1}),
    "_merge_topk_kernel": signature(
        {"cand_value_ptr": "*fp32", "cand_index_ptr": "*i32", "tile_max_ptr": "*fp32",
         "tile_sum_ptr": "*fp32", "out_value_ptr": "*fp32", "out_index_ptr": "*i64", "out_lse_ptr": "*fp32"},
        ["num_tiles"],
        {"K": 4, "K_PAD": 4, "CAND": 256, "TILES": 64, "NONE": 2**31 - 1}),
    "_score_kernel": signature({"values_ptr": "*fp32", "term_ptr": "*i64", "key_ptr": "*i64"}, [], dict(
        C=43, BLOCK=64, D=7, DK=28, FIXED_ONE=2.0**40, FLOOR=-1.0e4, PAD_SCORE=-(2**62))),
    "_rank_kernel": signature(rank_ptrs, ["num_real"], dict(
        C=43, C_PAD=64, BLOCK=64, DK=28, BUDGET=8, FIXED_ONE=2.0**40)),
    "_tree_rows_kernel": signature(rows_ptrs, [], dict(C=43, D=7, D_PAD=8, BUDGET=8, N_PAD=16)),
    "_verify_greedy_kernel": signature(verify_ptrs, [], dict(N=9, N_PAD=16, D=7, D_PAD=8, HAS_VALID=False)),
}
# Sampling verification (pro6000 shapes, every filter on, top-p on the renormalised top-k mass).
rows_ptrs = {"logits_ptr": "*fp32", "temp_ptr": "*fp32", "row_max_ptr": "*fp32", "kept_mass_ptr": "*fp32",
             "cut_key_ptr": "*i32", "cut_idx_ptr": "*i32"}
mass_ptrs = {"logits_ptr": "*fp32", "temp_ptr": "*fp32", "tile_max_ptr": "*fp32", "tile_sum_ptr": "*fp64",
             "count_ptr": "*i32",
             "tile_mass_ptr": "*fp64", "cand_z_ptr": "*fp32", "cand_idx_ptr": "*i32", "floor": "fp32"}
residual_ptrs = {**rows_ptrs, "tokens_ptr": "*i64", "parents_ptr": "*i64", "valid_ptr": "*i8",
                 "last_ptr": "*i64", "tile_mass_ptr": "*fp64"}
kernels.update({
    "_sample_max_kernel": signature(
        {"logits_ptr": "*fp32", "temp_ptr": "*fp32", "tile_max_ptr": "*fp32", "tile_sum_ptr": "*fp64",
         "count_ptr": "*i32"},
        ["row_stride", "vocab"], dict(N=9, TILE=4096)),
    "_sample_mass_kernel": signature(
        mass_ptrs, ["row_stride", "vocab"], dict(N=9, TILE=4096, TILES=64, CAP=2048)),
    "_sample_cut_kernel": signature(
        {**mass_ptrs, **rows_ptrs, "topk_ptr": "*i32", "topp_ptr": "*fp32", "minp_ptr": "*fp32",
         "searched_ptr": "*i8"}, ["row_stride", "vocab"],
        dict(N=9, TILE=4096, TILES=64, CAP=2048, HAS_TOP_K=True, HAS_TOP_P=True, HAS_MIN_P=True,
             RENORM=True)),
    "_sample_walk_kernel": signature(
        {**rows_ptrs, **dict(zip(
            "tokens_ptr parents_ptr mask_ptr path_ptr verify_depth_ptr valid_ptr coins_ptr "
            "accept_len_ptr accept_idx_ptr last_ptr fallback_ptr".split(),
            ["*i64", "*i64", "*i8", "*i64", "*i64", "*i8", "*fp32"] + ["*i64"] * 4))},
        ["row_stride"], dict(N=9, N_PAD=16, D=7, D_PAD=8, HAS_VALID=True)),
    "_residual_mass_kernel": signature(
        residual_ptrs, ["row_stride", "vocab"], dict(N=9, N_PAD=16, TILE=4096, HAS_VALID=True)),
    "_residual_draw_kernel": signature(
        {**residual_ptrs, "final_coins_ptr": "*fp32", "fallback_ptr": "*i64", "bonus_ptr": "*i64"},
        ["row_stride", "vocab"], dict(N=9, N_PAD=16, TILE=4096, TILES=64, HAS_VALID=True)),
})
result = {}
for arch in sys.argv[1:]:
    for name, (sig, constexprs) in kernels.items():
        fn = getattr(dk, name)
        # the order of the kernel's own parameters
        sig = {p: sig[p] for p in fn.arg_names}
        compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                                  target=GPUTarget("cuda", int(arch), 32))
        result[f"{arch}:{name}"] = len(compiled.asm["cubin"])
print("KERNEL-COMPILE " + json.dumps(result))
"""
KERNEL_NAMES = [
    "_tile_topk_kernel",
    "_tile_topk_prefilter_kernel",
    "_merge_topk_kernel",
    "_score_kernel",
    "_rank_kernel",
    "_tree_rows_kernel",
    "_verify_greedy_kernel",
    "_sample_max_kernel",
    "_sample_mass_kernel",
    "_sample_cut_kernel",
    "_sample_walk_kernel",
    "_residual_mass_kernel",
    "_residual_draw_kernel",
]


def target_archs() -> list[str]:
    """sm_XY of every target profile (env/targets/*.yaml compute_capability) and the H200 device's 90."""
    archs = {"90"}
    for profile in sorted((REPO_ROOT / "env" / "targets").glob("*.yaml")):
        capability = str(yaml.safe_load(profile.read_text(encoding="utf-8"))["gpu"]["compute_capability"])
        archs.add(capability.replace(".", ""))
    return sorted(archs)


@pytest.fixture(scope="module")
def compiled(kernel_package: Path, sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_script(COMPILE, "KERNEL-COMPILE", kernel_package, sglang_cpu_path, interpret=False,
                      timeout=900, args=target_archs())  # fmt: skip


def test_target_archs_come_from_the_profiles() -> None:
    assert {"90", "103", "120"} <= set(target_archs())


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_kernels_compile_to_cubin_for_every_target_arch(compiled: dict, name: str) -> None:
    """Triton's own compiler (LLVM + its bundled ptxas) builds sm_90/103/120 code here, without a GPU."""
    for arch in target_archs():
        assert compiled.get(f"{arch}:{name}", 0) > 1000, f"no sm_{arch} cubin for {name}"
