"""Is a first difference between two greedy outputs a near-tie? The rig's float32 target decides.

A verify pass (a block or a tree) and a decode step do not round bf16 alike, so where the target's top-1
and top-2 logits nearly tie, two servers may pick different tokens. At a first difference the two outputs
share the prompt and everything before it, so the float32 target's top-1 minus top-2 logit on that common
prefix says whether the flip is bf16 noise (gap <= NEAR_TIE) or a bug. Shared by summarize (serve runs)
and paired_step (two servers up at once) so both judge with the same code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddtree.smoke import check as smoke

NEAR_TIE = smoke.NEAR_TIE_GAP  # the stress mode's rule for a first difference from plain decoding


def load_target(pair: Path, device: str):
    """The pair's target in float32 (its bf16 weights widened), eval mode, on `device`."""
    from benchmarks.pair.modeling import Target, TargetConfig, load_weights

    cfg = json.loads((pair / "target" / "config.json").read_text())
    target = Target(TargetConfig(**{k: cfg[k] for k in TargetConfig.__dataclass_fields__}))
    load_weights(target, pair / "target", prefix="model.")
    return target.float().to(device).eval()


def load_pair(pair: Path, device: str):
    """(target, drafter) of a trained pair's folder, in eval mode on `device`."""
    from benchmarks.pair.modeling import Drafter, DrafterConfig, load_weights

    target = load_target(pair, device)
    cfg_d = json.loads((pair / "drafter" / "config.json").read_text())
    dflash = cfg_d["dflash_config"]
    drafter_cfg = DrafterConfig(
        num_hidden_layers=cfg_d["num_hidden_layers"],
        block_size=dflash["block_size"],
        target_layer_ids=tuple(dflash["target_layer_ids"]),
        mask_token_id=dflash["mask_token_id"],
    )
    drafter = Drafter(target.cfg, drafter_cfg)
    load_weights(drafter, pair / "drafter", prefix="")
    return target, drafter.to(device).eval()


def first_difference_at(a: list[int], b: list[int]) -> int | None:
    """The first index where two outputs hold different tokens (or one has ended); None when equal."""
    index = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if index is None and len(a) != len(b):
        return min(len(a), len(b))
    return index


def top_two(row) -> dict[str, Any]:
    """One position's logits: its top-2 tokens, the top-1 minus top-2 logit `gap` (float32) and whether
    that is a near-tie."""
    top = row.float().topk(2)
    gap = round(float(top.values[0] - top.values[1]), 4)
    return {"gap": gap, "top": [int(t) for t in top.indices], "near_tie": gap <= NEAR_TIE}


def logit_gap(target, ids: list[int], device: str) -> dict[str, Any]:
    """The target's next-token choice after `ids` (one forward over all of them), as top_two reads it."""
    import torch

    with torch.no_grad():
        logits, _ = target(torch.tensor([ids], device=device))
    return top_two(logits[0, -1])


def ids_digest(ids: list[int]) -> str:
    """sha256 of a token list (its JSON): recorded with a prompt so a later replay can show it rebuilt the
    very prompt the servers were sent."""
    import hashlib

    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()
