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
for variant, switch in (("", "0"), (":prefilter", "1")):  # the plain tile kernel, and the default prefilter
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
    for tile in (1024, 16384):  # other tile sizes (the benchmark times them): the same results
        for name in ("kimi_vocab_k4", "short_last_tile", "heavy_ties", "minus_inf"):
            x, k = cases[name]
            values, index, lse = dk.topk_logsumexp(x, k, tile=tile)
            ref_values, ref_index, ref_lse = reference(x, k)
            result[f"{name}{variant}:tile{tile}"] = {
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
try:
    dk.topk_logsumexp(torch.zeros(2, 10), 2, tile=3000)
    result["tile_not_power_of_two"] = "no error"
except ValueError as exc:
    result["tile_not_power_of_two"] = str(exc)

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
    """Both tile kernels: the plain one (SGLANG_DDTREE_TOPK_PREFILTER=0) and the default group prefilter."""
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


@pytest.mark.parametrize("variant", ["", ":prefilter"], ids=["tile", "prefilter"])
@pytest.mark.parametrize("tile", [1024, 16384])
def test_topk_tile_sizes_equal_the_sort_reference(kernel_results: dict, tile: int, variant: str) -> None:
    """Any tile size of the first launch (fewer, larger programs for large batches) gives the sort's top-k
    and log-sum-exp, short last tiles, ties and -inf included; a tile that is no power of two is refused."""
    for case in ("kimi_vocab_k4", "short_last_tile", "heavy_ties", "minus_inf"):
        got = kernel_results[f"{case}{variant}:tile{tile}"]
        assert got["values"] and got["index"] and got["lse"], (case, got)
    assert "power of two" in kernel_results["tile_not_power_of_two"], kernel_results["tile_not_power_of_two"]


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
n, vocab = 2, 700  # two rows a request
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
    "ties_renorm": ("ties", ("top_k", "top_p", "min_p"), True, 64, 2.0**-14),
    "ties_renorm_bisection": ("ties", ("top_k", "top_p", "min_p"), True, 8, 0.5),
    "ties_bisection": ("ties", ("top_k", "top_p", "min_p"), False, 8, 0.5),
    "ties_top_p_only": ("ties", ("top_p",), False, 64, 2.0**-14),
    "bisection": ("randn", ("top_k", "top_p", "min_p"), False, 8, 0.5),
    "top_k_only_bisection": ("ties", ("top_k",), False, 8, 0.5),
    "temperature_only": ("randn", (), False, 64, 2.0**-14),
    "peaked_tiles": ("peaked", ("top_k", "top_p", "min_p"), False, 64, 2.0**-14),
    "peaked_tiles_temperature_only": ("peaked", (), False, 64, 2.0**-14),
}

def flashinfer_kept(x, temps, top_k, top_p, min_p, renorm):
    # flashinfer's rule from its definition, token by token (float64): x is kept iff fewer than top_k
    # tokens are above it, their mass is below top_p of the (top-k) mass, and w_x >= min_p.
    z = (x / temps.unsqueeze(1)).double()
    w = torch.exp(z - z.amax(dim=1, keepdim=True))
    above = z.unsqueeze(1) > z.unsqueeze(2)  # [row, x, y]: y is above x
    kept = torch.ones_like(z, dtype=torch.bool)
    if top_k is not None:
        kept &= above.sum(dim=2) < top_k.unsqueeze(1)
    if top_p is not None:
        reference = torch.where(kept, w, 0.0).sum(dim=1) if renorm else w.sum(dim=1)
        mass_above = (above * w.unsqueeze(1)).sum(dim=2)
        kept &= (mass_above < (top_p.double() * reference).unsqueeze(1)) | (top_p >= 1).unsqueeze(1)
    if min_p is not None:
        kept &= (w >= min_p.unsqueeze(1).double()) | (min_p <= 0).unsqueeze(1)
    return kept | (z == z.amax(dim=1, keepdim=True))

for (name, (which, on, renorm, cap, floor)), keep_ties in [
        (item, ties) for item in variants.items() for ties in (True, False)]:
    name = name if keep_ties else name + ":positional"
    x = logits[which]
    params = [filters[f] if f in on else None for f in ("top_k", "top_p", "min_p")]
    rows_params = [per_request(v, n) for v in params]
    want = du.sampling_target_probs(x, per_request(temps, n), *rows_params, top_p_after_top_k=renorm,
                                    keep_ties=keep_ties)
    cut = dk.filter_rows(x, temps, *params, n, top_p_after_top_k=renorm, keep_ties=keep_ties,
                         candidate_cap=cap, candidate_floor=floor)
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
    if keep_ties and x.shape[1] <= 1000:  # the reference against the rule's definition (V x V per row)
        rule = flashinfer_kept(x, per_request(temps, n), *rows_params, renorm)
        z_rows = x / per_request(temps, n).unsqueeze(1)
        kept_min = torch.where(want > 0, z_rows, float("inf")).amin(dim=1, keepdim=True)
        result[f"cut_{name}"]["rule"] = torch.equal(rule, want > 0)
        # rows where the positional rule would cut inside the run of ties at the cut
        positional = du.sampling_target_probs(x, per_request(temps, n), *rows_params,
                                              top_p_after_top_k=renorm, keep_ties=False)
        result[f"cut_{name}"]["tie_rows"] = int(((want > 0) != (positional > 0)).any(dim=1).sum())
        result[f"cut_{name}"]["ties_at_cut"] = int(((z_rows == kept_min).sum(dim=1) > 1).sum())
    off = ~torch.isclose(probs, want, rtol=1e-5, atol=1e-7)
    if off.any():  # what a failure needs to be understood: the rows, their path and both masses
        bad = off.any(dim=1).nonzero().flatten()
        result[f"cut_{name}"]["off_rows"] = {
            int(r): {"searched": int(cut["searched"][r]), "kept_mass": float(cut["kept_mass"][r]),
                     "reference_mass": float(torch.exp(z[r] - z[r].amax())[want[r] > 0].double().sum()),
                     "max_diff": float((probs[r] - want[r]).abs().max())}
            for r in bad[:6]
        }

# 2. The fused walk + bonus draw against verify_sampling_from_logits' torch path, the same coins, and that
# path (a cut per row, then only the nodes' and the last rows' probabilities) against verify_sampling on the
# whole sampling_target_probs.
def walk_case(bs, budget, topk, depth, vocab, params, renorm, cap, floor, draws, keep_ties=True, tied=False,
              boost=9.0):
    lp = (3 * torch.randn(bs, depth, vocab, generator=gen)).log_softmax(-1)
    tree = du.build_ddtree(lp, budget, topk)
    size = budget + 1
    logits = torch.randn(bs * size, vocab, generator=gen) * 2
    if tied:  # half-integer logits: runs of ties at most cuts
        logits = (logits * 2).round() / 2
    rows_depth = torch.cat([tree.depth.new_zeros(bs, 1), tree.depth], dim=1)
    likely = lp.argmax(-1).gather(1, rows_depth.clamp(max=depth - 1))  # the drafter's favourite next token
    logits.view(bs, size, vocab).scatter_add_(2, likely.unsqueeze(2), torch.full((bs, size, 1), boost))
    temps = torch.rand(bs, generator=gen) + 0.3
    valid = tree.valid if tree.has_padding else None
    probs = du.sampling_target_probs(
        logits, temps.repeat_interleave(size),
        *(None if v is None else v.repeat_interleave(size) for v in params), top_p_after_top_k=renorm,
        keep_ties=keep_ties).view(bs, size, vocab)
    same, same_reference, accepted = 0, 0, 0
    for _ in range(draws):
        coins = torch.rand(bs, depth, generator=gen)
        final = torch.rand(bs, generator=gen)
        want = du.verify_sampling_from_logits(
            tree.tokens, tree.parents, logits, temps, *params, top_p_after_top_k=renorm, keep_ties=keep_ties,
            coins=coins, final_coins=final, mask=tree.mask, valid=valid, max_depth=depth, path=tree.path,
            verify_depth=tree.verify_depth)
        got = dk.verify_sampling(
            tree.tokens, tree.parents, logits, temps, *params, coins, final, tree.mask, tree.path,
            tree.verify_depth, valid, top_p_after_top_k=renorm, keep_ties=keep_ties, candidate_cap=cap,
            candidate_floor=floor, sample_first=False)  # plain temperature too: the coin walk, same coins
        reference = du.verify_sampling(
            tree.tokens, tree.parents, probs, coins=coins, final_coins=final, mask=tree.mask, valid=valid,
            max_depth=depth, path=tree.path, verify_depth=tree.verify_depth)
        same += all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))
        same_reference += all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(reference, want))
        accepted += int(want[0].sum())
    return {"same": same, "same_reference": same_reference, "draws": draws, "accepted": accepted}

