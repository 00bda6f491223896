"""Plain float32 greedy from a paired_step prompt, and the top-1 minus top-2 logit at one position (CPU ok).

    python -m benchmarks.pair.replay_gap --pair DIR --context 1024 --at 30 [--expect 40,42] [--device cpu]
                                         [--path-dtype bfloat16] [--force 29:556 ...]

Why: a paired_step run recorded before its outputs were kept says only "first differ at token N (A x, B y)".
The prompt is rebuilt as paired_step builds it (profile_step.prompt_of: the pair's eval prompts one after
another, cut to the context), the rig's target (float32) decodes N + 1 tokens greedily with its KV cache,
and at token N the top-2 tokens and their gap are read twice: from the incremental decode's logits and from
one full forward over prompt + tokens 0..N-1 (near_tie.logit_gap, what paired_step and summarize use).
With --expect x,y it says whether token N is x or y with the other second (only then does the gap stand for
the servers' difference: float32 may have left the bf16 servers' path earlier; the smallest gap on the way
is printed too). --path-dtype bfloat16 decodes the path in bf16 (the weights' own dtype, as the servers
compute; another device's kernels still round otherwise) and reads the gap on it in float32, as before.
--force I:T puts token T at index I of the path instead of the greedy choice (the runner-up at a near-tie
on the way: is that where the servers went?).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.pair import near_tie, profile_step, serve_bench


def replay(
    pair: Path,
    context: int,
    at: int,
    device: str,
    path_dtype: str = "float32",
    force: dict[int, int] | None = None,
) -> dict[str, Any]:
    """Greedy decode of at + 1 tokens from the context's prompt in `path_dtype` (`force`: index -> token
    taken there instead), its top-2 and gap at every step; at token `at` also the float32 target's top-2
    and gap on that path (one full forward)."""
    force = force or {}
    import copy

    import torch

    from benchmarks.pair.modeling import KVCache

    prompts, _ = serve_bench.eval_prompts(pair)
    prompt = profile_step.prompt_of(prompts, context)
    target = near_tie.load_target(pair, device)
    dtype = getattr(torch, path_dtype)
    decoder = target if dtype == torch.float32 else copy.deepcopy(target).to(dtype)
    start = time.monotonic()
    cache = KVCache(target.cfg, 1, len(prompt) + at + 1, torch.device(device), dtype)
    tokens: list[int] = []
    steps: list[dict[str, Any]] = []
    with torch.no_grad():
        logits, _ = decoder(torch.tensor([prompt], device=device), cache=cache)
        for _ in range(at + 1):
            steps.append(near_tie.top_two(logits[0, -1]))
            tokens.append(force.get(len(tokens), steps[-1]["top"][0]))
            if len(tokens) <= at:
                logits, _ = decoder(torch.tensor([[tokens[-1]]], device=device), cache=cache)
    decode_s = time.monotonic() - start
    full = near_tie.logit_gap(target, prompt + tokens[:at], device)
    before = min(range(at), key=lambda i: steps[i]["gap"]) if at else None
    return {
        "context": context, "prompt_tokens": len(prompt), "prompt_sha256": near_tie.ids_digest(prompt),
        "at": at, "path_dtype": path_dtype, "forced": {str(i): t for i, t in sorted(force.items())},
        "tokens": tokens,
        "incremental": steps[at],
        "full_forward": full,
        "smallest_gap_before": None if before is None else {"at": before, **steps[before]},
        "decode_s": round(decode_s, 1), "seconds": round(time.monotonic() - start, 1), "device": device,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, required=True)
    ap.add_argument("--context", type=int, required=True, help="the paired_step context (prompt length)")
    ap.add_argument("--at", type=int, required=True, help="the token index where the servers first differed")
    ap.add_argument("--expect", help="the two servers' tokens there, x,y")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--path-dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--force", action="append", default=[], help="I:T, token T at index I of the path")
    args = ap.parse_args(argv)
    try:
        force = {int(i): int(t) for i, t in (f.split(":") for f in args.force)}
    except ValueError:
        print(f"replay_gap: --force {args.force}: give I:T, two integers", file=sys.stderr)
        return 2
    try:
        expect = sorted(int(t) for t in args.expect.split(",")) if args.expect else None
    except ValueError:
        expect = []
    if expect is not None and len(expect) != 2:
        print(f"replay_gap: --expect {args.expect!r}: give x,y, the two servers' tokens", file=sys.stderr)
        return 2
    if args.context < 1 or args.at < 0 or not all(0 <= i < args.at for i in force):
        print(
            "replay_gap: --context at least 1, --at at least 0, --force I:T with 0 <= I < --at",
            file=sys.stderr,
        )
        return 2
    result = replay(args.pair, args.context, args.at, args.device, args.path_dtype, force)
    if expect is not None:
        result["matches_expected"] = sorted(result["full_forward"]["top"]) == expect
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
