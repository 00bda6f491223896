"""DDTree core (sglang/srt/speculative/ddtree_utils.py, created by patch ddtree-core), on CPU.

The module is loaded from the patch text in patches/ (tests/sglang_sources.py), so these tests check what
the image gets. Each check_* function takes a device; tests/gpu/test_ddtree_core_gpu.py runs them on CUDA.
No mocks: the "models" are fixed random tables, which is all the algorithms see of a model.
"""

from __future__ import annotations

import ast
import itertools
import math
import sys
from types import ModuleType

import pytest
import torch

from tests.sglang_sources import import_new_module, new_file_text

MODULE_PATH = "sglang/srt/speculative/ddtree_utils.py"
P_VALUE_FLOOR = 1e-3  # a correct sampler fails a chi-square check with probability 1e-3 per seed


def load() -> ModuleType:
    return import_new_module(MODULE_PATH, "series_ddtree_utils")


@pytest.fixture(scope="module")
def du() -> ModuleType:
    return load()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only add spin-waits on a shared 2-core machine (10x slower seen)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ----------------------------------------------------------------------------------------------------
# References (plain Python, written from the definitions, not from the implementation)
# ----------------------------------------------------------------------------------------------------


def reference_ranked(row_lp: list[float], k: int) -> list[int]:
    """Token ids of one depth sorted by log-prob desc, ties by id asc; the first k."""
    return sorted(range(len(row_lp)), key=lambda t: (-row_lp[t], t))[:k]


def reference_tree(lp: list[list[float]], budget: int, topk: int) -> list[tuple[tuple[int, ...], float]]:
    """All paths through the per-depth top-k, in the documented order, the first `budget` (token paths)."""
    ranked = [reference_ranked(row, min(topk, len(row))) for row in lp]
    paths = []
    for m in range(1, len(lp) + 1):
        for ranks in itertools.product(*(range(len(ranked[d])) for d in range(m))):
            score = 0.0
            for d, r in enumerate(ranks):
                score += min(lp[d][ranked[d][r]], 0.0)
            paths.append((-score, m, ranks))
    paths.sort()
    return [(tuple(ranked[d][r] for d, r in enumerate(ranks)), -neg) for neg, _, ranks in paths[:budget]]


def node_paths(tokens: list[int], parents: list[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for i, tok in enumerate(tokens):
        p = parents[i]
        out.append((*(out[p] if p >= 0 else ()), tok))
    return out


def reference_ancestors(parents: list[int]) -> list[list[bool]]:
    size = len(parents) + 1
    rows = [[False] * size for _ in range(size)]
    rows[0][0] = True
    for i in range(1, size):
        j = i
        while True:
            rows[i][j] = True
            if j == 0:
                break
            j = parents[j - 1] + 1
    return rows


def kernel_greedy_walk(
    candidates: list[int], next_token: list[int], next_sibling: list[int], target: list[int], width: int
) -> tuple[list[int], int]:
    """sgl_kernel verify_tree_greedy's walk for one request (SGLANG-MAP §2): accepted local ids, bonus."""
    cur, accepted = 0, []
    for _ in range(width):
        child = next_token[cur]
        while child != -1 and candidates[child] != target[cur]:
            child = next_sibling[child]
        if child == -1:
            break
        accepted.append(child)
        cur = child
    return accepted, target[cur]


def chi_square_p(observed: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of Pearson's chi-square test, df = cells - 1 (torch.special.gammaincc is Q(a, x))."""
    expected = probs.double() * observed.sum()
    stat = ((observed.double() - expected) ** 2 / expected).sum()
    df = observed.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), stat / 2.0))


# ----------------------------------------------------------------------------------------------------
# Checks shared with the GPU tier
# ----------------------------------------------------------------------------------------------------

BRUTE_CONFIGS = [  # (vocab, depth, topk, budget, bs)
    (6, 4, 3, 1, 3),
    (6, 4, 3, 5, 3),
    (6, 4, 3, 17, 3),
    (6, 4, 3, 40, 3),
    (6, 4, 3, 120, 2),  # exactly every path
    (6, 4, 3, 130, 2),  # more budget than paths: padding nodes
    (5, 3, 5, 20, 3),  # topk == vocab
    (3, 3, 8, 12, 3),  # topk > vocab
    (9, 5, 2, 30, 3),
    (7, 6, 1, 4, 2),  # a chain
    (40, 7, 4, 32, 2),
]