mixed = (torch.tensor([1, 5, 1 << 30, 20]), torch.tensor([1.0, 0.9, 0.7, 0.95]),
         torch.tensor([0.0, 0.05, 0.0, 0.2]))
result["walk_temperature_only"] = walk_case(2, 8, 4, 7, 300, (None, None, None), False, 64, 2.0**-14, 3)
result["walk_mixed"] = walk_case(4, 8, 4, 7, 300, mixed, False, 64, 2.0**-14, 2)
result["walk_mixed_renorm_bisection"] = walk_case(4, 8, 4, 7, 300, mixed, True, 8, 0.3, 1)
result["walk_top_p_padding"] = walk_case(2, 16, 4, 2, 3, (None, torch.full((2,), 0.9), None), False, 64,
                                         2.0**-14, 2)
result["walk_mixed_ties"] = walk_case(4, 8, 4, 7, 300, mixed, False, 64, 2.0**-14, 2, tied=True)
result["walk_mixed_ties_renorm_bisection"] = walk_case(4, 8, 4, 7, 300, mixed, True, 8, 0.3, 1, tied=True)
result["walk_mixed_positional"] = walk_case(4, 8, 4, 7, 300, mixed, False, 64, 2.0**-14, 2,
                                            keep_ties=False, tied=True)
# Three tiles (4096 + 4096 + 808): the residual's tiles without a child of the last row come from the first
# pass's sums (temperature only) or are skipped when their maximum is cut off (top-k 5 keeps one tile).
# The favourite raised by 12: the bulk of 9000 tokens still holds a third of the mass at temperature 1.
result["walk_temperature_only_tiles"] = walk_case(3, 8, 4, 7, 9000, (None,) * 3, False, 64, 0, 4, boost=12.0)
result["walk_mixed_tiles"] = walk_case(4, 8, 4, 7, 9000, mixed, False, 64, 0.0, 1, boost=12.0)
# 3. The last accepted row's children list at budget 32 (N 33, three tiles of 4096, 4096 and 808): the root
# has six children, two of them invalid (their tokens stay in the residual) and two holding one token (listed
# once), in every tile; node 0 has fourteen (two invalid), node 6 twelve (one invalid). Coins reject the
# root's children in half the draws (request 0: always). "crumb": the root row's first tile holds only child
# 100 (every other logit -inf), so its mass from the first pass's sums less the child's probability is a
# rounding crumb; the final coin 0 draws from it first, and the draw must move on to the next tile (4096).
def children_case(params, draws, crumb=False, bs=4, cap=dk._CANDIDATE_CAP):
    budget, depth, vocab = 32, 3, 9000
    size = budget + 1
    parents = torch.tensor([-1] * 6 + [0] * 14 + [6] * 12)
    tokens = torch.randint(0, vocab, (budget,), generator=gen)
    tokens[:6] = torch.tensor([100, 5000, 5001, 8500, 8501, 5001])
    valid = torch.ones(budget, dtype=torch.bool)
    valid[[1, 4, 10, 11, 25]] = False
    parents, tokens, valid = (t.unsqueeze(0).expand(bs, budget).contiguous()
                              for t in (parents, tokens, valid))
    mask = du.tree_attention_mask(parents, depth)
    path, verify_depth = du._tree_tables(mask, depth, None, None)
    logits = torch.randn(bs * size, vocab, generator=gen) * 2
    rows = logits.view(bs, size, vocab)
    rows[:, 0, tokens[0, :6]] += 6.0  # the root's children (valid or not) hold much of its mass
    rows[:, 1, tokens[0, 6:20]] += 5.0
    rows[:, 7, tokens[0, 20:]] += 5.0
    if crumb:
        rows[:, 0, :4096] = float("-inf")
        rows[:, 0, 100] = torch.linspace(3.0, 9.0, bs)
    temps = torch.full((bs,), 0.8)
    same, rejected = 0, 0
    for _ in range(draws):
        coins = torch.rand(bs, depth, generator=gen)
        coins[:, 0] = torch.where(torch.rand(bs, generator=gen) < 0.5, 0.999, coins[:, 0])
        coins[0, 0] = 0.999  # request 0 always ends at the root (its valid children hold far less)
        final = torch.zeros(bs) if crumb else torch.rand(bs, generator=gen)
        args = (tokens, parents, logits, temps, *params)
        tables = dict(mask=mask, path=path, verify_depth=verify_depth)
        want = du.verify_sampling_from_logits(*args, coins=coins, final_coins=final, valid=valid,
                                              max_depth=depth, **tables)
        got = dk.verify_sampling(*args, coins, final, mask, path, verify_depth, valid, sample_first=False,
                                 candidate_cap=cap)
        same += all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))
        rejected += int((want[0] == 0).sum())
        if crumb:
            result.setdefault("crumb_bonus", []).extend(got[2].tolist())
    return {"same": same, "draws": draws, "root_rejected": rejected}

