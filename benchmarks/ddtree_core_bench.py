"""Latency of one DDTree step (tree build + mask + verify) on a GPU, eager and in a CUDA graph.

    python benchmarks/ddtree_core_bench.py [--bs 1 8 32 64] [--budget 8 16 32] [--bandwidth-gbs 4800]
                                           [--memory-bs 48] [--memory-budget 32] [--json FILE]

Columns (microseconds per step, CUDA events; eager includes the host's launch time):
  eager    build_ddtree + verify_greedy, launched op by op
  graph    the same, replayed from a CUDA graph
  g_topk   graph: per-depth top-k over the vocabulary alone (draft_topk: Triton kernels on CUDA)
  topk%bw  its roofline: bs * depth * vocab * 4 bytes read once / g_topk, as % of --bandwidth-gbs
  g_tree   graph: build_ddtree_from_topk + verify_greedy (the tree part alone)
  s_temp   graph: build_ddtree + verify_sampling_from_logits on [bs * N, vocab] float32 verify logits,
           temperature 1 only, sampled first (SGLANG_DDTREE_SAMPLE_FIRST=1: an exponential race per row,
           greedy walk)
  s_coin   the same on the coin walk (SGLANG_DDTREE_SAMPLE_FIRST=0: walk with coins, residual bonus draw);
           the served default (auto) takes s_temp's path up to 48 verify rows (bs * (budget + 1)), s_coin's
           beyond: the crossover of the two columns on the H200 (sitting 2026-12-02g)
  s_topp   the same with top-p 0.95 (Kimi K2.6's usual setting)
  s_kpm    the same with top-k 40, top-p 0.9, min-p 0.05, top-p after top-k (flashinfer's min-p order)
  s%bw     s_topp's roofline: the verify logits read once / s_topp, as % of --bandwidth-gbs
  search%  rows of s_topp whose cut needed the radix search (the slow path) instead of the candidate sort
  s_torch  s_topp on the torch path (SGLANG_DDTREE_TRITON_SAMPLING=0: sampling_cut in chunks of rows, then
           only the nodes' and the last rows' probabilities)
  s_ref    the torch reference of s_topp (sampling_target_probs' sort + verify_sampling), '-' when its
           temporaries would not fit comfortably
Then the peak extra GPU memory of one sampled verify (top-p 0.95, flashinfer's tie rule) at --memory-bs and
--memory-budget, on both paths (torch.cuda.max_memory_allocated over what was allocated before the call).
Last, per kernel (torch's profiler, eager, --profile-bs at --profile-budget): where each s_* step's GPU
time goes, the kernels sorted by time with their launches per step.
g_topk times the served default (the group prefilter; SGLANG_DDTREE_TOPK_PREFILTER=0: the plain tile kernel).
The top-k lines after the table time both at bs 1 and the largest bs, and topk_logsumexp per tile size.
The s_* columns time the Triton sampling kernels: the bench sets SGLANG_DDTREE_TRITON_SAMPLING=1 (the served
default) unless the environment already sets it (=0: the s_* columns time the torch reference).
The verify logits imitate a language model's: a N(0, 2) bulk and 64 tokens per row raised by up to 12, plus
the drafted tokens raised so that the walk accepts. The module is read from the patch series (patches/),
i.e. exactly what the image gets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.gpu_timing import time_eager, time_graph
from tests.sglang_sources import import_new_module


def verify_logits(du, lp: torch.Tensor, budget: int, topk: int, gen: torch.Generator) -> torch.Tensor:
    """float32 [bs * N, vocab]: a language model's shape (a low bulk, a few high tokens) whose favourite after
    each verify row is the drafter's favourite at that depth, so the tree walk accepts."""
    bs, depth, vocab = lp.shape
    size = budget + 1
    logits = 2 * torch.randn(bs * size, vocab, device="cuda", generator=gen)
    high = torch.randint(0, vocab, (bs * size, 64), device="cuda", generator=gen)
    logits.scatter_add_(1, high, 12 * torch.rand(bs * size, 64, device="cuda", generator=gen))
    tree = du.build_ddtree(lp, budget, topk)
    rows_depth = torch.cat([tree.depth.new_zeros(bs, 1), tree.depth], dim=1).clamp(max=depth - 1)
    favourite = lp.argmax(-1).gather(1, rows_depth).reshape(-1, 1)
    logits.scatter_(1, favourite, logits.amax(dim=1, keepdim=True) + 3.0)
    return logits


