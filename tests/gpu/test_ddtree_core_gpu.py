"""DDTree core on CUDA: the CPU checks again, CPU/CUDA agreement, no host-device sync, CUDA-graph replay.

The module comes from the patch text (tests/sglang_sources.py), as in the unit tier.
"""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from tests.unit import test_ddtree_core as core

DEVICE = "cuda"


@pytest.fixture(scope="module")
def du() -> ModuleType:
    return core.load()


@pytest.mark.parametrize(
    "check",
    [
        core.check_bruteforce,
        core.check_ties,
        core.check_masks,
        core.check_draft_topk,
        core.check_verify_against_kernel_walk,
        core.check_greedy_decoding,
        core.check_sampling_chi_square,
        core.check_sampling_matches_greedy_on_one_hot,
        core.check_residual_draw,
    ],
    ids=lambda f: f.__name__,
)
def test_checks_on_cuda(du: ModuleType, check) -> None:
    check(du, DEVICE)


def step(du: ModuleType, lp, agree, other, target_probs, coins, final_coins, budget: int, topk: int):
    """One verify step as the worker runs it: tree, mask, layout arrays, greedy and sampled verification.

    The greedy target agrees with the drafter's top-1 at the next depth where `agree` is set (so long
    paths get accepted) and says `other` elsewhere.
    """
    tree = du.build_ddtree(lp, budget, topk)
    depth_n = torch.cat([tree.depth.new_zeros(lp.shape[0], 1), tree.depth], dim=1)
    drafter_top1 = lp.argmax(-1).gather(1, depth_n.clamp(max=lp.shape[1] - 1))
    target_argmax = torch.where(agree, drafter_top1, other)
    greedy = tree.verify_greedy(target_argmax)
    sampled = tree.verify_sampling(target_probs, coins=coins, final_coins=final_coins)
    retrieve = du.retrieve_arrays(tree.parents, tree.valid)
    rows = du.accepted_rows(greedy[1], tree.num_verify_tokens)
    emitted = du.emitted_tokens(tree.tokens, *greedy)
    return (tree.tokens, tree.parents, tree.depth, tree.scores, tree.valid, tree.mask, *greedy, *sampled,
            *retrieve, rows, emitted)  # fmt: skip


def random_inputs(bs: int, depth: int, vocab: int, budget: int, seed: int):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    size = budget + 1
    lp = (3 * torch.randn(bs, depth, vocab, device=DEVICE, generator=gen)).log_softmax(-1)
    agree = torch.rand(bs, size, device=DEVICE, generator=gen) < 0.8
    other = torch.randint(0, vocab, (bs, size), device=DEVICE, generator=gen)
    target_probs = torch.randn(bs, size, vocab, device=DEVICE, generator=gen).softmax(-1)
    coins = torch.rand(bs, depth, device=DEVICE, generator=gen)
    final = torch.rand(bs, device=DEVICE, generator=gen)
    return lp, agree, other, target_probs, coins, final


CONFIGS = [(4, 16, 4, 7, 163840), (3, 64, 8, 15, 4096), (2, 8, 1, 4, 1000)]  # bs budget topk depth vocab


@pytest.mark.parametrize("bs,budget,topk,depth,vocab", CONFIGS)
def test_cpu_and_cuda_agree(du: ModuleType, bs, budget, topk, depth, vocab) -> None:
    inputs = random_inputs(bs, depth, vocab, budget, seed=1)
    on_gpu = step(du, *inputs, budget, topk)
    on_cpu = step(du, *(x.cpu() for x in inputs), budget, topk)
    for g, c in zip(on_gpu, on_cpu, strict=True):
        assert torch.equal(g.cpu(), c)


@pytest.mark.parametrize("bs,budget,topk,depth,vocab", CONFIGS)
def test_no_host_device_sync(du: ModuleType, bs, budget, topk, depth, vocab) -> None:
    inputs = random_inputs(bs, depth, vocab, budget, seed=2)
    step(du, *inputs, budget, topk)  # builds the cached static tables (host-to-device copies)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step(du, *inputs, budget, topk)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("bs,budget,topk,depth,vocab", CONFIGS)
def test_cuda_graph_replay_equals_eager(du: ModuleType, bs, budget, topk, depth, vocab) -> None:
    static = random_inputs(bs, depth, vocab, budget, seed=3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step(du, *static, budget, topk)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step(du, *static, budget, topk)
    for seed in (4, 5, 6):
        fresh = random_inputs(bs, depth, vocab, budget, seed=seed)
        for buffer, value in zip(static, fresh, strict=True):
            buffer.copy_(value)
        graph.replay()
        eager = step(du, *fresh, budget, topk)
        torch.cuda.synchronize()
        for replayed, expected in zip(outputs, eager, strict=True):
            assert torch.equal(replayed, expected)
        assert int(eager[6].max()) > 0  # some request accepted draft nodes


def test_triton_kernels_are_used_on_cuda(du: ModuleType) -> None:
    """The device has Triton: draft_topk and vocab_topk_logsumexp must take the kernel path there."""
    scores = torch.randn(2, 163840, device=DEVICE)
    assert du._kernels_for(scores, 4) is not None, "ddtree_kernels did not load beside ddtree_utils"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [163840, 20480, 5000])
def test_triton_topk_equals_torch_paths(du: ModuleType, dtype, vocab: int) -> None:
    gen = torch.Generator(device=DEVICE).manual_seed(vocab)
    lp = (3 * torch.randn(4, 7, vocab, device=DEVICE, generator=gen)).log_softmax(-1).to(dtype)
    ties = torch.randint(0, 3, (4, 7, vocab), device=DEVICE, generator=gen).to(dtype)
    for scores in (lp, ties):
        for k in (1, 4, 8):
            got = du.draft_topk(scores, k)
            want = du._draft_topk_torch(scores, k)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        flat = scores.reshape(-1, vocab)
        values, index, lse = du.vocab_topk_logsumexp(flat, 4)
        ref_values, ref_index = torch.sort(flat.float(), dim=-1, descending=True, stable=True)
        assert torch.equal(values, ref_values[:, :4]) and torch.equal(index, ref_index[:, :4])
        torch.testing.assert_close(lse, torch.logsumexp(flat.float(), dim=-1), rtol=1e-5, atol=1e-4)