def check_bruteforce(du: ModuleType, device: str) -> None:
    gen = torch.Generator().manual_seed(1)
    for vocab, depth, topk, budget, bs in BRUTE_CONFIGS:
        lp = (2.0 * torch.randn(bs, depth, vocab, generator=gen)).log_softmax(-1)
        tree = du.build_ddtree(lp.to(device), budget, topk)
        total = sum(min(topk, vocab) ** m for m in range(1, depth + 1))
        for b in range(bs):
            tokens, parents = tree.tokens[b].tolist(), tree.parents[b].tolist()
            valid = tree.valid[b].tolist()
            expect = reference_tree(lp[b].tolist(), budget, topk)
            kept = min(budget, total)
            assert valid == [True] * kept + [False] * (budget - kept)
            assert all(p < i for i, p in enumerate(parents))
            paths = node_paths(tokens, parents)[:kept]
            assert paths == [p for p, _ in expect], (vocab, depth, topk, budget, b)
            scores = tree.scores[b].tolist()
            assert scores[:kept] == pytest.approx([s for _, s in expect], abs=1e-5)
            assert all(x >= y for x, y in itertools.pairwise(scores))
            assert tree.depth[b].tolist()[:kept] == [len(p) for p in paths]
            assert all(math.isinf(s) for s in scores[kept:])


def check_draft_topk(du: ModuleType, device: str) -> None:
    """The two-stage top-k of large vocabularies and a tensor-parallel shard merge equal a full sort."""
    gen = torch.Generator().manual_seed(10)
    for vocab in (1000, 65536):
        lp = torch.randn(2, 3, vocab, generator=gen).log_softmax(-1)
        expect_vals, expect_ids = torch.sort(lp, dim=-1, descending=True, stable=True)
        values, ids = du.draft_topk(lp.to(device), 5)
        assert torch.equal(ids.cpu(), expect_ids[..., :5])
        assert torch.equal(values.cpu(), expect_vals[..., :5])
        shards = [du.draft_topk(part.to(device), 5) for part in lp.chunk(4, dim=-1)]
        width = vocab // 4
        merged = du.merge_topk(
            torch.cat([v for v, _ in shards], dim=-1),
            torch.cat([i + n * width for n, (_, i) in enumerate(shards)], dim=-1),
            5,
        )
        assert torch.equal(merged[1].cpu(), expect_ids[..., :5])
    # Chunked top-k with heavy ties, also across chunks and at the k-th value: exactly the lowest ids.
    tied = -torch.randint(0, 3, (2, 3, 8192), generator=gen).float()
    tied[0, 0, 5000] = 1.0  # one clear winner in a late chunk
    values, ids = du.draft_topk(tied.to(device), 6)
    expect_vals, expect_ids = torch.sort(tied, dim=-1, descending=True, stable=True)
    assert torch.equal(ids.cpu(), expect_ids[..., :6]) and torch.equal(values.cpu(), expect_vals[..., :6])


def check_ties(du: ModuleType, device: str) -> None:
    """Quantised log-probs (many exact ties, prob-1 tokens too) follow the documented tie rule exactly."""
    gen = torch.Generator().manual_seed(2)
    for vocab, depth, budget in [(4, 4, 25), (3, 5, 40), (5, 3, 60)]:
        lp = -torch.randint(0, 3, (4, depth, vocab), generator=gen).float()
        tree = du.build_ddtree(lp.to(device), budget, vocab)
        for b in range(4):
            expect = reference_tree(lp[b].tolist(), budget, vocab)
            got = node_paths(tree.tokens[b].tolist(), tree.parents[b].tolist())
            assert got == [p for p, _ in expect]
            assert tree.scores[b].tolist() == [s for _, s in expect]


def random_parents(n: int, gen: torch.Generator) -> list[int]:
    return [int(torch.randint(-1, i, (1,), generator=gen)) for i in range(n)]


def check_masks(du: ModuleType, device: str) -> None:
    gen = torch.Generator().manual_seed(3)
    for n in (1, 2, 7, 31, 64):
        parents = torch.tensor([random_parents(n, gen) for _ in range(5)], device=device)
        mask = du.tree_attention_mask(parents)
        assert mask.shape == (5, n + 1, n + 1) and mask.dtype == torch.bool
        for b in range(5):
            assert mask[b].tolist() == reference_ancestors(parents[b].tolist())
    lp = torch.randn(6, 7, 50, generator=gen).log_softmax(-1).to(device)
    for budget in (8, 16, 32, 64):
        tree = du.build_ddtree(lp, budget, 4)
        assert torch.equal(tree.mask, du.tree_attention_mask(tree.parents, tree.max_depth))
        assert torch.equal(tree.mask, du.tree_attention_mask(tree.parents))
        path, verify_depth = du._tree_tables(tree.mask, tree.max_depth, None, None)  # from the mask alone
        assert torch.equal(tree.path, path) and torch.equal(tree.verify_depth, verify_depth)