def sampling_settings(bs: int) -> dict[str, dict]:
    """The s_* columns' request settings: temperature only, top-p 0.95, top-k 40 + top-p 0.9 + min-p 0.05."""
    return {
        "temp": {},
        "temp_coin": {},  # the same request on the coin walk (sample_first_path("0"))
        "topp": {"top_ps": torch.full((bs,), 0.95, device="cuda")},
        "kpm": {
            "top_ks": torch.full((bs,), 40, dtype=torch.int32, device="cuda"),
            "top_ps": torch.full((bs,), 0.9, device="cuda"),
            "min_ps": torch.full((bs,), 0.05, device="cuda"),
            "top_p_after_top_k": True,
        },
    }


def kernel_breakdown(du, bs: int, budget: int, topk: int, depth: int, vocab: int, calls: int = 10) -> dict:
    """{setting: [(kernel, us per step, launches per step)], largest first}: the s_* step's CUDA time per
    kernel from torch's profiler over `calls` eager steps, so a missed goal comes with where the time went."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    gen = torch.Generator(device="cuda").manual_seed(bs * 100 + budget)
    lp = (3 * torch.randn(bs, depth, vocab, device="cuda", generator=gen)).log_softmax(-1)
    logits = verify_logits(du, lp, budget, topk, gen)
    coins = torch.rand(bs, depth, device="cuda", generator=gen)
    final = torch.rand(bs, device="cuda", generator=gen)
    temperatures = torch.ones(bs, device="cuda")
    out = {}
    for name, params in sampling_settings(bs).items():

        def step(params=params):
            tree = du.build_ddtree(lp, budget, topk)
            return tree.verify_sampling_logits(logits, temperatures, **params, coins=coins, final_coins=final)

        with sample_first_path("0" if name.endswith("_coin") else "1"):
            step()  # compiled and cached outside the profile
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(calls):
                    step()
                torch.cuda.synchronize()
        per_kernel: dict[str, list[float]] = {}
        for event in prof.events():
            if event.device_type == DeviceType.CUDA:
                total = per_kernel.setdefault(event.name, [0.0, 0.0])
                total[0] += event.time_range.elapsed_us() / calls
                total[1] += 1 / calls
        out[name] = sorted(((k, us, n) for k, (us, n) in per_kernel.items()), key=lambda item: -item[1])
    return out


def bench_one(
    du, bs: int, budget: int, topk: int, depth: int, vocab: int, iters: int, bandwidth: float
) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(bs * 100 + budget)
    size = budget + 1
    lp = (3 * torch.randn(bs, depth, vocab, device="cuda", generator=gen)).log_softmax(-1)
    target_argmax = torch.randint(0, vocab, (bs, size), device="cuda", generator=gen)
    values, ids = du.draft_topk(lp, topk, budget)

    def greedy_step():
        tree = du.build_ddtree(lp, budget, topk)
        return tree.verify_greedy(target_argmax)

    def topk_only():
        return du.draft_topk(lp, topk, budget)

    def tree_only():
        tree = du.build_ddtree_from_topk(values, ids, budget)
        return tree.verify_greedy(target_argmax)

    row = {"bs": bs, "budget": budget, "topk": topk, "depth": depth, "vocab": vocab}
    row["eager_us"] = time_eager(greedy_step, max(20, iters // 10))
    row["graph_us"] = time_graph(greedy_step, iters)
    row["graph_topk_us"] = time_graph(topk_only, iters)
    row["graph_tree_us"] = time_graph(tree_only, iters)
    logits = verify_logits(du, lp, budget, topk, gen)
    coins = torch.rand(bs, depth, device="cuda", generator=gen)
    final = torch.rand(bs, device="cuda", generator=gen)
    temperatures = torch.ones(bs, device="cuda")
    settings = sampling_settings(bs)
    for name, params in settings.items():

        def sampling_step(params=params):
            tree = du.build_ddtree(lp, budget, topk)
            return tree.verify_sampling_logits(logits, temperatures, **params, coins=coins, final_coins=final)

        with sample_first_path("0" if name.endswith("_coin") else "1"):
            row[f"graph_sampling_{name}_us"] = time_graph(sampling_step, iters)
    with sampling_path("0"):

        def torch_step():
            tree = du.build_ddtree(lp, budget, topk)
            return tree.verify_sampling_logits(logits, temperatures, **settings["topp"], coins=coins,
                                               final_coins=final)  # fmt: skip

        row["graph_sampling_torch_us"] = time_graph(torch_step, max(20, iters // 10))
    kernels = du._kernels()
    row["topp_searched_pct"] = -1.0
    if kernels is not None:
        cut = kernels.filter_rows(logits, temperatures, None, settings["topp"]["top_ps"], None, size)
        row["topp_searched_pct"] = 100.0 * float(cut["searched"].float().mean())
    row["graph_sampling_ref_us"] = None
    if bs * size * vocab <= 2.5e8:  # the sort's float64 cumsum and index temporaries: ~40 bytes an entry

        def reference_step():
            tree = du.build_ddtree(lp, budget, topk)
            rows = torch.repeat_interleave(settings["topp"]["top_ps"], size)
            probs = du.sampling_target_probs(logits, temperatures.repeat_interleave(size), top_ps=rows)
            return tree.verify_sampling(probs.view(bs, size, vocab), coins=coins, final_coins=final)

        row["graph_sampling_ref_us"] = time_graph(reference_step, max(20, iters // 10))
    logit_bytes = bs * size * vocab * 4
    row["topk_bw_pct"] = 100.0 * bs * depth * vocab * 4 / (row["graph_topk_us"] * 1e-6) / (bandwidth * 1e9)
    row["sampling_bw_pct"] = 100.0 * logit_bytes / (row["graph_sampling_topp_us"] * 1e-6) / (bandwidth * 1e9)
    row["kernels_per_greedy_step"] = count_kernels(greedy_step)
    return row


TABLE_KEYS = (
    "eager_us",
    "graph_us",
    "graph_topk_us",
    "topk_bw_pct",
    "graph_tree_us",
    "graph_sampling_temp_us",
    "graph_sampling_temp_coin_us",
    "graph_sampling_topp_us",
    "graph_sampling_kpm_us",
    "sampling_bw_pct",
    "topp_searched_pct",
    "graph_sampling_torch_us",
    "graph_sampling_ref_us",
    "kernels_per_greedy_step",
)


@contextlib.contextmanager
def sampling_path(switch: str):
    """SGLANG_DDTREE_TRITON_SAMPLING=switch inside the block ("1": Triton, "0": torch), as it was after."""
    saved = os.environ.get("SGLANG_DDTREE_TRITON_SAMPLING")
    os.environ["SGLANG_DDTREE_TRITON_SAMPLING"] = switch
    try:
        yield
    finally:
        os.environ["SGLANG_DDTREE_TRITON_SAMPLING"] = saved if saved is not None else "1"


def sample_first_path(switch: str):
    """SGLANG_DDTREE_SAMPLE_FIRST=switch inside the block ("1": plain temperature sampled first, "0": the coin
    walk), as it was after."""
    return mock.patch.dict(os.environ, {"SGLANG_DDTREE_SAMPLE_FIRST": switch})


def topk_prefilter(switch: str):
    """SGLANG_DDTREE_TOPK_PREFILTER=switch inside the block ("1": the group prefilter), as it was after."""
    return mock.patch.dict(os.environ, {"SGLANG_DDTREE_TOPK_PREFILTER": switch})


def sampled_verify_memory(du, bs: int, budget: int, topk: int, depth: int, vocab: int) -> dict:
    """MiB of GPU memory one sampled verify (top-p 0.95) allocates beyond its inputs, per path."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    lp = (3 * torch.randn(bs, depth, vocab, device="cuda", generator=gen)).log_softmax(-1)
    tree = du.build_ddtree(lp, budget, topk)
    logits = verify_logits(du, lp, budget, topk, gen)
    del lp
    params = {"temperatures": torch.ones(bs, device="cuda"), "top_ps": torch.full((bs,), 0.95, device="cuda")}
    coins = torch.rand(bs, depth, device="cuda", generator=gen)
    final = torch.rand(bs, device="cuda", generator=gen)
    out = {"bs": bs, "budget": budget, "vocab": vocab}
    for name, switch in (("triton", "1"), ("torch", "0")):
        with sampling_path(switch):
            tree.verify_sampling_logits(logits, **params, coins=coins, final_coins=final)  # compile, caches
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            tree.verify_sampling_logits(logits, **params, coins=coins, final_coins=final)
            torch.cuda.synchronize()
            out[f"{name}_peak_extra_mib"] = (torch.cuda.max_memory_allocated() - before) / 2**20
    return out


