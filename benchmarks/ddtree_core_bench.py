"""Latency of one DDTree step (tree build + mask + verify) on a GPU, eager and in a CUDA graph.

    python benchmarks/ddtree_core_bench.py [--bs 1 8 32 64] [--budget 8 16 32] [--json FILE]

Columns (microseconds per step, CUDA events; eager includes the host's launch time):
  eager    build_ddtree + verify_greedy, launched op by op
  graph    the same, replayed from a CUDA graph
  g_topk   graph: per-depth top-k over the vocabulary alone (draft_topk: Triton kernels on CUDA)
  g_tree   graph: build_ddtree_from_topk + verify_greedy (the tree part alone)
  g_samp   graph: build_ddtree + verify_sampling with target_probs [bs, N, vocab] (temperature > 0)
The module is read from the patch series (patches/), i.e. exactly what the image gets.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.sglang_sources import import_new_module


def time_eager(fn: Callable[[], object], iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def time_graph(fn: Callable[[], object], iters: int) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def bench_one(du, bs: int, budget: int, topk: int, depth: int, vocab: int, iters: int) -> dict:
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
    probs = torch.randn(bs, size, vocab, device="cuda", generator=gen).softmax(-1)
    coins = torch.rand(bs, depth, device="cuda", generator=gen)
    final = torch.rand(bs, device="cuda", generator=gen)

    def sampling_step():
        tree = du.build_ddtree(lp, budget, topk)
        return tree.verify_sampling(probs, coins=coins, final_coins=final)

    row["graph_sampling_us"] = time_graph(sampling_step, iters)
    row["kernels_per_greedy_step"] = count_kernels(greedy_step)
    return row


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


def compare_topk(du, bs: int, topk: int, depth: int, vocab: int, iters: int) -> dict:
    """Graph latency of the per-depth top-k three ways: torch.topk + merge, the torch path, the kernels."""
    lp = torch.randn(bs, depth, vocab, device="cuda").log_softmax(-1)
    flat = lp.reshape(-1, vocab)

    def direct():
        return du.merge_topk(*torch.topk(lp, topk, dim=-1, sorted=False))

    def worker_torch():  # what the worker did before the kernels: logsumexp + topk + merge
        values, index = torch.topk(flat, topk, dim=-1, sorted=False)
        return du.merge_topk(values, index), torch.logsumexp(flat, dim=-1)

    return {
        "bs": bs,
        "direct_topk_us": time_graph(direct, iters),
        "torch_path_us": time_graph(lambda: du._draft_topk_torch(lp, topk), iters),
        "draft_topk_us": time_graph(lambda: du.draft_topk(lp, topk), iters),
        "worker_torch_us": time_graph(worker_torch, iters),
        "worker_kernels_us": time_graph(lambda: du.vocab_topk_logsumexp(flat, topk), iters),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bs", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--budget", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--topk", type=int, default=4)
    parser.add_argument("--depth", type=int, default=7)
    parser.add_argument("--vocab", type=int, default=163840)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: no CUDA device; run this on the GPU machine", file=sys.stderr)
        return 1
    du = import_new_module("sglang/srt/speculative/ddtree_utils.py", "series_ddtree_utils")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"top-k {args.topk}, depth {args.depth}, vocab {args.vocab}; microseconds per step")
    names = ("eager", "graph", "g_topk", "g_tree", "g_samp", "kernels")
    print(f"{'bs':>4} {'budget':>6} " + " ".join(f"{name:>8}" for name in names))
    rows = []
    for bs in args.bs:
        for budget in args.budget:
            row = bench_one(du, bs, budget, args.topk, args.depth, args.vocab, args.iters)
            rows.append(row)
            print(
                f"{bs:>4} {budget:>6} {row['eager_us']:>8.1f} {row['graph_us']:>8.1f} "
                f"{row['graph_topk_us']:>8.1f} {row['graph_tree_us']:>8.1f} {row['graph_sampling_us']:>8.1f} "
                f"{row['kernels_per_greedy_step']:>8}",
                flush=True,
            )
    kernels = "Triton kernels" if du._kernels() is not None else "NO Triton: torch paths"
    print(f"top-k over the vocabulary, graphed, us ({kernels}):")
    print("  draft_topk: torch.topk + merge | chunked torch path | draft_topk;"
          "  worker: logsumexp + topk + merge | vocab_topk_logsumexp")  # fmt: skip
    sizes = sorted({1, max(args.bs)})
    topk_rows = [compare_topk(du, b, args.topk, args.depth, args.vocab, args.iters) for b in sizes]
    for r in topk_rows:
        print(
            f"  bs {r['bs']:>3}: draft_topk {r['direct_topk_us']:.1f} | {r['torch_path_us']:.1f} | "
            f"{r['draft_topk_us']:.1f};  worker {r['worker_torch_us']:.1f} | {r['worker_kernels_us']:.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"steps": rows, "topk": topk_rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