def check_verify_against_kernel_walk(du: ModuleType, device: str) -> None:
    """verify_greedy and the retrieve arrays agree with sgl_kernel's documented walk, on many trees."""
    gen = torch.Generator().manual_seed(4)
    configs = [
        (8, 4, 7, 4),
        (16, 3, 5, 3),
        (12, 2, 3, 2),
        (10, 1, 4, 2),
        (30, 2, 2, 2),
    ]  # budget topk depth V
    for budget, topk, depth, vocab in configs:
        lp = torch.randn(16, depth, vocab, generator=gen).log_softmax(-1).to(device)
        tree = du.build_ddtree(lp, budget, topk)
        size = budget + 1
        target = torch.randint(0, vocab, (16, size), generator=gen).to(device)
        accept_len, accept_idx, bonus = tree.verify_greedy(target)
        index, next_token, next_sibling = du.retrieve_arrays(tree.parents, tree.valid)
        ids = du.verify_input_ids(tree, torch.zeros(16, dtype=torch.long, device=device))
        assert torch.equal(index, torch.arange(16 * size, device=device).view(16, size))
        for b in range(16):
            walked, walked_bonus = kernel_greedy_walk(
                ids[b].tolist(), next_token[b].tolist(), next_sibling[b].tolist(), target[b].tolist(), depth
            )
            assert accept_len[b].item() == len(walked)
            assert accept_idx[b].tolist() == [j - 1 for j in walked] + [-1] * (depth - len(walked))
            assert bonus[b].item() == walked_bonus
        plain = du.verify_greedy(tree.tokens, tree.parents, target, valid=tree.valid)  # generic mask path
        assert torch.equal(plain[0], accept_len) and torch.equal(plain[2], bonus)
        assert torch.equal(plain[1][:, :depth], accept_idx)


class ToyLM:
    """Next-token logits from a fixed random table indexed by the last `order` tokens."""

    def __init__(self, vocab: int, order: int, gen: torch.Generator, sharpness: float = 3.0) -> None:
        self.vocab, self.order = vocab, order
        self.table = sharpness * torch.randn(*([vocab] * order), vocab, generator=gen)

    def noisy_copy(self, sigma: float, gen: torch.Generator) -> ToyLM:
        copy = ToyLM.__new__(ToyLM)
        copy.vocab, copy.order = self.vocab, self.order
        copy.table = self.table + sigma * torch.randn(self.table.shape, generator=gen).to(self.table.device)
        return copy

    def logits(self, prev: torch.Tensor, cur: torch.Tensor) -> torch.Tensor:
        return self.table[cur] if self.order == 1 else self.table[prev, cur]

    def to(self, device: str) -> ToyLM:
        self.table = self.table.to(device)
        return self


def draft_block(drafter: ToyLM, prev: torch.Tensor, root: torch.Tensor, depth: int) -> torch.Tensor:
    """DFlash-like block: per-depth log-probs, each from the drafter's own greedy guesses before it."""
    out = []
    for _ in range(depth):
        logp = drafter.logits(prev, root).log_softmax(-1)
        out.append(logp)
        prev, root = root, logp.argmax(-1)
    return torch.stack(out, dim=1)