def table_cells(row: dict) -> list[str]:
    """One printed row: floats with one decimal, '-' for what was not measured."""
    cells = []
    for key in TABLE_KEYS:
        value = row[key]
        cells.append(
            f"{'-':>8}" if value is None else f"{value:>8.1f}" if isinstance(value, float) else f"{value:>8}"
        )
    return cells


def count_kernels(fn: Callable[[], object]) -> int:
    """GPU activities (kernels, memsets, copies) of one eager call, from the profiler; -1 if unavailable."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    except Exception as exc:  # the profiler is optional here; timings are what matters
        print(f"note: kernel count unavailable ({exc})", file=sys.stderr)
        return -1


TOPK_TILES = (4096, 8192, 16384)  # topk_logsumexp's tile sizes timed (4096: the served default)


def compare_topk(du, bs: int, topk: int, depth: int, vocab: int, iters: int) -> dict:
    """Graph latency of the per-depth top-k three ways: torch.topk + merge, the torch path, the kernels."""
    lp = torch.randn(bs, depth, vocab, device="cuda").log_softmax(-1)
    flat = lp.reshape(-1, vocab)

    def direct():
        return du.merge_topk(*torch.topk(lp, topk, dim=-1, sorted=False))

    def worker_torch():  # what the worker did before the kernels: logsumexp + topk + merge
        values, index = torch.topk(flat, topk, dim=-1, sorted=False)
        return du.merge_topk(values, index), torch.logsumexp(flat, dim=-1)

    kernels = du._kernels()
    timed = {
        "bs": bs,
        "direct_topk_us": time_graph(direct, iters),
        "torch_path_us": time_graph(lambda: du._draft_topk_torch(lp, topk), iters),
        "worker_torch_us": time_graph(worker_torch, iters),
    }
    for switch, suffix in (("0", ""), ("1", "_prefilter")):  # the tile kernel, and the group prefilter
        with topk_prefilter(switch):  # read when the graph is captured
            timed[f"draft_topk{suffix}_us"] = time_graph(lambda: du.draft_topk(lp, topk), iters)
            worker = time_graph(lambda: du.vocab_topk_logsumexp(flat, topk), iters)
            timed[f"worker_kernels{suffix}_us"] = worker
            for tile in TOPK_TILES if kernels is not None else ():  # the first launch's tile size
                timed[f"tile{tile}{suffix}_us"] = time_graph(
                    lambda tile=tile: kernels.topk_logsumexp(flat, topk, tile=tile), iters
                )
    return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bs", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--budget", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--topk", type=int, default=4)
    parser.add_argument("--depth", type=int, default=7)
    parser.add_argument("--vocab", type=int, default=163840)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument(
        "--bandwidth-gbs", type=float, default=4800.0, help="the GPU's memory bandwidth (H200: 4800 GB/s)"
    )
    parser.add_argument("--memory-bs", type=int, default=48)
    parser.add_argument("--memory-budget", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    parser.add_argument(
        "--profile-bs",
        type=int,
        nargs="*",
        default=None,
        help="batch sizes of the per-kernel breakdown (default: the least and the largest --bs)",
    )
    parser.add_argument("--profile-budget", type=int, default=16, help="budget of the per-kernel breakdown")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: no CUDA device; run this on the GPU machine", file=sys.stderr)
        return 1
    os.environ.setdefault("SGLANG_DDTREE_TRITON_SAMPLING", "1")
    du = import_new_module("sglang/srt/speculative/ddtree_utils.py", "series_ddtree_utils")
    triton_sampling = os.environ["SGLANG_DDTREE_TRITON_SAMPLING"] == "1"
    print(f"sampling path: {'Triton' if triton_sampling else 'torch reference'}")
    prefilter = os.environ.get("SGLANG_DDTREE_TOPK_PREFILTER", "1") != "0"
    print(f"vocabulary top-k: {'group prefilter (default)' if prefilter else 'plain tile kernel'}")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"top-k {args.topk}, depth {args.depth}, vocab {args.vocab}; microseconds per step")
    names = ("eager", "graph", "g_topk", "topk%bw", "g_tree", "s_temp", "s_coin", "s_topp", "s_kpm", "s%bw",
             "search%", "s_torch", "s_ref", "kernels")  # fmt: skip
    print(f"{'bs':>4} {'budget':>6} " + " ".join(f"{name:>8}" for name in names))
    rows = []
    for bs in args.bs:
        for budget in args.budget:
            row = bench_one(du, bs, budget, args.topk, args.depth, args.vocab, args.iters, args.bandwidth_gbs)
            rows.append(row)
            print(f"{bs:>4} {budget:>6} " + " ".join(table_cells(row)), flush=True)
    kernels = "Triton kernels" if du._kernels() is not None else "NO Triton: torch paths"
    print(f"top-k over the vocabulary, graphed, us ({kernels}):")
    print("  draft_topk: torch.topk + merge | chunked torch path | draft_topk (tile kernel | prefilter);"
          "  worker: logsumexp + topk + merge | vocab_topk_logsumexp (tile kernel | prefilter)")  # fmt: skip
    sizes = sorted({1, max(args.bs)})
    topk_rows = [compare_topk(du, b, args.topk, args.depth, args.vocab, args.iters) for b in sizes]
    for r in topk_rows:
        print(
            f"  bs {r['bs']:>3}: draft_topk {r['direct_topk_us']:.1f} | {r['torch_path_us']:.1f} | "
            f"{r['draft_topk_us']:.1f} | {r['draft_topk_prefilter_us']:.1f};  "
            f"worker {r['worker_torch_us']:.1f} | {r['worker_kernels_us']:.1f} | "
            f"{r['worker_kernels_prefilter_us']:.1f}"
        )
        if f"tile{TOPK_TILES[0]}_us" in r:
            print(
                f"  bs {r['bs']:>3}: topk_logsumexp by tile (tile kernel / prefilter): "
                + ", ".join(
                    f"{t} {r[f'tile{t}_us']:.1f} / {r[f'tile{t}_prefilter_us']:.1f}" for t in TOPK_TILES
                )
            )
    memory = sampled_verify_memory(du, args.memory_bs, args.memory_budget, args.topk, args.depth, args.vocab)
    print(
        f"sampled verify peak extra memory, bs {memory['bs']}, budget {memory['budget']}, "
        f"vocab {memory['vocab']}: "
        f"Triton {memory['triton_peak_extra_mib']:.0f} MiB, torch {memory['torch_peak_extra_mib']:.0f} MiB"
    )
    breakdown = {}
    for bs in sorted(set(args.profile_bs if args.profile_bs is not None else (min(args.bs), max(args.bs)))):
        try:
            per_setting = kernel_breakdown(du, bs, args.profile_budget, args.topk, args.depth, args.vocab)
        except Exception as exc:  # the profiler is optional; the table above is what the goals read
            print(f"note: per-kernel breakdown unavailable ({exc})", file=sys.stderr)
            break
        breakdown[f"bs{bs}"] = per_setting
        for name, kernels_us in per_setting.items():
            total = sum(us for _, us, _ in kernels_us)
            top = ", ".join(f"{kernel[:40]} {us:.1f} x{n:g}" for kernel, us, n in kernels_us[:8])
            print(f"  bs {bs} budget {args.profile_budget} s_{name}: {total:.1f} us of kernels: {top}")
    if args.json:
        args.json.write_text(
            json.dumps({"steps": rows, "topk": topk_rows, "memory": memory, "kernels": breakdown}, indent=1)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
