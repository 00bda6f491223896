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
import json, sys, torch
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
for name, (x, k) in cases.items():
    values, index, lse = dk.topk_logsumexp(x, k)
    ref_values, ref_index, ref_lse = reference(x, k)
    result[name] = {
        "values": torch.equal(values, ref_values),
        "index": torch.equal(index, ref_index),
        "index_dtype": str(index.dtype),
        "lse": bool(torch.allclose(lse, ref_lse, rtol=1e-5, atol=1e-4)),
    }
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


@pytest.fixture(scope="module")
def kernel_results(kernel_package: Path, sglang_cpu_path: str) -> dict:  # noqa: F811
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(kernel_package.parent), sglang_cpu_path]),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=kernel_package.parent,
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("KERNEL-CHECK ")]
    assert lines, f"kernel check printed nothing (rc {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix("KERNEL-CHECK "))


CASES = ["kimi_vocab_k4", "short_last_tile", "one_tile", "k16_tp8_shard", "k_equals_vocab", "heavy_ties",
         "bf16", "strided_rows", "minus_inf"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_topk_and_logsumexp_equal_the_sort_reference(kernel_results: dict, case: str) -> None:
    got = kernel_results[case]
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
    "_merge_topk_kernel",
    "_score_kernel",
    "_rank_kernel",
    "_tree_rows_kernel",
    "_verify_greedy_kernel",
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
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(kernel_package.parent), sglang_cpu_path])}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run(
        [sys.executable, "-c", COMPILE, *target_archs()],
        capture_output=True, text=True, env=env, timeout=900, cwd=kernel_package.parent,
    )  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("KERNEL-COMPILE ")]
    assert lines, f"kernel compile printed nothing (rc {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix("KERNEL-COMPILE "))


def test_target_archs_come_from_the_profiles() -> None:
    assert {"90", "103", "120"} <= set(target_archs())


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_kernels_compile_to_cubin_for_every_target_arch(compiled: dict, name: str) -> None:
    """Triton's own compiler (LLVM + its bundled ptxas) builds sm_90/103/120 code here, without a GPU."""
    for arch in target_archs():
        assert compiled.get(f"{arch}:{name}", 0) > 1000, f"no sm_{arch} cubin for {name}"