def node_contexts(tree, root: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(previous token, token) at every verify row: the root, then each node (its parent's token first)."""
    ids = torch.cat([root.unsqueeze(1), tree.tokens], dim=1)
    parent_tok = ids.gather(1, (tree.parents + 1).clamp(min=0))
    return torch.cat([prev.unsqueeze(1), parent_tok], dim=1), ids


def ddtree_greedy_decode(du, target, drafter, prompt, steps_tokens, budget, topk, depth):
    """Greedy DDTree decoding in lockstep for a batch of prompts; returns (sequences, accept lengths)."""
    seqs = [list(p) for p in prompt.tolist()]
    accepts: list[int] = []
    device = prompt.device
    while min(len(s) for s in seqs) < prompt.shape[1] + steps_tokens:
        prev = torch.tensor([s[-2] for s in seqs], device=device)
        root = torch.tensor([s[-1] for s in seqs], device=device)
        tree = du.build_ddtree(draft_block(drafter, prev, root, depth), budget, topk)
        prev_n, cur_n = node_contexts(tree, root, prev)
        target_argmax = target.logits(prev_n, cur_n).argmax(-1)
        accept_len, accept_idx, bonus = tree.verify_greedy(target_argmax)
        emitted = du.emitted_tokens(tree.tokens, accept_len, accept_idx, bonus)
        for b, row in enumerate(emitted.tolist()):
            seqs[b].extend(t for t in row if t >= 0)
        accepts.extend(accept_len.tolist())
    return [s[: prompt.shape[1] + steps_tokens] for s in seqs], accepts


def plain_greedy(target, prompt, steps_tokens):
    seqs = prompt.clone()
    for _ in range(steps_tokens):
        nxt = target.logits(seqs[:, -2], seqs[:, -1]).argmax(-1)
        seqs = torch.cat([seqs, nxt.unsqueeze(1)], dim=1)
    return seqs.tolist()


def check_greedy_decoding(du: ModuleType, device: str, tokens: int = 300) -> None:
    gen = torch.Generator().manual_seed(5)
    for order in (1, 2):
        target = ToyLM(32, order, gen)
        prompt = torch.randint(0, 32, (4, 2), generator=gen).to(device)
        expect = plain_greedy(target.to(device), prompt, tokens)
        close = target.noisy_copy(0.5, gen).to(device)
        unrelated = ToyLM(32, order, gen).to(device)
        got, accepts = ddtree_greedy_decode(du, target, close, prompt, tokens, 16, 4, 7)
        assert got == expect
        mean_accept = sum(accepts) / len(accepts)
        print(f"order {order}: mean accepted draft tokens per step {mean_accept:.2f} over {len(accepts)}")
        assert mean_accept > 1.0, mean_accept
        got, accepts_bad = ddtree_greedy_decode(du, target, unrelated, prompt, tokens, 8, 2, 4)
        assert got == expect
        assert sum(accepts_bad) / len(accepts_bad) < mean_accept


def ddtree_sample_decode(du, target_probs_table, drafter, root, want, budget, topk, depth, gen, device):
    """Sample until every row has `want` tokens; DDTree with lossless tree sampling; Markov target."""
    rows = root.shape[0]
    spare = want + depth + 1  # a dump column for tokens past `want`
    out = torch.full((rows, spare + 1), -1, dtype=torch.long, device=device)
    filled = torch.zeros(rows, dtype=torch.long, device=device)
    cur = root.clone()
    accept_total = 0
    for _ in range(want):  # every step emits at least one token
        tree = du.build_ddtree(draft_block(drafter, cur, cur, depth), budget, topk)
        probs = target_probs_table[torch.cat([cur.unsqueeze(1), tree.tokens], dim=1)]
        coins = torch.rand(rows, depth, generator=gen).to(device)
        final = torch.rand(rows, generator=gen).to(device)
        accept_len, accept_idx, bonus = tree.verify_sampling(probs, coins=coins, final_coins=final)
        emitted = du.emitted_tokens(tree.tokens, accept_len, accept_idx, bonus)
        col = filled.unsqueeze(1) + torch.arange(depth + 1, device=device)
        col = torch.where((emitted >= 0) & (col < want), col, torch.full_like(col, spare))
        out.scatter_(1, col, emitted)
        filled = filled + accept_len + 1
        cur = bonus
        accept_total += int(accept_len.sum())
    return out[:, :want], accept_total / (rows * want)


def check_sampling_chi_square(du: ModuleType, device: str, rows: int = 40000) -> None:
    """First token ~ p(.|x0) and the first two tokens ~ p(a|x0) p(b|a), at p-value >= 1e-3 (fixed seeds)."""
    gen = torch.Generator().manual_seed(6)
    vocab = 5
    logits = torch.randn(vocab, vocab, generator=gen)
    probs = logits.softmax(-1)  # every entry well above 0.02, so every cell has a large expectation
    drafter = ToyLM(vocab, 1, gen)
    drafter.table = logits + 0.3 * torch.randn(vocab, vocab, generator=gen)
    drafter.to(device)
    x0 = 2
    root = torch.full((rows,), x0, dtype=torch.long, device=device)
    for budget, topk, depth in [(6, 2, 3), (4, 4, 1), (9, 3, 4)]:
        seqs, mean_accept = ddtree_sample_decode(
            du, probs.to(device), drafter, root, 2, budget, topk, depth, gen, device
        )
        seqs = seqs.cpu()
        assert mean_accept > 0.3  # the tree path, not only the residual draw, is exercised
        first = torch.bincount(seqs[:, 0], minlength=vocab)
        assert chi_square_p(first, probs[x0]) >= P_VALUE_FLOOR
        pairs = torch.bincount(seqs[:, 0] * vocab + seqs[:, 1], minlength=vocab * vocab)
        joint = (probs[x0].unsqueeze(1) * probs).reshape(-1)
        assert chi_square_p(pairs, joint) >= P_VALUE_FLOOR


def check_residual_draw(du: ModuleType, device: str) -> None:
    """The residual draw over a large vocabulary (two-level inverse CDF) follows the weights, never 0s."""
    gen = torch.Generator().manual_seed(11)
    vocab, rows = 8192, 4000  # 8 blocks of 1024: the two-level path
    support = torch.randperm(vocab, generator=gen)[:12]  # spread over many 1024-token blocks
    weights = torch.zeros(vocab)
    weights[support] = torch.rand(12, generator=gen) + 0.2
    batch = weights.unsqueeze(0).expand(rows, vocab).contiguous().to(device)
    index, total = du._sample_rows(batch, torch.rand(rows, generator=gen).to(device))
    index = index.cpu()
    assert torch.allclose(total.cpu().float(), weights.sum().expand(rows))
    assert bool((weights[index] > 0).all())
    counts = torch.bincount(index, minlength=vocab)[support]
    assert chi_square_p(counts, weights[support] / weights.sum()) >= P_VALUE_FLOOR
    # Extreme coins, 1.0 included (outside [0, 1), as rounding can produce): only positive weights.
    edge = du._sample_rows(batch[:3], torch.tensor([0.0, 1.0 - 2**-24, 1.0]).to(device))[0].cpu()
    assert edge.tolist() == [int(support.min()), int(support.max()), int(support.max())]


def check_sampling_matches_greedy_on_one_hot(du: ModuleType, device: str) -> None:
    gen = torch.Generator().manual_seed(7)
    lp = torch.randn(32, 5, 6, generator=gen).log_softmax(-1).to(device)
    tree = du.build_ddtree(lp, 12, 3)
    target = torch.randint(0, 6, (32, 13), generator=gen).to(device)
    one_hot = torch.nn.functional.one_hot(target, 6).float()
    greedy = tree.verify_greedy(target)
    sampled = tree.verify_sampling(one_hot, generator=torch.Generator(device=device).manual_seed(0))
    for g, s in zip(greedy, sampled, strict=True):
        assert torch.equal(g, s)
    probs = torch.randn(32, 13, 6, generator=gen).softmax(-1).to(device)
    coins = torch.rand(32, 5, generator=gen).to(device)
    final = torch.rand(32, generator=gen).to(device)
    from_tree = tree.verify_sampling(probs, coins=coins, final_coins=final)
    generic = du.verify_sampling(
        tree.tokens, tree.parents, probs, coins=coins, final_coins=final, valid=tree.valid, max_depth=5
    )  # mask, path and depths derived from parents
    for t, g in zip(from_tree, generic, strict=True):
        assert torch.equal(t, g)


# ----------------------------------------------------------------------------------------------------
# CPU tests
# ----------------------------------------------------------------------------------------------------


def test_module_imports_only_torch_and_stdlib() -> None:
    tree = ast.parse(new_file_text(MODULE_PATH))
    roots = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
    assert roots - {"torch", "__future__"} <= set(sys.stdlib_module_names), roots


def test_public_names(du: ModuleType) -> None:
    for name in (
        "build_ddtree",
        "tree_attention_mask",
        "verify_greedy",
        "verify_sampling",
        "retrieve_arrays",
        "flatten_verify_mask",
        "accepted_rows",
        "emitted_tokens",
        "verify_positions",
        "draft_topk",
    ):
        assert callable(getattr(du, name))


def test_build_matches_bruteforce(du: ModuleType) -> None:
    check_bruteforce(du, "cpu")


def test_draft_topk(du: ModuleType) -> None:
    check_draft_topk(du, "cpu")


def test_ties_follow_documented_rule(du: ModuleType) -> None:
    check_ties(du, "cpu")


def test_masks(du: ModuleType) -> None:
    check_masks(du, "cpu")


def test_verify_matches_kernel_walk(du: ModuleType) -> None:
    check_verify_against_kernel_walk(du, "cpu")


def test_greedy_decoding_equals_plain_greedy(du: ModuleType) -> None:
    check_greedy_decoding(du, "cpu")


def test_sampling_follows_target_distribution(du: ModuleType) -> None:
    check_sampling_chi_square(du, "cpu")


def test_residual_draw_over_large_vocab(du: ModuleType) -> None:
    check_residual_draw(du, "cpu")


def test_sampling_is_greedy_on_one_hot_targets(du: ModuleType) -> None:
    check_sampling_matches_greedy_on_one_hot(du, "cpu")


def test_naive_draft_ratio_rule_is_biased_and_caught() -> None:
    """Negative control: accepting a top-1 draft with min(1, p/q) and resampling from (p - q)+ is only
    lossless for drafts sampled from q; with a deterministic draft the chi-square check must reject it.
    This is why verify_sampling treats drafts as point masses (see the module docstring)."""
    gen = torch.Generator().manual_seed(8)
    p = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.10])
    q = torch.tensor([0.50, 0.20, 0.10, 0.10, 0.10])
    draft = int(q.argmax())
    rows = 20000
    accept = torch.rand(rows, generator=gen) < min(1.0, float(p[draft] / q[draft]))
    residual = (p - q).clamp(min=0)
    fallback = torch.multinomial(residual / residual.sum(), rows, replacement=True, generator=gen)
    emitted = torch.where(accept, torch.full((rows,), draft), fallback)
    assert chi_square_p(torch.bincount(emitted, minlength=5), p) < 1e-6


