"""DDTree core on CUDA: the CPU checks again, CPU/CUDA agreement, no host-device sync, CUDA-graph replay.

The module comes from the patch text (tests/sglang_sources.py), as in the unit tier. The Triton sampling
kernels serve by default (fixture `triton_sampling` sets it explicitly); with SGLANG_DDTREE_TRITON_SAMPLING=0
the torch reference runs, and it too must be sync-free and graph-capturable (it is the fallback).
"""

from __future__ import annotations

import dataclasses
import warnings
from types import ModuleType

import pytest
import torch

from benchmarks.gpu_timing import capture_without_sync
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


@pytest.mark.parametrize("prefilter", ["0", "1"], ids=["tile", "prefilter"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [163840, 20480, 5000])
def test_triton_topk_equals_torch_paths(
    du: ModuleType, monkeypatch: pytest.MonkeyPatch, dtype, vocab: int, prefilter: str
) -> None:
    """Both tile kernels: the plain one (SGLANG_DDTREE_TOPK_PREFILTER=0) and the default group prefilter."""
    monkeypatch.setenv("SGLANG_DDTREE_TOPK_PREFILTER", prefilter)
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


def sampling_inputs(bs: int, budget: int, vocab: int, seed: int, tied: bool = False):
    """A tree, language-model-like verify logits [bs * N, vocab] that favour the drafted tokens, per-request
    sampling settings (greedy, top-k, top-p, top-p + min-p, temperature only) and coins. `tied`: the
    logits rounded to bf16, as a bf16 model's are (steps of 1/16 in [8, 16)): ties at many cuts."""
    du = core.load()
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    depth, size = 7, budget + 1
    lp = (3 * torch.randn(bs, depth, vocab, device=DEVICE, generator=gen)).log_softmax(-1)
    tree = du.build_ddtree(lp, budget, 4)
    logits = 2 * torch.randn(bs * size, vocab, device=DEVICE, generator=gen)
    high = torch.randint(0, vocab, (bs * size, 64), device=DEVICE, generator=gen)
    logits.scatter_add_(1, high, 12 * torch.rand(bs * size, 64, device=DEVICE, generator=gen))
    rows_depth = torch.cat([tree.depth.new_zeros(bs, 1), tree.depth], dim=1).clamp(max=depth - 1)
    favourite = lp.argmax(-1).gather(1, rows_depth).reshape(-1, 1)
    logits.scatter_(1, favourite, logits.amax(dim=1, keepdim=True) + 3.0)
    if tied:
        logits = logits.to(torch.bfloat16).float()
    pattern = [(1.0, 1, 1.0, 0.0), (0.8, 40, 1.0, 0.0), (1.0, 1 << 30, 0.95, 0.0), (1.2, 50, 0.9, 0.05),
               (1.0, 1 << 30, 1.0, 0.0)]  # fmt: skip
    settings = [pattern[i % len(pattern)] for i in range(bs)]
    params = {
        "temperatures": torch.tensor([s[0] for s in settings], device=DEVICE),
        "top_ks": torch.tensor([s[1] for s in settings], dtype=torch.int32, device=DEVICE),
        "top_ps": torch.tensor([s[2] for s in settings], device=DEVICE),
        "min_ps": torch.tensor([s[3] for s in settings], device=DEVICE),
    }
    coins = torch.rand(bs, depth, device=DEVICE, generator=gen)
    final = torch.rand(bs, device=DEVICE, generator=gen)
    return tree, logits, params, coins, final


def torch_sampling(du: ModuleType, tree, logits, params, coins, final, renorm: bool, keep_ties: bool = True):
    """The torch reference on the GPU: sampling_target_probs' sort, then verify_sampling."""
    bs, size = tree.tokens.shape[0], tree.num_verify_tokens
    rows = {name: value.repeat_interleave(size) for name, value in params.items()}
    probs = du.sampling_target_probs(
        logits, rows["temperatures"], rows["top_ks"], rows["top_ps"], rows["min_ps"],
        top_p_after_top_k=renorm, keep_ties=keep_ties,
    )  # fmt: skip
    return tree.verify_sampling(probs.view(bs, size, -1), coins=coins, final_coins=final)


TRITON_SAMPLING_ENV = "SGLANG_DDTREE_TRITON_SAMPLING"
SAMPLE_FIRST_ENV = "SGLANG_DDTREE_SAMPLE_FIRST"  # plain temperature: auto (race up to 48 rows), 1, 0


@pytest.fixture
def triton_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling verification on the Triton kernels (the served default), whatever the shell says."""
    monkeypatch.setenv(TRITON_SAMPLING_ENV, "1")


SAMPLING_CONFIGS = [(1, 8, 163840), (16, 8, 163840), (8, 32, 163840), (12, 16, 5000)]  # bs budget vocab


@pytest.mark.parametrize(
    "tied,keep_ties",
    [(False, True), (True, True), (True, False)],
    ids=["flashinfer-rule", "flashinfer-rule-bf16-ties", "pytorch-rule-bf16-ties"],
)
@pytest.mark.parametrize("renorm", [False, True])
@pytest.mark.parametrize("bs,budget,vocab", SAMPLING_CONFIGS)
def test_triton_sampling_equals_the_torch_reference(
    du: ModuleType, triton_sampling: None, bs, budget, vocab, renorm: bool, tied: bool, keep_ties: bool
) -> None:
    """Same accept length, path and bonus token as the torch reference for the same coins, on 20 draws of
    each request; float rounding (Triton's exp against torch's) may flip a coin's boundary very rarely."""
    same, total, accepted = 0, 0, 0
    for seed in range(20):
        tree, logits, params, coins, final = sampling_inputs(bs, budget, vocab, seed, tied)
        got = tree.verify_sampling_logits(logits, **params, top_p_after_top_k=renorm, keep_ties=keep_ties,
                                          coins=coins, final_coins=final)  # fmt: skip
        want = torch_sampling(du, tree, logits, params, coins, final, renorm, keep_ties)
        agree = torch.ones(bs, dtype=torch.bool, device=DEVICE)
        for g, w in zip(got, want, strict=True):
            agree &= (g == w).reshape(bs, -1).all(dim=1)
        same += int(agree.sum())
        total += bs
        accepted += int(want[0].sum())
    assert same >= total - max(1, total // 100), f"{total - same} of {total} requests differ"
    assert accepted >= total, f"the inputs barely exercise acceptance: {accepted} nodes in {total} walks"


@pytest.mark.parametrize("bs,budget,vocab", SAMPLING_CONFIGS)
def test_triton_plain_temperature_sampling_equals_the_torch_reference(
    du: ModuleType, triton_sampling: None, monkeypatch: pytest.MonkeyPatch, bs, budget, vocab
) -> None:
    """Plain temperature (no filter tensors, the commonest request) on the coin walk
    (SGLANG_DDTREE_SAMPLE_FIRST=0): the two-launch path, whose walk kernel also draws the bonus token from the
    tiles' first-pass sums less the children's probabilities. Same decisions as the torch reference on 20
    draws of each request, up to float rounding at a coin's edge."""
    monkeypatch.setenv(SAMPLE_FIRST_ENV, "0")
    same, total, drawn_at_root = 0, 0, 0
    for seed in range(20):
        tree, logits, params, coins, final = sampling_inputs(bs, budget, vocab, seed, False)
        temperatures = params["temperatures"]
        got = tree.verify_sampling_logits(logits, temperatures, coins=coins, final_coins=final)
        size = tree.num_verify_tokens
        probs = du.sampling_target_probs(logits, temperatures.repeat_interleave(size))
        want = tree.verify_sampling(probs.view(bs, size, -1), coins=coins, final_coins=final)
        agree = torch.ones(bs, dtype=torch.bool, device=DEVICE)
        for g, w in zip(got, want, strict=True):
            agree &= (g == w).reshape(bs, -1).all(dim=1)
        same += int(agree.sum())
        total += bs
        drawn_at_root += int((want[0] == 0).sum())
    assert same >= total - max(1, total // 100), f"{total - same} of {total} requests differ"
    assert drawn_at_root >= 1, "no walk ended at the root: the residual of a row with children is untested"


@pytest.mark.parametrize("bs,budget,vocab", SAMPLING_CONFIGS)
def test_sample_first_equals_the_race_on_given_noise(du: ModuleType, bs, budget, vocab) -> None:
    """Plain temperature sampled first (the default) with explicit Exp(1) noise: each row's draw is
    argmax z - log(E) and the walk greedy verification on those draws, as torch computes them; float
    rounding of the logs may flip a near tie very rarely."""
    kernels = du._kernels()
    same, total, accepted = 0, 0, 0
    for seed in range(10):
        tree, logits, params, coins, final = sampling_inputs(bs, budget, vocab, seed, False)
        temperatures = params["temperatures"]
        size = tree.num_verify_tokens
        gen = torch.Generator(device=DEVICE).manual_seed(1000 + seed)
        noise = torch.empty_like(logits).exponential_(generator=gen)
        z = logits / temperatures.repeat_interleave(size).unsqueeze(1)
        want = tree.verify_greedy((z - noise.log()).argmax(dim=1).view(bs, size))
        got = kernels.verify_sampling(
            tree.tokens,
            tree.parents,
            logits,
            temperatures,
            None,
            None,
            None,
            coins,
            final,
            tree.mask,
            tree.path,
            tree.verify_depth,
            tree.valid if tree.has_padding else None,
            sample_first=True,
            noise=noise,
        )
        agree = torch.ones(bs, dtype=torch.bool, device=DEVICE)
        for g, w in zip(got, want, strict=True):
            agree &= (g == w).reshape(bs, -1).all(dim=1)
        same += int(agree.sum())
        total += bs
        accepted += int(want[0].sum())
    assert same >= total - max(1, total // 100), f"{total - same} of {total} requests differ"
    assert accepted >= total, f"the inputs barely exercise acceptance: {accepted} nodes in {total} walks"


def outcome_probabilities(tree, probs: torch.Tensor) -> torch.Tensor:
    """float64 [N, V] exact probability that request 0's walk ends at verify row r and emits v: the product
    of the accepted children's probabilities along r's path times p_r(v), v held by no valid child of r."""
    size, vocab = probs.shape
    tokens, parents, valid = tree.tokens[0].tolist(), tree.parents[0].tolist(), tree.valid[0].tolist()
    reach = [0.0] * size
    reach[0] = 1.0
    out = torch.zeros(size, vocab, dtype=torch.float64)
    for r in range(size):
        held = set()
        for i in range(size - 1):
            if parents[i] == r - 1 and valid[i] and tokens[i] not in held:
                reach[i + 1] = reach[r] * float(probs[r, tokens[i]])
                held.add(tokens[i])
        for v in range(vocab):
            if v not in held:
                out[r, v] = reach[r] * float(probs[r, v])
    return out


@pytest.mark.parametrize("first", ["1", "0"], ids=["sample-first", "coin-walk"])
def test_plain_temperature_outcomes_follow_the_target_distribution(
    du: ModuleType, triton_sampling: None, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """One small tree with tied logits repeated over 200k requests (Philox noise keyed by each request's
    coins, or the coin walk): the counts of (last accepted row, bonus token) pass a chi-square test against
    the exact probabilities, and no impossible outcome occurs."""
    monkeypatch.setenv(SAMPLE_FIRST_ENV, first)
    bs, budget, depth, vocab, temperature = 200_000, 6, 3, 5, 0.9
    lp = torch.tensor([[1.0, 0.5, 0.5, -1.0, -2.0], [0.2, 1.0, 0.2, -0.5, -3.0], [0.0, 0.3, 1.2, 0.3, -1.0]])
    one = du.build_ddtree(lp.log_softmax(-1).unsqueeze(0).to(DEVICE), budget, 3)
    size = budget + 1
    shift = torch.arange(size).unsqueeze(1).float().remainder(3) * torch.tensor([[0.0, 0.5, 1.0, 0.5, 0.0]])
    base = torch.tensor([[2.0, 2.0, 1.0, 0.0, -1.0]]) + shift  # ties inside rows and across rows
    exact = outcome_probabilities(one, (base / temperature).double().softmax(-1))
    fields = {f.name: getattr(one, f.name) for f in dataclasses.fields(one)}
    batched = {
        name: value.expand(bs, *value.shape[1:]).contiguous()
        for name, value in fields.items()
        if isinstance(value, torch.Tensor) and value.shape[:1] == (1,)
    }
    tree = dataclasses.replace(one, **batched)
    logits = base.to(DEVICE).repeat(bs, 1)
    gen = torch.Generator(device=DEVICE).manual_seed(5)
    coins = torch.rand(bs, depth, device=DEVICE, generator=gen)
    final = torch.rand(bs, device=DEVICE, generator=gen)
    accept_len, accept_idx, bonus = tree.verify_sampling_logits(
        logits, torch.full((bs,), temperature, device=DEVICE), coins=coins, final_coins=final
    )
    last = torch.where(
        accept_len > 0, accept_idx.gather(1, (accept_len - 1).clamp(min=0).unsqueeze(1))[:, 0] + 1, 0
    )
    counts = torch.zeros(size * vocab, dtype=torch.float64, device=DEVICE)
    counts.index_add_(0, last * vocab + bonus, torch.ones(bs, dtype=torch.float64, device=DEVICE))
    counts = counts.view(size, vocab).cpu()
    expected = exact * bs
    possible = expected > 0
    assert float(counts[~possible].sum()) == 0, "an impossible (row, bonus) outcome was emitted"
    chi2 = float(((counts - expected)[possible] ** 2 / expected[possible]).sum())
    dof = int(possible.sum()) - 1
    assert chi2 < dof + 5 * (2 * dof) ** 0.5, f"chi-square {chi2:.1f} on {dof} degrees of freedom"
    assert float(counts[1:].sum()) > bs / 4, "the walks barely accept a node"


@pytest.mark.parametrize(
    "switch,plain",
    [("1", False), ("0", False), ("1", True)],
    ids=["triton", "torch-reference", "sample-first"],
)
def test_sampling_has_no_host_device_sync_and_replays_in_a_graph(
    du: ModuleType, monkeypatch: pytest.MonkeyPatch, switch: str, plain: bool
) -> None:
    """Graph replays equal eager runs on fresh logits and coins (plain: temperature only, sampled first, its
    Philox seed read from the coins inside the graph)."""
    monkeypatch.setenv(TRITON_SAMPLING_ENV, switch)
    monkeypatch.setenv(SAMPLE_FIRST_ENV, "1")
    tree, logits, params, coins, final = sampling_inputs(8, 8, 163840, seed=40)
    if plain:
        params = {"temperatures": params["temperatures"]}

    def run():
        return tree.verify_sampling_logits(logits, **params, coins=coins, final_coins=final)

    graph, outputs = capture_without_sync(run)
    for seed in (41, 42, 43):
        _, fresh_logits, _, fresh_coins, fresh_final = sampling_inputs(8, 8, 163840, seed)
        logits.copy_(fresh_logits)
        coins.copy_(fresh_coins)
        final.copy_(fresh_final)
        graph.replay()
        eager = run()
        torch.cuda.synchronize()
        for replayed, expected in zip(outputs, eager, strict=True):
            assert torch.equal(replayed, expected)


def test_select_true_equals_nonzero_without_a_sync(du: ModuleType) -> None:
    mask = torch.rand(37, 9, device=DEVICE) < 0.4
    count = int(mask.sum())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        picked = du.select_true(mask, count)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(picked, mask.reshape(-1).nonzero().squeeze(1))


def test_warm_up_compiles_every_sampling_variant(du: ModuleType, triton_sampling: None) -> None:
    warmed = du.warm_up_kernels(8, 4, 7, 163840, DEVICE, local_vocab=20480)
    assert warmed[:3] == ["topk_logsumexp", "build_tree", "verify_greedy"]
    # nine filter variants and plain temperature's other path (race or coin walk: the batch's rows choose)
    assert len([w for w in warmed if w.startswith("verify_sampling")]) == 10
    assert warmed[-1] == "verify_sampling[temperature:other-path]"


def test_warm_up_leaves_the_sampling_kernels_alone_when_switched_off(
    du: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRITON_SAMPLING_ENV, "0")
    warmed = du.warm_up_kernels(8, 4, 7, 20480, DEVICE)
    assert warmed == ["topk_logsumexp", "build_tree", "verify_greedy"]
    monkeypatch.delenv(TRITON_SAMPLING_ENV)  # the default: the sampling variants too
    warmed = du.warm_up_kernels(8, 4, 7, 20480, DEVICE)
    assert len([w for w in warmed if w.startswith("verify_sampling")]) == 10


def test_a_sampling_kernel_failing_at_warm_up_switches_the_triton_sampling_path_off(
    du: ModuleType, triton_sampling: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile error at warm-up must not stop the server: logged, and sampled batches use the torch
    reference."""

    def broken(*_args, **_kwargs):
        raise RuntimeError("stub: the kernel did not compile")

    monkeypatch.setattr(du._kernels(), "verify_sampling", broken)
    monkeypatch.setattr(du, "_sampling_kernels_failed", [])
    warmed = du.warm_up_kernels(8, 4, 7, 20480, DEVICE)
    assert warmed == ["topk_logsumexp", "build_tree", "verify_greedy"]
    assert du._sampling_kernels() is None
    tree, logits, params, coins, final = sampling_inputs(2, 8, 20480, seed=7)
    got = tree.verify_sampling_logits(logits, **params, coins=coins, final_coins=final)  # the torch reference
    want = torch_sampling(du, tree, logits, params, coins, final, renorm=False)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


@pytest.mark.parametrize("keep_ties", [True, False], ids=["flashinfer-rule", "pytorch-rule"])
@pytest.mark.parametrize("inputs", ["bf16-ties", "flat-tail"])
def test_radix_search_cut_equals_the_reference(du: ModuleType, inputs: str, keep_ties: bool) -> None:
    """The cut the candidates leave open (a cap of 8, a floor of 0.5: nearly every row searched), found by the
    radix search on the Kimi vocabulary in every filter combination, equals sampling_cut's sort: the same
    cut key and index (so the same kept tokens, ties included; a row no filter cuts, top-k 1 << 30 alone or
    min-p 0 alone, is (_KEEP_ALL_KEY, vocab) in both) on bf16-rounded logits and on a tail of 160k equal
    tokens; the kept mass to float32 rounding. One exception, under the pytorch rule only: a top-p cut inside
    a run of ties may keep a different number of them where the mass crosses top_p within float32 rounding
    (top_p_crossing_within_rounding; accepted rows are reported as warnings), at most two rows per filter
    combination. A failure names the rows that differ and their requests' filters.

    Row 18 (top-p 0.95 alone, temperature 1.3: cut_idx 14556 vs 18506, the same cut key) failed on every
    H200 sitting from 2026-12-02c with the report "kept 53643 vs 53643, gaps nan": the diagnostics then
    divided the row by the Python float 1.3, which CUDA computes as x * float32(1 / 1.3), one ulp off the
    kernels' x / 1.3 for that tie run's value, so the run left the cut key and neither cut's ties were
    counted. Both cuts name the last kept token of the run (same meaning); they differ in how many of its
    ties they keep. The diagnostics now use the kernels' z (scaled_logits) and refuse a row whose cut
    tokens are off the cut key, so the row is judged by its real gaps (tests/unit/test_top_p_rounding_rule.py
    reproduces the report on CPU). Expected there: one tie apart, gap well under 1e-7 of Z (the kernel's
    exp, mul by float32 log2(e) then ex2.approx, emulated on CPU on rows of this shape, moves the limit by
    -0.02 of a tie's weight on average: the kernel keeps one tie fewer where the limit lies that close)."""
    kernels = du._kernels()
    assert kernels is not None
    bs, size, vocab = 4, 9, 163840
    _, logits, _, _, _ = sampling_inputs(bs, size - 1, vocab, seed=60, tied=True)
    if inputs == "flat-tail":  # every token but the 64 raised ones ties: cuts inside a run of ~160k ties
        logits = torch.where(logits > 8.0, logits, torch.zeros_like(logits))
    temps = torch.tensor([1.0, 0.8, 1.3, 0.6], device=DEVICE)
    on = {
        "top_ks": torch.tensor([1, 40, 100000, 1 << 30], dtype=torch.int32, device=DEVICE),
        "top_ps": torch.tensor([0.3, 0.9, 0.95, 0.999], device=DEVICE),
        "min_ps": torch.tensor([0.0, 0.05, 1e-6, 1e-3], device=DEVICE),
    }
    searched = 0
    for name, filters in du.sampling_variants(bs, DEVICE).items():
        if name == "temperature":
            continue
        chosen = {key: None if filters[key] is None else on[key] for key in on}
        renorm = filters["top_p_after_top_k"]
        got = kernels.filter_rows(logits, temps, chosen["top_ks"], chosen["top_ps"], chosen["min_ps"], size,
                                  top_p_after_top_k=renorm, keep_ties=keep_ties, candidate_cap=8,
                                  candidate_floor=0.5)  # fmt: skip
        rows = {
            key: None if value is None else value.repeat_interleave(size) for key, value in chosen.items()
        }
        want = du.sampling_cut(logits, temps.repeat_interleave(size), rows["top_ks"], rows["top_ps"],
                               rows["min_ps"], top_p_after_top_k=renorm, keep_ties=keep_ties)  # fmt: skip
        rounding, reports = set(), []
        if not keep_ties and chosen["top_ps"] is not None:
            cut_differs = (got["cut_key"] != want["cut_key"]) | (got["cut_idx"] != want["cut_idx"])
            for row in cut_differs.nonzero().flatten().tolist():
                k = None if chosen["top_ks"] is None else int(rows["top_ks"][row])
                top_p, temp = float(rows["top_ps"][row]), float(temps[row // size])
                args = (du, logits[row], top_p, k, renorm, temp, got, want, row)
                if top_p_crossing_within_rounding(*args):
                    rounding.add(row)  # in the log's warnings: how far from the limit the GPU's cut fell
                    warnings.warn(f"{name} rounding: {top_p_crossing_report(*args)}", stacklevel=1)
                else:
                    reports.append(top_p_crossing_report(*args))
                    print(name, reports[-1])  # pytest shows a failing test's output in full
        exact = torch.ones(bs * size, dtype=torch.bool, device=DEVICE)
        exact[sorted(rounding)] = False
        for key in ("cut_key", "cut_idx", "row_max"):
            differ = ((got[key] != want[key]) & exact).nonzero().flatten().tolist()
            filters = [{f: on[f][row // size].item() for f in on if chosen[f] is not None} for row in differ]
            # the rows' reports first, as a string: pytest shortens a long tuple message to its first items
            assert not differ, (
                f"{reports} {(name, key, differ, got[key][differ], want[key][differ], filters)}"
            )
        assert torch.allclose(got["kept_mass"][exact], want["kept_mass"][exact], rtol=1e-5), name
        assert len(rounding) <= 2, f"{name}: rows {sorted(rounding)} cut within rounding of top-p: too many"
        searched += int(got["searched"].sum())
    assert searched >= 8 * bs * size // 2, searched


# Relative to the row's mass: a bound on the kernel's GPU exp (ex2.approx, up to ~2e-6 per weight) against
# torch.exp over the whole row (limit and mass before the cut both move), with a margin.
TOP_P_ROUNDING = 1e-5


def scaled_logits(row_logits: torch.Tensor, temp: float) -> torch.Tensor:
    """z = logits / temperature in float32 as the kernels (div_rn) and sampling_cut compute it: divided by a
    float32 tensor on the logits' device. Not by the Python float: on CUDA, torch divides by a CPU scalar as
    a multiplication by its float32 reciprocal, one ulp off x / 1.3 for about a quarter of the bf16 values,
    and a tie run one ulp off the cut key is a run the diagnostics cannot see (H200, 2026-12-02c..f)."""
    scale = torch.full((1, 1), temp, dtype=torch.float32, device=row_logits.device)
    return (row_logits.float().view(1, -1) / scale).view(-1)


@dataclasses.dataclass
class TieCrossing:
    """One row's two cuts side by side in the reference's order (z desc, ties by index asc): how many tokens
    the kernel and the reference keep, each token's weight w and float64 mass before it (exclusive), the
    mass top-p is taken of (z_ref), and whether each side's cut_idx names a token at its cut key under these
    keys (False: the diagnostics' z is not the kernels', and the counts mean nothing)."""

    kept_got: int
    kept_want: int
    w: torch.Tensor
    exclusive: torch.Tensor
    z_ref: torch.Tensor
    cut_tokens_at_cut_key: bool = True

    @classmethod
    def of(cls, du: ModuleType, row_logits: torch.Tensor, top_k: int | None, renorm: bool, temp: float,
           got: dict, want: dict, row: int) -> TieCrossing:  # fmt: skip
        z = scaled_logits(row_logits, temp)
        key = du._float_key(z)
        _, order = torch.sort(key, descending=True, stable=True)
        w = torch.exp(z[order] - z.max()).double()
        inclusive = w.cumsum(0)
        positions = torch.arange(key.numel(), device=key.device)

        def kept(cut) -> int:
            tied = (key == cut["cut_key"][row]) & (positions <= cut["cut_idx"][row])
            return int(((key > cut["cut_key"][row]) | tied).sum())

        def at_cut_key(cut) -> bool:  # a pytorch-rule cut names its last kept token, a token of the cut key
            idx = int(cut["cut_idx"][row])
            return idx >= key.numel() or bool(key[idx] == cut["cut_key"][row])

        z_ref = inclusive[-1] if not (renorm and top_k) else inclusive[min(top_k, key.numel()) - 1]
        named = at_cut_key(got) and at_cut_key(want)
        return cls(kept(got), kept(want), w, inclusive - w, z_ref, named)

    def gaps(self, top_p: float) -> torch.Tensor:
        """(c - top_p Z) / Z of the tokens one side keeps and the other drops."""
        lo, hi = sorted((self.kept_got, self.kept_want))
        return (self.exclusive[lo:hi] - top_p * self.z_ref) / self.z_ref


def top_p_crossing_within_rounding(
    du: ModuleType,
    row_logits: torch.Tensor,
    top_p: float,
    top_k: int | None,
    renorm: bool,
    temp: float,
    got: dict,
    want: dict,
    row: int,
) -> bool:
    """Under the pytorch backend's rule a top-p cut may fall inside a run of tied tokens: the first K of the
    order are kept, K = #{i : c_i <= top_p * Z_ref}, and one tied token moves c by a whole (tail) weight. Both
    sum float32 weights in float64, but the kernel's weights come from Triton's GPU exp (ex2.approx of
    x * log2(e): up to about 1e-6 relative) and the reference's from torch.exp (SGLang's own pytorch sampler
    sums in float32 over an unstable sort), so the two may keep a different number of tokens where c crosses
    top_p * Z_ref within rounding. True when every token one keeps and the other drops has its c within
    TOP_P_ROUNDING of that limit (a real error moves the cut by far more), the row's max agrees, and both
    cut indices name tokens of the cut key under the kernels' z (scaled_logits)."""
    if got["row_max"][row] != want["row_max"][row]:
        return False
    crossing = TieCrossing.of(du, row_logits, top_k, renorm, temp, got, want, row)
    gaps = crossing.gaps(top_p)
    return crossing.cut_tokens_at_cut_key and gaps.numel() > 0 and bool((gaps.abs() <= TOP_P_ROUNDING).all())


def top_p_crossing_report(
    du: ModuleType,
    row_logits: torch.Tensor,
    top_p: float,
    top_k: int | None,
    renorm: bool,
    temp: float,
    got: dict,
    want: dict,
    row: int,
) -> str:
    """What a failing row's cut looks like against the rule above: how many tokens each side keeps, and how
    far (in units of the row's mass) the exclusive masses of the tokens between them lie from top_p * Z_ref,
    so that a GPU failure says whether it is rounding at a larger scale or a wrong cut."""
    crossing = TieCrossing.of(du, row_logits, top_k, renorm, temp, got, want, row)
    gaps = crossing.gaps(top_p).tolist() or [float("nan")]
    tie_weight = float(crossing.w[min(crossing.kept_got, crossing.kept_want)] / crossing.z_ref)
    return (
        f"row {row}: kept {crossing.kept_got} (kernel) vs {crossing.kept_want} (reference), row max "
        f"{float(got['row_max'][row])} vs {float(want['row_max'][row])}, (c - top_p Z) / Z between them: "
        f"min {min(gaps):.3e} max {max(gaps):.3e}, tied weight / Z {tie_weight:.3e}"
        + ("" if crossing.cut_tokens_at_cut_key else ", a cut_idx token off the cut key in these keys")
    )


@pytest.mark.parametrize("switch", ["1", "0"], ids=["triton", "torch"])
def test_sampled_verify_extra_memory_is_bounded(
    du: ModuleType, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """Issue 27's bound: one sampled verify at bs 48, budget 32, Kimi's vocabulary allocates at most 512 MiB
    beyond its inputs (the torch path cuts the rows in chunks; the Triton path keeps O(rows x candidates)).
    benchmarks/ddtree_core_bench.py prints the figure."""
    monkeypatch.setenv(TRITON_SAMPLING_ENV, switch)
    tree, logits, params, coins, final = sampling_inputs(48, 32, 163840, seed=50)
    tree.verify_sampling_logits(logits, **params, coins=coins, final_coins=final)  # compile, warm the caches
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    tree.verify_sampling_logits(logits, **params, coins=coins, final_coins=final)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    assert extra <= 512 * 2**20, f"{extra / 2**20:.0f} MiB"


# Against flashinfer's own sampler (SGLang's default on CUDA): token counts of plain decoding's sampling
# kernels and of the DDTree verify walk, on small ladders whose cuts fall inside runs of tied logits.
FLASHINFER_DRAWS = 200_000
LADDER = [
    4.0,
    3.0,
    3.0,
    3.0,
    2.0,
    2.0,
    1.0,
    0.0,
    0.0,
    -1.0,
    -2.0,
    -3.0,
]  # runs of ties at ranks 2-4, 5-6, 8-9


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, float]:
    """(Pearson's statistic, its critical value at p = 0.001) of counts against probabilities; cells
    expecting fewer than 5 are pooled, a count where nothing is expected makes the statistic infinite."""
    expected = probs.double() * counts.sum()
    if bool(((expected == 0) & (counts > 0)).any()):
        return float("inf"), 0.0
    big = expected >= 5
    stat = float((((counts[big] - expected[big]) ** 2) / expected[big]).sum())
    cells = int(big.sum())
    small_expected, small_count = float(expected[~big].sum()), float(counts[~big].sum())
    if small_expected > 0:
        stat += (small_count - small_expected) ** 2 / small_expected
        cells += 1
    df = max(cells - 1, 1)
    a = 2.0 / (9.0 * df)
    return stat, df * (1.0 - a + 3.0902 * a**0.5) ** 3  # Wilson-Hilferty


FLASHINFER_CASES = {  # name: (top_k, top_p, min_p, flashinfer's min-p path: renorm after top-k)
    "top_k_cut_in_ties": (3, 1.0, 0.0, False),
    "top_p_cut_in_ties": (1 << 30, 0.5, 0.0, False),
    "top_k_top_p": (5, 0.95, 0.0, False),
    "min_p_path": (5, 0.7, 0.02, True),
}


@pytest.mark.parametrize("case", sorted(FLASHINFER_CASES))
def test_flashinfer_sampler_counts_match_the_tie_rule(du: ModuleType, case: str) -> None:
    """flashinfer's top_k_top_p_sampling_from_probs (or its min-p path: top_k_renorm_probs,
    top_p_renorm_probs, min_p_sampling_from_probs) draws the distribution sampling_target_probs gives with
    keep_ties=True, and not the positional one (the test has the power to tell the two rules apart)."""
    flashinfer_sampling = pytest.importorskip("flashinfer.sampling")
    top_k, top_p, min_p, renorm = FLASHINFER_CASES[case]
    logits = torch.tensor([LADDER], device=DEVICE)
    vocab = logits.shape[1]
    draws = FLASHINFER_DRAWS
    probs = torch.softmax(logits, dim=-1).expand(draws, vocab).contiguous()
    top_ks = torch.full((draws,), min(top_k, vocab), dtype=torch.int32, device=DEVICE)
    top_ps = torch.full((draws,), top_p, device=DEVICE)
    torch.manual_seed(27)
    if renorm:
        filtered = flashinfer_sampling.top_k_renorm_probs(probs, top_ks)
        filtered = flashinfer_sampling.top_p_renorm_probs(filtered, top_ps)
        drawn = flashinfer_sampling.min_p_sampling_from_probs(
            filtered, torch.full((draws,), min_p, device=DEVICE)
        )
    else:
        drawn = flashinfer_sampling.top_k_top_p_sampling_from_probs(
            probs, top_ks, top_ps, filter_apply_order="joint"
        )
    counts = torch.bincount(drawn.long(), minlength=vocab).cpu()
    one = torch.ones(1, device=DEVICE)

    def target(keep_ties: bool) -> torch.Tensor:
        return du.sampling_target_probs(
            logits, one, torch.tensor([top_k], device=DEVICE), torch.tensor([top_p], device=DEVICE),
            torch.tensor([min_p], device=DEVICE), top_p_after_top_k=renorm, keep_ties=keep_ties,
        )[0].cpu()  # fmt: skip

    stat, critical = _chi_square(counts, target(True))
    assert stat <= critical, (
        f"flashinfer's counts {counts.tolist()} vs the tie rule: {stat:.1f} > {critical:.1f}"
    )
    wrong, wrong_critical = _chi_square(counts, target(False))
    assert wrong > wrong_critical, f"the positional rule is not told apart: {wrong:.1f}"


@pytest.mark.parametrize("switch", ["1", "0"], ids=["triton", "torch"])
@pytest.mark.parametrize("case", sorted(FLASHINFER_CASES))
def test_ddtree_walk_emits_what_flashinfer_samples(
    du: ModuleType, monkeypatch: pytest.MonkeyPatch, case: str, switch: str
) -> None:
    """The first token the sampling verify walk emits (an accepted draft or the bonus) follows the
    distribution flashinfer's sampler draws from (two-sample chi-square on the same number of draws), on both
    paths; every verify row holds the tied ladder, and the drafter proposes its top tokens."""
    flashinfer_sampling = pytest.importorskip("flashinfer.sampling")
    monkeypatch.setenv(TRITON_SAMPLING_ENV, switch)
    top_k, top_p, min_p, renorm = FLASHINFER_CASES[case]
    vocab, budget, depth = len(LADDER), 8, 3
    bs = 50_000
    ladder = torch.tensor(LADDER, device=DEVICE)
    draft = torch.log_softmax(ladder, dim=-1).expand(bs, depth, vocab).contiguous()
    tree = du.build_ddtree(draft, budget, 4)
    logits = ladder.expand(bs * (budget + 1), vocab).contiguous()
    params = {
        "temperatures": torch.ones(bs, device=DEVICE),
        "top_ks": torch.full((bs,), min(top_k, vocab), dtype=torch.int32, device=DEVICE),
        "top_ps": torch.full((bs,), top_p, device=DEVICE),
        "min_ps": torch.full((bs,), min_p, device=DEVICE) if renorm else None,
    }
    torch.manual_seed(2700)
    result = tree.verify_sampling_logits(logits, **params, top_p_after_top_k=renorm, keep_ties=True)
    first = du.emitted_tokens(tree.tokens, *result)[:, 0]
    walked = torch.bincount(first, minlength=vocab).cpu().double()
    probs = torch.softmax(ladder, dim=-1).expand(bs, vocab).contiguous()
    if renorm:
        filtered = flashinfer_sampling.top_k_renorm_probs(probs, params["top_ks"])
        filtered = flashinfer_sampling.top_p_renorm_probs(filtered, params["top_ps"])
        drawn = flashinfer_sampling.min_p_sampling_from_probs(filtered, params["min_ps"])
    else:
        drawn = flashinfer_sampling.top_k_top_p_sampling_from_probs(
            probs, params["top_ks"], params["top_ps"], filter_apply_order="joint"
        )
    sampled = torch.bincount(drawn.long(), minlength=vocab).cpu().double()
    both = (walked + sampled) > 0
    stat = float((((walked - sampled) ** 2)[both] / (walked + sampled)[both]).sum())
    df = max(int(both.sum()) - 1, 1)
    a = 2.0 / (9.0 * df)
    critical = df * (1.0 - a + 3.0902 * a**0.5) ** 3
    assert stat <= critical, (
        f"walk {walked.tolist()} vs flashinfer {sampled.tolist()}: {stat:.1f} > {critical:.1f}"
    )
    assert int(result[0].sum()) >= bs // 2, (
        "the walk barely accepts: the test would only check the bonus draw"
    )
