"""Offline acceptance of the pair: what DFLASH (a chain) and DDTREE (a tree) accept on held-out prompts.

For each prompt and its greedy continuation by the target, every possible verify step is scored at once:
the drafter drafts the block at each anchor a (the position of the last verified token), the chain takes
each depth's argmax, the tree is built by the project's own `ddtree_utils.build_ddtree` (the code the
server runs, read from patches/), and greedy verification accepts the longest drafted path that equals
the target's continuation. Then decoding is replayed exactly as the server counts it: the first token
comes from prefill, each step emits accepted + 1 tokens (capped at max_new_tokens), and
`spec_accept_length` = completion tokens / verify steps (SGLang's tokenizer_manager). That is the figure
the served runs report, so the two can be put side by side.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from benchmarks.pair.modeling import Drafter, Target

CHAIN = "dflash"


@cache
def ddtree_utils() -> ModuleType:
    """ddtree_utils as the patch series writes it (tests.sglang_sources: a temporary package)."""
    root = Path(__file__).resolve().parents[2]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from tests.sglang_sources import import_new_module

    return import_new_module("sglang/srt/speculative/ddtree_utils.py")


@dataclass(frozen=True)
class Method:
    name: str
    budget: int = 0  # 0: the DFlash chain
    topk: int = 4


def methods(budgets: Sequence[int], topk: int) -> list[Method]:
    return [Method(CHAIN)] + [Method(f"ddtree-{b}", b, topk) for b in budgets]


@torch.no_grad()
def draft_logprobs(target: Target, drafter: Drafter, ids: torch.Tensor, anchors: torch.Tensor, block: int):
    """log-softmax of the drafter's guesses [n, block-1, V] (float32) for the blocks at `anchors` of ids [T].

    The scores the DDTREE worker ranks: the target's LM head over the drafter's hidden states, at
    temperature 1 (ddtree_utils.vocab_topk_logsumexp); the chain is their argmax.
    """
    seq = ids.unsqueeze(0)
    _, features = target.features(seq, drafter.cfg.target_layer_ids)
    hidden = drafter(target.embed_tokens, features, seq, anchors, block)[0, :, 1:]
    return torch.log_softmax(target.lm_head(hidden).float(), dim=-1)


def chain_accepts(logprobs: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
    """Accepted drafts per anchor [n]: the leading run of depths whose argmax equals the target's token.

    future [n, D]: the target's tokens after each anchor (-1 past the end: never accepted).
    """
    hit = logprobs.argmax(dim=-1) == future
    return hit.int().cumprod(dim=1).sum(dim=1)


def tree_accepts(logprobs: torch.Tensor, future: torch.Tensor, budget: int, topk: int) -> torch.Tensor:
    """Accepted drafts per anchor [n] for a DDTree of `budget` nodes, by ddtree_utils' greedy walk."""
    utils = ddtree_utils()
    tree = utils.build_ddtree(logprobs, budget, topk)
    depth = tree.verify_depth  # [n, N]: row 0 the root (depth 0)
    # The target's argmax after a verify row of depth d on the true path is future[d]; rows off the path
    # can only lead to children that are never accepted (an ancestor missed), so any value serves there.
    padded = torch.cat([future, future.new_full((future.shape[0], 1), -1)], dim=1)
    target_argmax = padded.gather(1, depth.clamp(max=padded.shape[1] - 1))
    accept_len, _, _ = tree.verify_greedy(target_argmax)
    return accept_len


def replay(accepts: torch.Tensor, prompt_len: int, max_new: int) -> tuple[int, int]:
    """(completion tokens, verify steps) of decoding; accepts[i]: drafts accepted at anchor prompt_len + i."""
    accepts = accepts.tolist()
    generated, steps, pos = 1, 0, prompt_len
    while generated < max_new:
        got = accepts[pos - prompt_len]
        generated += min(got + 1, max_new - generated)
        steps += 1
        pos += got + 1
    return generated, steps


def acceptance(
    target: Target,
    drafter: Drafter,
    sequences: Sequence[tuple[list[int], list[int]]],
    block: int,
    how: Sequence[Method],
) -> dict[str, dict[str, float]]:
    """Per method: mean per-request accept length (as the bench averages it), and tokens/steps overall.

    sequences: (prompt ids, the target's greedy continuation); max_new_tokens = the continuation's length.
    """
    device = next(target.parameters()).device
    totals = {m.name: {"per_request": [], "tokens": 0, "steps": 0} for m in how}
    depth = block - 1
    for prompt, continuation in sequences:
        ids = torch.tensor(prompt + continuation, device=device)
        p, new = len(prompt), len(continuation)
        anchors = torch.arange(p, p + new, device=device)
        logprobs = draft_logprobs(target, drafter, ids, anchors, block)
        ahead = torch.cat([ids, ids.new_full((depth,), -1)])
        future = torch.stack([ahead[anchors + d] for d in range(1, depth + 1)], dim=1)
        for m in how:
            if m.budget == 0:
                accepts = chain_accepts(logprobs, future)
            else:
                accepts = tree_accepts(logprobs, future, m.budget, m.topk)
            tokens, steps = replay(accepts.cpu(), p, new)
            totals[m.name]["per_request"].append(tokens / steps)
            totals[m.name]["tokens"] += tokens
            totals[m.name]["steps"] += steps
    return {
        name: {
            "accept_length": sum(t["per_request"]) / len(t["per_request"]),
            "tokens_per_step": t["tokens"] / t["steps"],
        }
        for name, t in totals.items()
    }
