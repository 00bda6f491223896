"""Target-verify attention cases and their torch reference, shared by the CPU and GPU tests.

A case is what SGLang's Triton backend hands its verify attention: the KV pool (prefix tokens at
scattered pool slots through kv_indptr/kv_indices), the draft tokens' own K/V (the extend part), N query
tokens per request and the flat uint8 custom mask (per request N rows of prefix + N, prefix columns
true) or none (causal or full block). Only torch at import time: the kernels come from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class VerifyCase:
    q: torch.Tensor  # [bs*N, H, Lq]
    k_extend: torch.Tensor  # [bs*N, Hkv, Lq]
    v_extend: torch.Tensor  # [bs*N, Hkv, Lv]
    k_buffer: torch.Tensor  # [pool, Hkv, Lq]
    v_buffer: torch.Tensor  # [pool, Hkv, Lv]
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    custom_mask: torch.Tensor | None  # flat uint8
    mask_indptr: torch.Tensor
    block_masks: list[torch.Tensor]  # per request [N, N] bool: what the reference lets each query see
    is_causal: bool
    num_draft_tokens: int
    sm_scale: float
    logit_cap: float = 0.0

    def kernel_args(self) -> tuple:
        """Positional arguments of extend_attention_fwd / verify_attention_fwd up to max_len_extend."""
        return (
            self.q,
            self.k_extend,
            self.v_extend,
            None,
            self.k_buffer,
            self.v_buffer,
            self.qo_indptr,
            self.kv_indptr,
            self.kv_indices,
            self.custom_mask,
            self.is_causal,
            self.mask_indptr,
            self.num_draft_tokens,
        )


def tree_block_masks(bs: int, size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Random trees: a node's parent is an earlier node; the mask is ancestor-or-self (lower-triangular)."""
    masks = []
    for _ in range(bs):
        mask = torch.eye(size, dtype=torch.bool)
        for node in range(1, size):
            parent = int(torch.randint(0, node, (1,), generator=generator))
            mask[node] |= mask[parent]
        masks.append(mask)
    return masks


def make_case(
    prefix_lens: list[int],
    *,
    heads: int,
    kv_heads: int,
    head_dim: int,
    num_draft_tokens: int,
    block: str,
    v_head_dim: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
    logit_cap: float = 0.0,
    mla: bool = False,
) -> VerifyCase:
    """block: "tree" (custom mask, random trees), "causal_mask" (custom mask, causal block: DFLASH),
    "causal" (no mask, is_causal), "full" (no mask, not causal: the drafter's bidirectional block).
    mla: the value buffer is the first v_head_dim channels of the key buffer (SGLang's MLA pool)."""
    gen = torch.Generator().manual_seed(seed)
    bs, size = len(prefix_lens), num_draft_tokens
    v_head_dim = v_head_dim or head_dim
    total_prefix = sum(prefix_lens)
    pool = total_prefix + bs * size + 7

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype)

    k_buffer = rand(pool, kv_heads, head_dim)
    v_buffer = rand(pool, kv_heads, v_head_dim)
    slots = torch.randperm(pool, generator=gen)[:total_prefix]  # scattered pool slots, as a real KV pool
    q = rand(bs * size, heads, head_dim)
    k_extend, v_extend = rand(bs * size, kv_heads, head_dim), rand(bs * size, kv_heads, v_head_dim)
    if mla:
        v_extend = k_extend[..., :v_head_dim].contiguous()
    lens = torch.tensor(prefix_lens, dtype=torch.long)
    qo_indptr = (torch.arange(bs + 1) * size).to(torch.int32)
    kv_indptr = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)]).to(torch.int32)
    mask_indptr = torch.cat([torch.zeros(1, dtype=torch.long), (size * (lens + size)).cumsum(0)])

    causal = torch.tril(torch.ones(size, size, dtype=torch.bool))
    if block == "tree":
        block_masks = tree_block_masks(bs, size, gen)
    elif block in ("causal_mask", "causal"):
        block_masks = [causal] * bs
    elif block == "full":
        block_masks = [torch.ones(size, size, dtype=torch.bool)] * bs
    else:
        raise ValueError(f"unknown block kind {block!r}: tree, causal_mask, causal or full")
    custom_mask = None
    if block in ("tree", "causal_mask"):
        rows = []
        for prefix, mask in zip(prefix_lens, block_masks, strict=True):
            rows.append(torch.cat([torch.ones(size, prefix, dtype=torch.bool), mask], dim=1).reshape(-1))
        custom_mask = torch.cat(rows).to(torch.uint8)

    def put(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(device)

    k_buffer = put(k_buffer)
    return VerifyCase(
        q=put(q),
        k_extend=put(k_extend),
        v_extend=put(v_extend),
        k_buffer=k_buffer,
        v_buffer=k_buffer[..., :v_head_dim] if mla else put(v_buffer),
        qo_indptr=put(qo_indptr),
        kv_indptr=put(kv_indptr),
        kv_indices=put(slots.to(torch.int64)),
        custom_mask=put(custom_mask),
        mask_indptr=put(mask_indptr),
        block_masks=block_masks,
        is_causal=block != "full",
        num_draft_tokens=size,
        sm_scale=head_dim**-0.5,
        logit_cap=logit_cap,
    )


def reference(case: VerifyCase) -> torch.Tensor:
    """Masked softmax attention in float64: every prefix key visible, the block under the request's mask."""
    size = case.num_draft_tokens
    heads, kv_heads = case.q.shape[1], case.k_extend.shape[1]
    group = heads // kv_heads
    kv_indptr = case.kv_indptr.cpu().tolist()
    out = []
    for b, block_mask in enumerate(case.block_masks):
        rows = slice(b * size, (b + 1) * size)
        slots = case.kv_indices[kv_indptr[b] : kv_indptr[b + 1]]
        keys = torch.cat([case.k_buffer[slots], case.k_extend[rows]]).double().repeat_interleave(group, 1)
        values = torch.cat([case.v_buffer[slots], case.v_extend[rows]]).double().repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", case.q[rows].double(), keys) * case.sm_scale
        if case.logit_cap > 0:
            scores = case.logit_cap * torch.tanh(scores / case.logit_cap)
        prefix = len(slots)
        allow = torch.ones(size, prefix + size, dtype=torch.bool, device=scores.device)
        allow[:, prefix:] = block_mask.to(scores.device)
        probs = scores.masked_fill(~allow, float("-inf")).softmax(-1)
        out.append(torch.einsum("hqk,khd->qhd", probs, values))
    return torch.cat(out)