filters = (torch.tensor([50, 1 << 30]), torch.tensor([0.95, 0.9]), None)
result["children_temperature_only"] = children_case((None, None, None), 4)
# The filters' kernels are slow interpreted: two requests, one draw and a cap of 256 (the cut kernel's
# interpreted cost grows with the cap: at the default 2048 this case ran over 7 minutes); which search finds
# the cut does not change the residual's children.
result["children_filtered"] = children_case(filters, 1, bs=2, cap=256)
result["children_crumb"] = children_case((None, None, None), 2, crumb=True)
print("SAMPLING-CHECK " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def sampling_results(kernel_package: Path, sglang_cpu_path: str) -> dict:  # noqa: F811
    """The sampling kernels in Triton's interpreter against ddtree_utils' torch reference (one process)."""
    return run_script(SAMPLING_CHECK, "SAMPLING-CHECK", kernel_package, sglang_cpu_path, interpret=True,
                      timeout=1800)  # fmt: skip


CUTS = ["all_filters", "all_filters_renorm", "ties", "ties_renorm", "ties_renorm_bisection", "ties_bisection",
        "ties_top_p_only", "bisection", "top_k_only_bisection", "temperature_only", "peaked_tiles",
        "peaked_tiles_temperature_only"]  # fmt: skip


@pytest.mark.parametrize("rule", ["", ":positional"], ids=["flashinfer_ties", "positional"])
@pytest.mark.parametrize("case", CUTS)
def test_sampling_filter_keeps_the_sorted_reference_prefix(
    sampling_results: dict, case: str, rule: str
) -> None:
    """Same kept tokens as sampling_target_probs' sort (ties included) and the same probabilities, under
    flashinfer's tie rule (the default) and the pytorch backend's positional one."""
    got = sampling_results[f"cut_{case}{rule}"]
    assert got["same_kept"] and got["probs_close"] and got["row_max"], got


@pytest.mark.parametrize("case", [case for case in CUTS if not case.startswith("peaked")])
def test_reference_keeps_what_flashinfers_rule_defines(sampling_results: dict, case: str) -> None:
    """sampling_target_probs(keep_ties=True) against the rule written token by token: fewer than top_k
    tokens above, their mass below top_p of the (top-k) mass (strict), w >= min_p."""
    assert sampling_results[f"cut_{case}"]["rule"], sampling_results[f"cut_{case}"]


def test_tie_cases_cut_inside_runs_of_ties(sampling_results: dict) -> None:
    """The tie ladders really put ties at the cut, where the two rules keep different tokens."""
    for case in ("ties", "ties_renorm", "ties_bisection", "ties_top_p_only", "top_k_only_bisection"):
        got = sampling_results[f"cut_{case}"]
        assert got["ties_at_cut"] >= 6 and got["tie_rows"] >= 3, (case, got)


def test_sampling_filter_cases_exercise_both_cut_searches(sampling_results: dict) -> None:
    """The candidate sort decides most rows at the default cap; a tiny cap forces the bisection."""
    assert sampling_results["cut_all_filters"]["searched"] < sampling_results["cut_all_filters"]["rows"]
    assert sampling_results["cut_bisection"]["searched"] >= 2 * sampling_results["cut_bisection"]["rows"] // 3
    assert sampling_results["cut_temperature_only"]["searched"] == 0
    assert sampling_results["cut_temperature_only"]["kept_sizes"] == [700]
    assert sampling_results["cut_peaked_tiles"]["skipped_tiles"] >= 40  # of 12 rows x 5 tiles
    assert sampling_results["cut_peaked_tiles"]["searched"] <= 3  # the hot (T 2) rows overflow a cap of 64
    tied_sizes = sampling_results["cut_ties"]["kept_sizes"]
    assert 1 in tied_sizes and len(tied_sizes) > 5


WALKS = ["walk_temperature_only", "walk_mixed", "walk_mixed_renorm_bisection", "walk_top_p_padding",
         "walk_mixed_ties", "walk_mixed_ties_renorm_bisection", "walk_mixed_positional",
         "walk_temperature_only_tiles", "walk_mixed_tiles"]  # fmt: skip


@pytest.mark.parametrize("case", WALKS)
def test_sampling_verify_kernels_equal_the_torch_walk(sampling_results: dict, case: str) -> None:
    """Same accept length, accepted path and bonus token as the torch path for the same coins, and the
    torch path the same as verify_sampling over the whole sampling_target_probs."""
    got = sampling_results[case]
    assert got["same"] == got["draws"] and got["same_reference"] == got["draws"], got
    assert got["accepted"] >= 1, f"the case never accepts a draft node: {got}"


def test_sampling_verify_cases_accept_many_draft_nodes(sampling_results: dict) -> None:
    accepted = [sampling_results[case]["accepted"] for case in WALKS]
    assert sum(accepted) >= 30, f"the cases barely exercise acceptance: {accepted}"


@pytest.mark.parametrize("case", ["children_temperature_only", "children_filtered", "children_crumb"])
def test_sampling_verify_lists_the_last_rows_children(sampling_results: dict, case: str) -> None:
    """Budget 32, three tiles: the residual leaves out exactly the last accepted row's valid children (an
    invalid child's token stays drawable, a token two children hold is zeroed once), with and without a
    filter, the same results as the torch path; request 0's walk ends at the root in every draw."""
    got = sampling_results[case]
    assert got["same"] == got["draws"], got
    assert got["root_rejected"] >= got["draws"], f"the draws rarely end at the root: {got}"


def test_sampling_verify_draws_past_a_rounding_crumb(sampling_results: dict) -> None:
    """Without a filter a tile's residual mass is its first-pass sum less its children's probabilities; in
    "children_crumb" the first tile holds only a child, so what is left of it is a rounding crumb (0 or
    not: 1/K less float32's rounding of 1/K), and the final coin 0 draws from it first when it is positive.
    The draw must then take no token of that tile (its lane 0 has probability 0) but the next tile's first,
    4096, as the torch path does (test above: the same bonus in every draw); here: that case is reached."""
    assert 4096 in sampling_results["crumb_bonus"], sampling_results["crumb_bonus"]


SEARCH_CHECK = r"""
import itertools, json, torch
from ddt import ddtree_kernels as dk, ddtree_utils as du

gen = torch.Generator().manual_seed(11)
n, vocab = 1, 4500  # two tiles (4096 + 404): a positional cut's tie can lie in either; one row a request
params = {  # per request: which filter binds differs from row to row
    "top_k": torch.tensor([1, 3, 4300, 2000, 1 << 30, 4400]),
    "top_p": torch.tensor([0.3, 0.9, 0.97, 0.5, 0.999, 0.99]),
    "min_p": torch.tensor([0.0, 0.5, 1e-4, 0.3, 0.0, 2e-3]),
}
temps = torch.tensor([1.0, 0.8, 1.0, 1.5, 1.0, 0.6])
flat = torch.zeros(6 * n, vocab)  # many tokens of tiny equal mass: the cut inside a run of thousands of ties
flat.scatter_(1, torch.randint(0, vocab, (6 * n, 5), generator=gen), 6.0)
logits = {
    "flat": flat,
    "ties": (torch.randn(6 * n, vocab, generator=gen) * 3).to(torch.bfloat16).float().round(),
    "spread": torch.randn(6 * n, vocab, generator=gen) * 2,  # distinct keys: all eight digits decide
}
names = ("top_k", "top_p", "min_p")
combos = [c for r in (1, 2, 3) for c in itertools.combinations(names, r)]
result = {}
for which, x in logits.items():
    for on in combos if which != "spread" else [names]:
        for renorm in (False, True) if {"top_k", "top_p"} <= set(on) else (False,):
            for keep_ties in (True, False):
                chosen = [params[f] if f in on else None for f in names]
                rows = [None if v is None else v.repeat_interleave(n) for v in chosen]
                want = du.sampling_target_probs(x, temps.repeat_interleave(n), *rows,
                                                top_p_after_top_k=renorm, keep_ties=keep_ties)
                # a cap of 8 and a floor of 0.5: the candidates rarely decide, the radix search does
                cut = dk.filter_rows(x, temps, *chosen, n, top_p_after_top_k=renorm, keep_ties=keep_ties,
                                     candidate_cap=8, candidate_floor=0.5)
                exact = du.sampling_cut(x, temps.repeat_interleave(n), *rows, top_p_after_top_k=renorm,
                                        keep_ties=keep_ties)
                z = x / temps.repeat_interleave(n).unsqueeze(1)
                key = du._float_key(z)
                index = torch.arange(vocab).unsqueeze(0)
                kept = (key > cut["cut_key"].unsqueeze(1)) | (
                    (key == cut["cut_key"].unsqueeze(1)) & (index <= cut["cut_idx"].unsqueeze(1)))
                probs = torch.where(kept, torch.exp(z - cut["row_max"].unsqueeze(1))
                                    / cut["kept_mass"].unsqueeze(1), 0.0)
                searched = cut["searched"] != 0
                name = f"{which}:{'+'.join(on)}" + (":renorm" if renorm else "")
                result[name + ("" if keep_ties else ":positional")] = {
                    "same_kept": torch.equal(kept, want > 0),
                    "probs_close": bool(torch.allclose(probs, want, rtol=1e-5, atol=1e-7)),
                    "same_cut": all(torch.equal(cut[k], exact[k]) for k in ("cut_key", "cut_idx", "row_max")),
                    "searched": int(searched.sum()),
                    "rows": 6 * n,
                    "kept_sizes": sorted(set((want > 0).sum(dim=1).tolist())),
                    "second_tile_cut": int((searched & (cut["cut_idx"] >= 4096) & (cut["cut_idx"] < vocab))
                                           .sum()),
                }
print("SEARCH-CHECK " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def search_results(kernel_package: Path, sglang_cpu_path: str) -> dict:  # noqa: F811
    """The radix search (the cut below the candidates) in Triton's interpreter against the torch reference."""
    return run_script(SEARCH_CHECK, "SEARCH-CHECK", kernel_package, sglang_cpu_path, interpret=True,
                      timeout=1200)  # fmt: skip


def test_radix_search_cut_equals_the_reference_in_every_filter_combination(search_results: dict) -> None:
    """Every filter combination (top-p after top-k too), both tie rules, on thousands of tied tokens of
    tiny mass, on bf16-rounded ties and on distinct keys: the same kept tokens (ties at the cut included)
    and the same probabilities as sampling_target_probs' sort, with the cut found by the radix search; the
    cut itself (key, index, row max) equal to sampling_cut's, as the GPU test asserts."""
    assert len(search_results) == 2 * (2 * 9 + 2), sorted(search_results)
    wrong = {
        case: got
        for case, got in search_results.items()
        if not (got["same_kept"] and got["probs_close"] and got["same_cut"])
    }
    assert not wrong, wrong
    for case, got in search_results.items():
        assert got["searched"] >= got["rows"] // 2, (case, got)


def test_radix_search_cases_cut_deep_and_across_tiles(search_results: dict) -> None:
    """The cases reach what the search must get right: cuts inside the run of thousands of equal tokens
    (positional: kept sizes between the few high tokens and the whole row; flashinfer's rule: the whole
    run or none of it) and positional cuts whose last kept tie lies in the second tile."""
    flat_sizes = set(search_results["flat:top_p:positional"]["kept_sizes"])
    assert any(5 < size < 4500 for size in flat_sizes), flat_sizes
    assert {5, 4500} <= set(search_results["flat:top_p"]["kept_sizes"]), search_results["flat:top_p"]
    positional = search_results["flat:top_k:positional"]
    assert positional["second_tile_cut"] >= 2, positional
    assert len(search_results["spread:top_k+top_p+min_p"]["kept_sizes"]) >= 4


EXACT_CUT_CHECK = r"""
import json, torch
from ddt import ddtree_kernels as dk, ddtree_utils as du

# The GPU test's comparison (test_ddtree_core_gpu.py::test_radix_search_cut_equals_the_reference) on three
# tiles (4096 + 4096 + 808): its logit shape (2 N(0, 1) plus 64 raised tokens, bf16-rounded; or a flat tail of
# ties at 0), its per-request filters (top-k 1 << 30 and min-p 0: rows no filter cuts; top-k 6000: a cut deep
# in the row, across tiles), a cap of 8 and a floor of 0.5 (the radix search decides).
gen = torch.Generator().manual_seed(60)
vocab = 9000
x = 2 * torch.randn(4, vocab, generator=gen)
x.scatter_add_(1, torch.randint(0, vocab, (4, 64), generator=gen), 12 * torch.rand(4, 64, generator=gen))
bf16 = x.to(torch.bfloat16).float()
inputs = {"bf16-ties": bf16, "flat-tail": torch.where(bf16 > 8.0, bf16, torch.zeros_like(bf16))}
temps = torch.tensor([1.0, 0.8, 1.3, 0.6])
on = {"top_ks": torch.tensor([1, 40, 6000, 1 << 30], dtype=torch.int32),
      "top_ps": torch.tensor([0.3, 0.9, 0.95, 0.999]), "min_ps": torch.tensor([0.0, 0.05, 1e-6, 1e-3])}
variants = du.sampling_variants(4, "cpu")
result = {}
index = torch.arange(vocab)[None, :]
for which, logits in inputs.items():
    key = du._float_key(logits / temps[:, None])
    for name in ("temperature", "top_ks", "min_ps", "top_ps"):  # top_ps: the H200's row 18 (issue 27)
        chosen = [None if variants[name][key] is None else on[key] for key in on]
        for keep_ties in (True, False):
            got = dk.filter_rows(logits, temps, *chosen, 1, keep_ties=keep_ties, candidate_cap=8,
                                 candidate_floor=0.5)
            want = du.sampling_cut(logits, temps, *chosen, keep_ties=keep_ties)
            result[f"{which}:{name}" + ("" if keep_ties else ":positional")] = {
                "differ": [key for key in ("cut_key", "cut_idx", "row_max")
                           if not torch.equal(got[key], want[key])],
                "mass_close": bool(torch.allclose(got["kept_mass"], want["kept_mass"], rtol=1e-5)),
                "searched": int(got["searched"].sum()),
                "uncut": int((want["cut_key"] == du._KEEP_ALL_KEY).sum()),
                "deep": int(((want["cut_key"] != du._KEEP_ALL_KEY) & (got["searched"] != 0)
                             & (on["top_ks"] > 1000)).sum()),
                "split_runs": ((key == want["cut_key"][:, None]) & (index > want["cut_idx"][:, None]))
                              .any(dim=1).nonzero().flatten().tolist(),  # rows keeping a part of a run
            }
print("EXACT-CUT " + json.dumps(result))
"""


def test_cut_equals_the_reference_exactly(kernel_package: Path, sglang_cpu_path: str) -> None:  # noqa: F811
    """filter_rows' cut key, cut index and row max equal sampling_cut's exactly (as the GPU test asserts),
    rows no filter cuts included: both write "keep everything" as (_KEEP_ALL_KEY, vocab). Before, the
    reference cut at its last token instead (the same kept tokens, another key), and the GPU test failed on
    the rows of top-k 1 << 30 (sitting 2026-12-02b, radix.log)."""
    got = run_script(EXACT_CUT_CHECK, "EXACT-CUT", kernel_package, sglang_cpu_path, interpret=True,
                     timeout=600)  # fmt: skip
    assert len(got) == 16, sorted(got)
    wrong = {case: value for case, value in got.items() if value["differ"] or not value["mass_close"]}
    assert not wrong, wrong
    # top-p alone, pytorch rule: the GPU's row 18 (issue 27; temperature 1.3, top-p 0.95) on CPU, the cut
    # inside a run of bf16 ties found by the radix search in every row
    top_p = got["bf16-ties:top_ps:positional"]
    assert top_p["searched"] >= 3 and 2 in top_p["split_runs"], top_p
    assert all(got[f"{which}:temperature"]["uncut"] == 4 for which in ("bf16-ties", "flat-tail")), got
    for which in ("bf16-ties", "flat-tail"):
        for rule in ("", ":positional"):
            top_k, min_p = got[f"{which}:top_ks{rule}"], got[f"{which}:min_ps{rule}"]
            assert top_k["uncut"] == 1 and min_p["uncut"] == 1, (which, rule, got)  # top-k 1 << 30, min-p 0
            assert top_k["deep"] == 1 and top_k["searched"] >= 2, (which, rule, top_k)  # top-k 6000 searched


LADDER_CHECK = r"""
import json, torch
from hypothesis import HealthCheck, given, settings, strategies as st
from ddt import ddtree_kernels as dk, ddtree_utils as du

failures, searched_rows, shared_slots, examples = [], [0], [0], [0]

@st.composite
def ladders(draw):
    # 3 requests x 2 rows over two tiles: integer ladders at a drawn scale (runs of exact ties at most
    # cuts), a few raised tokens; filters drawn per request, both tie rules; a candidate cap of 4 and a
    # floor of 0.5 push most rows into the radix search, and 1-2 search slots make rows take turns.
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    scale = draw(st.sampled_from([0.25, 0.5, 1.0, 3.0]))
    x = (torch.randn(6, 4500, generator=gen) * draw(st.sampled_from([1.0, 3.0]))).round() * scale
    x.scatter_add_(1, torch.randint(0, 4500, (6, 4), generator=gen), torch.full((6, 4), 4.0))
    top_k = draw(st.lists(st.sampled_from([1, 2, 7, 300, 4400, 1 << 30]), min_size=3, max_size=3))
    top_p = draw(st.lists(st.sampled_from([0.2, 0.5, 0.9, 0.99, 1.0]), min_size=3, max_size=3))
    min_p = draw(st.lists(st.sampled_from([0.0, 1e-3, 0.05, 0.4]), min_size=3, max_size=3))
    on = draw(st.sampled_from([(1, 1, 1), (0, 1, 0), (1, 0, 0), (0, 0, 1), (1, 1, 0), (0, 1, 1)]))
    params = [torch.tensor(v, dtype=t) if use else None
              for v, t, use in zip((top_k, top_p, min_p), (torch.int32, torch.float32, torch.float32), on)]
    renorm = bool(on[0] and on[1] and draw(st.booleans()))
    return x, params, renorm, draw(st.booleans()), draw(st.sampled_from([1, 2]))

@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(ladders())
def check(case):
    x, params, renorm, keep_ties, slots = case
    temps = torch.tensor([1.0, 0.7, 1.3])
    rows = [None if v is None else v.repeat_interleave(2) for v in params]
    want = du.sampling_target_probs(x, temps.repeat_interleave(2), *rows, top_p_after_top_k=renorm,
                                    keep_ties=keep_ties)
    cut = dk.filter_rows(x, temps, *params, 2, top_p_after_top_k=renorm, keep_ties=keep_ties,
                         candidate_cap=4, candidate_floor=0.5, search_slots=slots)
    z = x / temps.repeat_interleave(2).unsqueeze(1)
    key = du._float_key(z)
    index = torch.arange(x.shape[1]).unsqueeze(0)
    kept = (key > cut["cut_key"].unsqueeze(1)) | (
        (key == cut["cut_key"].unsqueeze(1)) & (index <= cut["cut_idx"].unsqueeze(1)))
    probs = torch.where(kept, torch.exp(z - cut["row_max"].unsqueeze(1)) / cut["kept_mass"].unsqueeze(1), 0.0)
    searched = int(cut["searched"].sum())
    examples[0] += 1
    searched_rows[0] += searched
    shared_slots[0] += int(searched > slots)
    if not (torch.equal(kept, want > 0) and torch.allclose(probs, want, rtol=1e-5, atol=1e-7)):
        wrong = (kept != (want > 0)).any(dim=1).nonzero().flatten().tolist()
        failures.append({"on": [v is not None for v in params], "renorm": renorm, "keep_ties": keep_ties,
                         "slots": slots, "rows": wrong})

check()
print("LADDER-CHECK " + json.dumps({"failures": failures, "searched_rows": searched_rows[0],
                                    "shared_slots": shared_slots[0], "examples": examples[0]}))
"""


def test_radix_search_work_list_on_tie_ladders(kernel_package: Path, sglang_cpu_path: str) -> None:  # noqa: F811
    """Hypothesis ladders (integer logits at drawn scales: runs of ties at the cut; drawn filters, both tie
    rules, top-p after top-k) in Triton's interpreter: the radix search over the work list of open rows,
    with fewer search slots than open rows, keeps exactly sampling_target_probs' tokens."""
    got = run_script(LADDER_CHECK, "LADDER-CHECK", kernel_package, sglang_cpu_path, interpret=True,
                     timeout=1500)  # fmt: skip
    assert got["examples"] >= 10 and not got["failures"], got
    assert got["searched_rows"] >= 3 * got["examples"], got  # the search, not the candidates, decided
    assert got["shared_slots"] >= 3, got  # open rows took turns in one slot's programs


FLOOR_CHECK = r"""
import json, torch
from ddt import ddtree_kernels as dk, ddtree_utils as du

# Per row: 30 tied tokens at +10, 500 at +4 (within 6 nats: a fixed floor of 2**-14 would list 530 and
# overflow a cap of 64), the bulk of 4000 near 0. The per-row band (the bins around the cut whose count
# fits the cap) lists only the 30 and they decide top-p 0.5 (a cut inside their run of ties).
gen = torch.Generator().manual_seed(5)
x = torch.randn(4, 4500, generator=gen).clamp(-1.5, 1.5)
order = torch.randperm(4500, generator=gen)
x[:, order[:30]] = 10.0
x[:, order[30:530]] = 4.0
temps, top_p = torch.ones(2), torch.full((2,), 0.5)
result = {}
for keep_ties in (True, False):
    want = du.sampling_target_probs(x, torch.ones(4), None, top_p.repeat_interleave(2), None,
                                    keep_ties=keep_ties)
    cut = dk.filter_rows(x, temps, None, top_p, None, 2, keep_ties=keep_ties, candidate_cap=64)
    key = du._float_key(x)
    index = torch.arange(4500).unsqueeze(0)
    kept = (key > cut["cut_key"].unsqueeze(1)) | (
        (key == cut["cut_key"].unsqueeze(1)) & (index <= cut["cut_idx"].unsqueeze(1)))
    searched = int(cut["searched"].sum())
    result[str(keep_ties)] = {"same_kept": torch.equal(kept, want > 0), "searched": searched,
                              "kept": (want > 0).sum(dim=1).tolist()}
print("FLOOR-CHECK " + json.dumps(result))
"""


def test_candidate_floor_fits_the_cap_where_a_fixed_floor_overflows(
    kernel_package: Path,
    sglang_cpu_path: str,  # noqa: F811
) -> None:
    """The per-row band (first-pass counts per 1/8-nat bin) lists the 30 top tokens, not the 530 within 9.7
    nats, so the candidates decide a top-p cut inside a run of ties without the radix search, keeping
    sampling_target_probs' tokens under both tie rules."""
    got = run_script(FLOOR_CHECK, "FLOOR-CHECK", kernel_package, sglang_cpu_path, interpret=True, timeout=600)
    assert got["True"]["kept"] == [30] * 4 and got["False"]["kept"] == [16] * 4, got
    assert all(case["same_kept"] and case["searched"] == 0 for case in got.values()), got


BAND_CHECK = r"""
import json, torch
from ddt import ddtree_kernels as dk, ddtree_utils as du

# A language model's shape (the core bench's verify logits): a N(0, 2) bulk and one raised token per 312
# raised by up to 12. Where the raised ones hold less than top-p of the mass the cut lies hundreds to
# thousands of tokens deep in the bulk, deeper than the cap: the band of bins around it (not a prefix from
# the top) decides it. The bench's vocabulary of 20000 with a cap of 1024, scaled by 1/4 (the same
# proportions of bulk, raised tokens, cut depths and cap; two tiles, 4096 + 904): the cut kernel's
# interpreted cost grows with the cap (70 s a call at 1024).
gen = torch.Generator().manual_seed(3)
n, vocab, cap = 2, 5000, 256
x = 2 * torch.randn(4 * n, vocab, generator=gen)
x.scatter_add_(1, torch.randint(0, vocab, (4 * n, 16), generator=gen),
          12 * torch.rand(4 * n, 16, generator=gen))
temps = torch.tensor([1.0, 1.0, 0.8, 1.2])
settings = {
    "top_p": (None, torch.tensor([0.95, 0.99, 0.9, 0.95]), None, False),
    "top_k+top_p+min_p": (torch.tensor([750, 1250, 1 << 30, 625]), torch.tensor([0.95, 0.99, 0.9, 0.97]),
                          torch.tensor([1e-4, 0.0, 1e-5, 0.0]), False),
    "top_k": (torch.tensor([750, 1250, 1, 625]), None, None, False),
}
result = {}
for name, (top_k, top_p, min_p, renorm) in settings.items():
    for keep_ties in (True, False):
        rows = [None if v is None else v.repeat_interleave(n) for v in (top_k, top_p, min_p)]
        want = du.sampling_target_probs(x, temps.repeat_interleave(n), *rows, top_p_after_top_k=renorm,
                                        keep_ties=keep_ties)
        cut = dk.filter_rows(x, temps, top_k, top_p, min_p, n, top_p_after_top_k=renorm,
                             keep_ties=keep_ties, candidate_cap=cap)
        z = x / temps.repeat_interleave(n).unsqueeze(1)
        key = du._float_key(z)
        index = torch.arange(vocab).unsqueeze(0)
        kept = (key > cut["cut_key"].unsqueeze(1)) | (
            (key == cut["cut_key"].unsqueeze(1)) & (index <= cut["cut_idx"].unsqueeze(1)))
        probs = torch.where(kept, torch.exp(z - cut["row_max"].unsqueeze(1))
                            / cut["kept_mass"].unsqueeze(1), 0.0)
        sizes = (want > 0).sum(dim=1)
        result[name + ("" if keep_ties else ":positional")] = {
            "same_kept": torch.equal(kept, want > 0),
            "probs_close": bool(torch.allclose(probs, want, rtol=1e-5, atol=1e-7)),
            "searched": int(cut["searched"].sum()),
            "rows": 4 * n,
            "deep_decided": int(((sizes > cap) & (cut["searched"] == 0)).sum()),
        }
print("BAND-CHECK " + json.dumps(result))
"""


def test_band_decides_cuts_deep_in_the_bulk(kernel_package: Path, sglang_cpu_path: str) -> None:  # noqa: F811
    """The core bench's logit shape (a N(0, 2) bulk, one raised token per 312), top-p 0.9-0.99, top-k in
    the hundreds to thousands, min-p: cuts deeper than the cap (256 of 5000 tokens, the bench's 1024 of
    20000 scaled by 1/4, so no prefix from the top could list them) are decided by the band of bins around
    the cut, with no radix search, keeping sampling_target_probs' tokens and probabilities under both tie
    rules."""
    got = run_script(BAND_CHECK, "BAND-CHECK", kernel_package, sglang_cpu_path, interpret=True, timeout=900)
    assert len(got) == 6, sorted(got)
    for case, result in got.items():
        assert result["same_kept"] and result["probs_close"], (case, result)
        assert result["searched"] <= result["rows"] // 8, (case, result)
        assert result["deep_decided"] >= 3, (case, result)


# Plain temperature sampled first (SGLANG_DDTREE_SAMPLE_FIRST; auto: up to 48 rows): 1. with explicit
# Exp(1) noise the kernels equal the race in torch (argmax z - log E per row) then greedy verification on
# those draws, over three tiles, padding nodes, tied logits and bs > 1; 2. the Philox noise is keyed by the
# coins (same coins, same output); 3. one small tree with tied logits over 1500 requests: the (last row,
# bonus) counts against the exact outcome probabilities, beside the torch coin walk on the same requests;
# 4. the switch's values and the path a default call takes by its rows.
SAMPLE_FIRST_CHECK = r"""
import json, torch
from ddt import ddtree_kernels as dk, ddtree_utils as du
gen = torch.Generator().manual_seed(7)
result = {}

def tree_case(bs, budget, topk, depth, vocab, tied=False):
    lp = (3 * torch.randn(bs, depth, vocab, generator=gen)).log_softmax(-1)
    tree = du.build_ddtree(lp, budget, topk)
    size = budget + 1
    logits = torch.randn(bs * size, vocab, generator=gen) * 2
    if tied:
        logits = (logits * 2).round() / 2
    rows_depth = torch.cat([tree.depth.new_zeros(bs, 1), tree.depth], dim=1)
    likely = lp.argmax(-1).gather(1, rows_depth.clamp(max=depth - 1))
    logits.view(bs, size, vocab).scatter_add_(2, likely.unsqueeze(2), torch.full((bs, size, 1), 6.0))
    temps = torch.rand(bs, generator=gen) + 0.3
    return tree, logits, temps

def run(tree, logits, temps, depth, coins, final, **kw):
    valid = tree.valid if tree.has_padding else None
    return dk.verify_sampling(tree.tokens, tree.parents, logits, temps, None, None, None, coins, final,
                              tree.mask, tree.path, tree.verify_depth, valid, **kw)

# 1. Exactness given explicit noise: the race in torch, then greedy verification on the draws.
def exact_case(bs, budget, topk, depth, vocab, draws, tied=False):
    tree, logits, temps = tree_case(bs, budget, topk, depth, vocab, tied)
    size = budget + 1
    same, accepted = 0, 0
    for _ in range(draws):
        noise = -torch.rand(bs * size, vocab, generator=gen).log()
        z = logits.float() / temps.repeat_interleave(size).unsqueeze(1)
        draws_ = (z - noise.log()).argmax(dim=1).view(bs, size)
        want = tree.verify_greedy(draws_)
        coins, final = torch.rand(bs, depth, generator=gen), torch.rand(bs, generator=gen)
        got = run(tree, logits, temps, depth, coins, final, sample_first=True, noise=noise)
        same += all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))
        accepted += int(want[0].sum())
    return {"same": same, "draws": draws, "accepted": accepted,
            "padded": bool(tree.has_padding)}

result["exact_bs3"] = exact_case(3, 8, 4, 7, 300, 3)
result["exact_tiles"] = exact_case(2, 8, 4, 7, 9000, 2)
result["exact_padding"] = exact_case(2, 16, 4, 2, 3, 3)
result["exact_ties"] = exact_case(3, 8, 4, 7, 300, 3, tied=True)

# 2. Determinism: the coins seed the Philox noise.
tree, logits, temps = tree_case(16, 8, 4, 3, 40)
coins, final = torch.rand(16, 3, generator=gen), torch.rand(16, generator=gen)
a = run(tree, logits, temps, 3, coins, final, sample_first=True)
b = run(tree, logits, temps, 3, coins, final, sample_first=True)
other = torch.rand(16, 3, generator=gen), torch.rand(16, generator=gen)
c = run(tree, logits, temps, 3, *other, sample_first=True)
result["determinism"] = {"same": all(torch.equal(x, y) for x, y in zip(a, b)),
                         "bonus_differs": int((a[2] != c[2]).sum())}

# 3. Distribution: one small tree with ties repeated over many requests, sampled first (Philox) and by the
# coin walk, against the exact probabilities of each (accepted row, bonus) outcome.
def outcome_probs(tree, probs, size, vocab):
    # P(last row r, bonus v) = prod of p over r's path * p_r(v) for v no valid child of r holds.
    tokens, parents = tree.tokens[0], tree.parents[0]
    valid = tree.valid[0]
    reach = torch.zeros(size, dtype=torch.float64)
    reach[0] = 1.0
    out = torch.zeros(size, vocab, dtype=torch.float64)
    for r in range(size):
        kids = [i for i in range(size - 1) if int(parents[i]) == r - 1 and bool(valid[i])]
        held = set()
        for i in kids:
            t = int(tokens[i])
            if t not in held:
                reach[i + 1] = reach[r] * probs[r, t]
                held.add(t)
        for v in range(vocab):
            if v not in held:
                out[r, v] = reach[r] * probs[r, v]
    return out

# The coin walk (torch) over 1500 requests; the race in the interpreter over the first 300 of them: each
# request is 7 interpreted programs, and 1500 took about 500 s of this script's 780 (the race's exactness
# given the noise is checked above; here its Philox noise, at less statistical power than 1500 gave).
bs, budget, topk, depth, vocab = 1500, 6, 3, 3, 5
raced = 300
lp = torch.tensor([[1.0, 0.5, 0.5, -1.0, -2.0], [0.2, 1.0, 0.2, -0.5, -3.0], [0.0, 0.3, 1.2, 0.3, -1.0]])
lp = lp.log_softmax(-1).unsqueeze(0)
one = du.build_ddtree(lp, budget, topk)
size = budget + 1
base = torch.tensor([[2.0, 2.0, 1.0, 0.0, -1.0]]) + torch.arange(size).unsqueeze(1).float().remainder(3) * \
    torch.tensor([[0.0, 0.5, 1.0, 0.5, 0.0]])
base = (base * 2).round() / 2  # ties
temp = 0.9
probs = (base / temp).double().softmax(-1)
exact = outcome_probs(one, probs, size, vocab)
fields = {f: getattr(one, f) for f in one.__dataclass_fields__}
batched = lambda v: isinstance(v, torch.Tensor) and v.shape[0] == 1
tree = du.DDTree(**{f: v.expand(bs, *v.shape[1:]).contiguous() if batched(v) else v
                    for f, v in fields.items()})
logits = base.repeat(bs, 1)
temps = torch.full((bs,), temp)
counts = {}
coins, final = torch.rand(bs, depth, generator=gen), torch.rand(bs, generator=gen)
first = du.DDTree(**{f: v.expand(raced, *v.shape[1:]).contiguous() if batched(v) else v
                     for f, v in fields.items()})
outputs = {"sample_first": run(first, logits[:raced * size], temps[:raced], depth, coins[:raced],
                               final[:raced], sample_first=True),
           "coin_walk_reference": du.verify_sampling_from_logits(
               tree.tokens, tree.parents, logits, temps, coins=coins, final_coins=final, mask=tree.mask,
               valid=tree.valid, max_depth=depth, path=tree.path, verify_depth=tree.verify_depth)}
for name, (acc_len, acc_idx, bonus) in outputs.items():
    deepest = acc_idx.gather(1, (acc_len - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    last = torch.where(acc_len > 0, deepest + 1, 0)
    hist = torch.zeros(size, vocab, dtype=torch.float64)
    hist.index_put_((last, bonus), torch.ones(len(bonus), dtype=torch.float64), accumulate=True)
    expected = exact * len(bonus)
    keep = expected > 0
    chi2 = float((((hist - expected) ** 2)[keep] / expected[keep]).sum())
    counts[name] = {"chi2": chi2, "dof": int(keep.sum()) - 1, "impossible": float(hist[~keep].sum()),
                    "accepted": int(acc_len.sum()), "requests": len(bonus),
                    "least_expected": float(expected[keep].min())}
result["distribution"] = counts

# 4. The path plain temperature takes by default: SGLANG_DDTREE_SAMPLE_FIRST auto (unset: the same) samples
# first up to 48 verify rows, 1 always, 0 never; anything else is refused by name.
import os
switches = {}
for switch in (None, "auto", "1", "0", " Auto ", "yes"):
    os.environ.pop("SGLANG_DDTREE_SAMPLE_FIRST", None)
    if switch is not None:
        os.environ["SGLANG_DDTREE_SAMPLE_FIRST"] = switch
    try:
        switches[repr(switch)] = [dk.sample_first_for(rows) for rows in (1, 17, 48, 49, 1088)]
    except ValueError as exc:
        switches[repr(switch)] = str(exc)
os.environ.pop("SGLANG_DDTREE_SAMPLE_FIRST", None)
# sample_first None follows the rows, checked against a lowered bound (16 rows: the interpreter's cost
# grows with the rows, and the bound's own value is checked above): bs 1 at budget 8 (9 rows) is the race,
# budget 16 (17 rows) the coin walk; the other path's output differs for some of the same coins, so a wrong
# choice shows.
dk._SAMPLE_FIRST_ROWS = 16
def default_path(budget, trials=3):
    bs = 1
    follows, differs = 0, 0
    for _ in range(trials):
        tree, logits, temps = tree_case(bs, budget, 4, 3, 300)
        coins, final = torch.rand(bs, 3, generator=gen), torch.rand(bs, generator=gen)
        got = run(tree, logits, temps, 3, coins, final)
        race = run(tree, logits, temps, 3, coins, final, sample_first=True)
        walk = run(tree, logits, temps, 3, coins, final, sample_first=False)
        chosen, other = (race, walk) if budget + 1 <= 16 else (walk, race)
        follows += all(torch.equal(x, y) for x, y in zip(got, chosen))
        differs += not all(torch.equal(x, y) for x, y in zip(got, other))
    return {"follows": follows, "differs": differs, "trials": trials}
result["dispatch"] = {"switches": switches, "rows9": default_path(8), "rows17": default_path(16)}
print("SAMPLE-FIRST " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def sample_first_results(kernel_package: Path, sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_script(SAMPLE_FIRST_CHECK, "SAMPLE-FIRST", kernel_package, sglang_cpu_path, interpret=True,
                      timeout=1800)  # fmt: skip


@pytest.mark.parametrize("case", ["exact_bs3", "exact_tiles", "exact_padding", "exact_ties"])
def test_sample_first_equals_the_race_on_given_noise(sample_first_results: dict, case: str) -> None:
    result = sample_first_results[case]
    assert result["same"] == result["draws"], result
    assert result["accepted"] >= result["draws"], f"the case barely accepts a node: {result}"
    assert result["padded"] == (case == "exact_padding"), "exact_padding must carry padding nodes (HAS_VALID)"


def test_sample_first_is_keyed_by_the_coins(sample_first_results: dict) -> None:
    result = sample_first_results["determinism"]
    assert result["same"] and result["bonus_differs"] >= 8, result


@pytest.mark.parametrize("path", ["sample_first", "coin_walk_reference"])
def test_sample_first_outcomes_follow_the_exact_distribution(sample_first_results: dict, path: str) -> None:
    """chi-square of the (last accepted row, bonus) counts against the exact probabilities (dof + 5 sigma);
    the coin walk passing the same test checks the exact table itself."""
    result = sample_first_results["distribution"][path]
    assert result["impossible"] == 0, result
    assert result["chi2"] < result["dof"] + 5 * (2 * result["dof"]) ** 0.5, result
    assert result["accepted"] > result["requests"] / 5, result  # 300 of 1500 before the race drew 300


def test_sample_first_switch_reads_auto_one_or_zero(sample_first_results: dict) -> None:
    """auto (also unset, any case and spacing): the race up to 48 verify rows (below the H200 crossover), the
    coin walk beyond; 1 and 0 force one path; any other value is a clear error that names the variable."""
    switches = sample_first_results["dispatch"]["switches"]
    auto = [True, True, True, False, False]
    assert switches["None"] == switches["'auto'"] == switches["' Auto '"] == auto, switches
    assert switches["'1'"] == [True] * 5 and switches["'0'"] == [False] * 5, switches
    assert "SGLANG_DDTREE_SAMPLE_FIRST='yes'" in switches["'yes'"] and "auto" in switches["'yes'"], switches


@pytest.mark.parametrize("rows", ["rows9", "rows17"])
def test_plain_temperature_takes_the_path_its_rows_choose(sample_first_results: dict, rows: str) -> None:
    result = sample_first_results["dispatch"][rows]
    assert result["follows"] == result["trials"], result
    assert result["differs"] >= 1, f"the two paths agreed on every trial, so the choice is not seen: {result}"


COMPILE = r"""
import json, os, sys, time
import torch
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from ddt import ddtree_kernels as dk, ddtree_utils as du

class RecordingDriver:
    # Stands in for the CUDA driver (there is no GPU here): the launchers run as on the device, Triton's own
    # JIT binder specialises every launch (argument dtypes, divisibility by 16 of pointers and integers,
    # constexprs, num_warps) and the cache hook below records that instead of compiling and launching.
    def __init__(self):
        self.target = GPUTarget("cuda", 90, 32)
    def is_active(self):
        return True
    def get_current_target(self):
        return self.target
    def get_current_device(self):
        return 0
    def get_current_stream(self, device=None):
        return 0

recorded = {}

def record(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
    spec = (fn.name, str(compile["signature"]), str(compile["constants"]), str(compile["configs"][0]),
            compile["num_warps"], compile["num_stages"])
    recorded.setdefault(spec, (fn.jit_function, compile))
    return True  # skip the compile and the launch

triton.runtime.driver.set_active(RecordingDriver())
knobs.runtime.jit_cache_hook = record

# The shapes of the target profiles (Kimi's vocabulary, budget 8, top-k 4, depth 7), inputs as the worker
# passes them: float32 scores and logits, SGLang's sampling dtypes (du.sampling_variants).
bs, budget, topk, depth, vocab = 2, 8, 4, 7, 163840
gen = torch.Generator().manual_seed(0)
size = budget + 1
for switch in ("0", "1"):  # the plain tile kernel, and the default prefilter (tiles of 4096 and 8192)
    os.environ["SGLANG_DDTREE_TOPK_PREFILTER"] = switch
    dk.topk_logsumexp(torch.randn(bs, vocab, generator=gen), du._effective_k(topk, vocab, budget))
lp = torch.randn(bs, depth, vocab, generator=gen).log_softmax(-1)
values, ids = du.draft_topk(lp, topk, budget)
tree = du.build_ddtree_from_topk(values, ids, budget)
dk.build_tree(values, ids, du._plan(budget, values.shape[-1], depth, values.device))
logits = torch.randn(bs * size, vocab, generator=gen)
temperatures = torch.ones(bs, dtype=torch.float32)
coins, final = torch.rand(bs, depth, generator=gen), torch.rand(bs, generator=gen)
for valid in (None, torch.ones(bs, budget, dtype=torch.bool)):  # a padded tree carries `valid`
    dk.verify_greedy(tree.tokens, tree.parents, torch.randint(0, vocab, (bs, size), generator=gen), tree.mask,
                     tree.path, tree.verify_depth, valid)
    for first in ("0", "1"):  # plain temperature: the coin walk, then sampled first (the default)
        os.environ["SGLANG_DDTREE_SAMPLE_FIRST"] = first
        for name, filters in du.sampling_variants(bs, "cpu").items():
            renorm = filters.pop("top_p_after_top_k")
            dk.verify_sampling(tree.tokens, tree.parents, logits, temperatures, filters["top_ks"],
                               filters["top_ps"], filters["min_ps"], coins, final, tree.mask, tree.path,
                               tree.verify_depth, valid, top_p_after_top_k=renorm)
    dk.verify_sampling(tree.tokens, tree.parents, logits, temperatures, None, None, None, coins, final,
                       tree.mask, tree.path, tree.verify_depth, valid, sample_first=True,
                       noise=torch.ones_like(logits))  # the tests' explicit noise
dk.filter_rows(logits, temperatures, None, None, None, size)  # its own plain cut (the walk does verify's)
knobs.runtime.jit_cache_hook = None  # from here on: compile for each arch given

result = {"variants": {}, "failed": {}}
for arch in sys.argv[1:]:
    for (name, *_), (fn, spec) in recorded.items():
        constants = ",".join(f"{fn.arg_names[path[0]]}={value}" for path, value in spec["constants"].items())
        label = f"{name}[{constants}, num_warps={spec['num_warps']}]"
        result.setdefault("divisibility", {})[name] = sum(
            ["tt.divisibility", 16] in attr for attr in spec["configs"][0].values())
        result["variants"].setdefault(name, [])
        if label not in result["variants"][name]:
            result["variants"][name].append(label)
        source = ASTSource(fn=fn, signature=spec["signature"], constexprs=spec["constants"],
                           attrs=spec["configs"][0])
        try:
            options = {"num_warps": spec["num_warps"], "num_stages": spec["num_stages"]}
            compiled = triton.compile(source, target=GPUTarget("cuda", int(arch), 32), options=options)
            cubin = len(compiled.asm["cubin"])
            result.setdefault("cubins", {}).setdefault(f"{arch}:{name}", []).append(cubin)
            if cubin <= 1000:
                result["failed"][f"sm_{arch} {label}"] = "cubin of under 1000 bytes"
        except Exception as exc:  # the next variant still compiles: one report names every failure
            result["failed"][f"sm_{arch} {label}"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
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
    "_sample_band_kernel",
    "_sample_mass_kernel",
    "_sample_cut_kernel",
    "_radix_round_kernel",
    "_radix_final_kernel",
    "_sample_walk_kernel",
    "_residual_mass_kernel",
    "_residual_draw_kernel",
    "_sample_race_kernel",
    "_sample_race_walk_kernel",
]


def target_archs() -> list[str]:
    """sm_XY of every target profile (env/targets/*.yaml compute_capability), the H200 device's 90 and
    B200's 100."""
    archs = {"90", "100"}
    for profile in sorted((REPO_ROOT / "env" / "targets").glob("*.yaml")):
        capability = str(yaml.safe_load(profile.read_text(encoding="utf-8"))["gpu"]["compute_capability"])
        archs.add(capability.replace(".", ""))
    return sorted(archs)


@pytest.fixture(scope="module")
def compiled(kernel_package: Path, sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_script(COMPILE, "KERNEL-COMPILE", kernel_package, sglang_cpu_path, interpret=False,
                      timeout=1800, args=target_archs())  # fmt: skip


def test_target_archs_come_from_the_profiles() -> None:
    assert {"90", "100", "103", "120"} <= set(target_archs())


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_kernels_compile_to_cubin_for_every_target_arch(compiled: dict, name: str) -> None:
    """Triton's own compiler (LLVM + its bundled ptxas) builds sm_90/100/103/120 code here, without a GPU,
    for every variant of the kernel that the launchers specialise (see COMPILE)."""
    failed = {variant: why for variant, why in compiled["failed"].items() if f" {name}[" in variant}
    assert not failed, failed
    variants = len(compiled["variants"].get(name, []))
    assert variants >= 1, f"the launchers never launched {name}"
    for arch in target_archs():
        assert len(compiled["cubins"].get(f"{arch}:{name}", [])) == variants, f"sm_{arch} {name}"


def test_compile_covers_every_sampling_variant(compiled: dict) -> None:
    """The runtime's specialisation, not a hand-written one: each filter combination of the warm-up
    (du.sampling_variants: 8 on/off combinations + top-p after top-k) is its own _sample_cut_kernel, the
    plain-temperature one included (the variant that crashed TritonGPUCoalesce on the H200; verify_sampling
    now does that cut in its walk kernel, filter_rows still launches it), with divisibility attributes and
    the launch's num_warps."""
    cut = compiled["variants"]["_sample_cut_kernel"]
    assert len(cut) == 9, cut
    plain = [v for v in cut if "HAS_TOP_K=False,HAS_TOP_P=False,HAS_MIN_P=False,RENORM=False" in v]
    assert len(plain) == 1 and "num_warps=8" in plain[0], cut
    assert compiled["divisibility"]["_sample_cut_kernel"] >= 16, compiled["divisibility"]
    assert len(compiled["variants"]["_sample_mass_kernel"]) == 1  # launched only with a filter on
    assert len(compiled["variants"]["_sample_max_kernel"]) == 2  # bin counts (filters on) or not
    assert len(compiled["variants"]["_sample_band_kernel"]) == 8  # each variant with a filter on
    assert len(compiled["variants"]["_residual_mass_kernel"]) == 1  # launched only with a filter on
    assert len(compiled["variants"]["_residual_draw_kernel"]) == 1  # the same
    assert len(compiled["variants"]["_sample_walk_kernel"]) == 4  # `valid` x DRAW (plain temperature: cut
    # and bonus draw in the walk, two launches in all; SGLANG_DDTREE_SAMPLE_FIRST=0)
    race = compiled["variants"]["_sample_race_kernel"]  # plain temperature sampled first: Philox or the
    assert len(race) == 2 and any("NOISE=False" in v and "num_warps=8" in v for v in race), (
        race
    )  # tests' noise
    assert len(compiled["variants"]["_sample_race_walk_kernel"]) == 2  # `valid` or not
