"""The Triton backend's target-verify attention with DDTree's tree mask, against plain masked softmax.

Calls SGLang 0.5.13.post1's extend_attention_fwd exactly as TritonAttnBackend.forward_extend does for
TARGET_VERIFY (prefix K/V read from the pool through kv_indices, the N tree tokens' K/V as the extend part,
causal flag on, custom_mask + mask_indptr laid out per request as N rows x (prefix + N) columns), with the
mask from ddtree_utils.flatten_verify_mask of a real best-first tree. Eager, and captured in a CUDA graph
whose
mask lives in a persistent uint8 buffer that is refilled before each replay (what the backend's
_update_target_verify_buffers does), replayed on new inputs and a new tree.

Needs a CUDA GPU and the patched sglang on the path (the device recipe installs it into /tmp/site).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
extend_attention = pytest.importorskip("sglang.srt.layers.attention.triton_ops.extend_attention")
ddtree_utils = pytest.importorskip("sglang.srt.speculative.ddtree_utils")

HEADS, KV_HEADS, HEAD_DIM = 8, 2, 64
BUDGET, TOPK, DEPTH, VOCAB = 8, 4, 7, 50


def _tree(bs: int, gen: torch.Generator):
    logp = torch.log_softmax(torch.randn(bs, DEPTH, VOCAB, generator=gen, device="cuda") * 3, dim=-1)
    return ddtree_utils.build_ddtree(logp, BUDGET, TOPK)


def _reference(q, k_prefix, v_prefix, k_ext, v_ext, seq_lens, tree_mask, sm_scale):
    """Masked softmax attention per request: prefix all visible, tree block = ancestor-or-self."""
    size = BUDGET + 1
    outs = []
    start = 0
    for b, prefix in enumerate(seq_lens.tolist()):
        qs = q[b * size : (b + 1) * size].float()  # [N, H, D]
        ks = torch.cat([k_prefix[start : start + prefix], k_ext[b * size : (b + 1) * size]]).float()
        vs = torch.cat([v_prefix[start : start + prefix], v_ext[b * size : (b + 1) * size]]).float()
        start += prefix
        ks = ks.repeat_interleave(HEADS // KV_HEADS, dim=1)
        vs = vs.repeat_interleave(HEADS // KV_HEADS, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qs, ks) * sm_scale
        allow = torch.ones(size, prefix + size, dtype=torch.bool, device=q.device)
        allow[:, prefix:] = tree_mask[b]
        scores = scores.masked_fill(~allow.unsqueeze(0), float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vs))
    return torch.cat(outs)


class _Case:
    """Fixed-shape buffers for one batch (what a CUDA graph needs), refilled by `fill`."""

    def __init__(self, seq_lens: list[int]):
        self.bs = len(seq_lens)
        self.size = BUDGET + 1
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
        total_prefix = sum(seq_lens)
        pool = total_prefix + 64
        self.k_buffer = torch.zeros(pool, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        self.v_buffer = torch.zeros_like(self.k_buffer)
        self.kv_indices = torch.randperm(pool, device="cuda")[:total_prefix].to(torch.int64)
        self.kv_indptr = torch.zeros(self.bs + 1, dtype=torch.int32, device="cuda")
        self.kv_indptr[1:] = torch.cumsum(self.seq_lens, 0)
        n = self.bs * self.size
        self.qo_indptr = torch.arange(0, n + 1, self.size, dtype=torch.int32, device="cuda")
        self.mask_indptr = torch.zeros(self.bs + 1, dtype=torch.int64, device="cuda")
        self.mask_indptr[1:] = torch.cumsum(self.size * (self.seq_lens.long() + self.size), 0)
        self.mask_buffer = torch.zeros(int(self.mask_indptr[-1]) + 128, dtype=torch.uint8, device="cuda")
        self.q = torch.empty(n, HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        self.k = torch.empty(n, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        self.v = torch.empty_like(self.k)
        self.o = torch.empty_like(self.q)
        self.total_prefix = total_prefix

    def fill(self, gen: torch.Generator):
        tree = _tree(self.bs, gen)
        for t in (self.q, self.k, self.v):
            t.copy_(torch.randn(t.shape, generator=gen, device="cuda").to(t.dtype))
        prefix_k = torch.randn(self.total_prefix, KV_HEADS, HEAD_DIM, generator=gen, device="cuda")
        prefix_v = torch.randn(self.total_prefix, KV_HEADS, HEAD_DIM, generator=gen, device="cuda")
        self.k_buffer[self.kv_indices] = prefix_k.to(torch.bfloat16)
        self.v_buffer[self.kv_indices] = prefix_v.to(torch.bfloat16)
        flat = ddtree_utils.flatten_verify_mask(tree.mask, self.seq_lens, int(self.seq_lens.sum()))
        self.mask_buffer[: flat.numel()] = flat  # the backend's uint8 graph buffer, refilled per replay
        self.flat_mask = flat  # what the eager path passes (spec_info.custom_mask, bool)
        return tree, self.k_buffer[self.kv_indices], self.v_buffer[self.kv_indices]

    def run(self, mask=None):
        extend_attention.extend_attention_fwd(
            self.q, self.k, self.v, self.o, self.k_buffer, self.v_buffer,
            self.qo_indptr, self.kv_indptr, self.kv_indices,
            self.mask_buffer if mask is None else mask, True, self.mask_indptr,
            self.size, 1.0, 1.0, HEAD_DIM**-0.5,
        )  # fmt: skip


def _check(case: _Case, tree, k_prefix, v_prefix) -> float:
    ref = _reference(case.q, k_prefix, v_prefix, case.k, case.v, case.seq_lens, tree.mask, HEAD_DIM**-0.5)
    err = (case.o.float() - ref).abs().max().item()
    assert err < 2e-2, f"max abs error {err}"
    return err


@pytest.mark.parametrize("seq_lens", [[1, 37, 300], [64], [5, 5, 2000, 17]])
def test_tree_mask_attention_matches_reference_eager(seq_lens: list[int]) -> None:
    gen = torch.Generator(device="cuda").manual_seed(7)
    case = _Case(seq_lens)
    tree, kp, vp = case.fill(gen)
    case.run(mask=case.flat_mask)
    _check(case, tree, kp, vp)


def test_tree_mask_changes_the_output() -> None:
    """Control: with the mask ignored (all True) the result differs, so the test can see a lost mask."""
    gen = torch.Generator(device="cuda").manual_seed(8)
    case = _Case([9, 40])
    tree, kp, vp = case.fill(gen)
    case.mask_buffer.fill_(1)
    case.run()
    ref = _reference(case.q, kp, vp, case.k, case.v, case.seq_lens, tree.mask, HEAD_DIM**-0.5)
    assert (case.o.float() - ref).abs().max().item() > 0.1


def test_tree_mask_attention_matches_reference_in_a_cuda_graph() -> None:
    gen = torch.Generator(device="cuda").manual_seed(9)
    case = _Case([3, 120, 777])
    case.fill(gen)
    case.run()  # warm-up (Triton compiles outside the capture)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        case.run()
    for _ in range(3):
        tree, kp, vp = case.fill(gen)  # new q/k/v, prefix and tree; same buffers
        graph.replay()
        torch.cuda.synchronize()
        _check(case, tree, kp, vp)