def test_flatten_verify_mask(du: ModuleType) -> None:
    gen = torch.Generator().manual_seed(9)
    parents = torch.tensor([random_parents(5, gen) for _ in range(3)])
    mask = du.tree_attention_mask(parents)
    seq_lens = torch.tensor([3, 0, 7])
    flat = du.flatten_verify_mask(mask, seq_lens, int(seq_lens.sum()))
    expect: list[bool] = []
    for b in range(3):
        for i in range(6):
            expect += [True] * int(seq_lens[b]) + mask[b, i].tolist()
    assert flat.tolist() == expect


def test_layout_helpers(du: ModuleType) -> None:
    # root -> a(0) -> c(2); root -> b(1): a hand-made tree of three nodes.
    tree = du.DDTree(
        tokens=torch.tensor([[11, 12, 13]]),
        parents=torch.tensor([[-1, -1, 0]]),
        depth=torch.tensor([[1, 1, 2]]),
        scores=torch.tensor([[-0.1, -0.2, -0.3]]),
        valid=torch.tensor([[True, True, True]]),
        mask=du.tree_attention_mask(torch.tensor([[-1, -1, 0]])),
        max_depth=2,
    )
    assert du.verify_input_ids(tree, torch.tensor([10])).tolist() == [[10, 11, 12, 13]]
    assert du.verify_positions(tree, torch.tensor([100])).tolist() == [[100, 101, 101, 102]]
    index, nxt, sib = du.retrieve_arrays(tree.parents)
    assert index.tolist() == [[0, 1, 2, 3]]
    assert (nxt.tolist(), sib.tolist()) == ([[1, 3, -1, -1]], [[-1, 2, -1, -1]])
    # Target after root says 11 (a), after a says 13 (c), after c says 99.
    accept_len, accept_idx, bonus = tree.verify_greedy(torch.tensor([[11, 13, 0, 99]]))
    assert (accept_len.tolist(), accept_idx.tolist(), bonus.tolist()) == ([2], [[0, 2]], [99])
    assert du.accepted_rows(accept_idx, 4).tolist() == [[0, 1, 3]]
    assert du.emitted_tokens(tree.tokens, accept_len, accept_idx, bonus).tolist() == [[11, 13, 99]]
    accept_len, accept_idx, bonus = tree.verify_greedy(torch.tensor([[12, 0, 0, 0]]))
    assert du.accepted_rows(accept_idx, 4).tolist() == [[0, 2, -1]]
    assert du.emitted_tokens(tree.tokens, accept_len, accept_idx, bonus).tolist() == [[12, 0, -1]]


def test_bad_static_arguments(du: ModuleType) -> None:
    with pytest.raises(ValueError, match="budget, topk and depth"):
        du.build_ddtree(torch.zeros(1, 2, 5), 0, 2)
