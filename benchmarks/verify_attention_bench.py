"""Target-verify attention time against context on a GPU: SGLang's extend kernel, the split-KV kernel, decode.

    python benchmarks/verify_attention_bench.py [--bs 1 8 32] [--contexts 256 1024 4096 8192 16384 32768]
        [--shape pair|kimi-tp8] [--tokens 17] [--bandwidth-gbs 4800] [--splits 8 16 32 64] [--json FILE]

Needs the patched SGLang on the path (tests/gpu/README.md: /tmp/site after device_ddtree.sh applied the
series). Every request of a row has the full context as its prefix and a DDTree tree of --tokens nodes
(17: DDTREE-16). Columns, microseconds per call replayed from a CUDA graph (what the server runs):
  old       extend_attention_fwd, the 0.5.13.post1 verify kernel (grid: requests x heads x query blocks)
  new       verify_attention_fwd, patch ddtree-splitkv-verify (prefix split over programs, then a merge)
  speedup   old / new
  decode    decode_attention_fwd for one token per request at the same context, 8 KV splits (the server's
            triton_attention_num_kv_splits default): what a plain decode step pays for attention
  roofline  the prefix's K and V bytes read once at --bandwidth-gbs
  new/roof  new / roofline
The outputs of old and new are compared at every row (bf16; a difference over 0.02 stops the run).
--splits also times the new kernel at those fixed prefix split counts (JSON "new_at_splits", one line per
row): the default count (verify_num_kv_splits: about 2 programs per SM) is a guess to check against them.
Shapes: pair = benchmarks/pair's target (4 query heads, 2 KV heads, dim 64); kimi-tp8 = Kimi K2.6's MLA
at TP 8 (8 heads, one latent KV head of 576, values its first 512).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.gpu_timing import time_graph
from tests.verify_attention_cases import VerifyCase, make_case

SHAPES = {
    "pair": dict(heads=4, kv_heads=2, head_dim=64),
    "kimi-tp8": dict(heads=8, kv_heads=1, head_dim=576, v_head_dim=512, mla=True),
}
DECODE_KV_SPLITS = 8
MAX_DIFFERENCE = 0.02
COLUMNS = ("bs", "context", "old", "new", "speedup", "decode", "roofline", "new/roof")


def _output(case: VerifyCase) -> torch.Tensor:
    return torch.empty(
        case.q.shape[0], case.q.shape[1], case.v_extend.shape[-1], dtype=case.q.dtype, device=case.q.device
    )


def is_mla(case: VerifyCase) -> bool:
    """SGLang's MLA pool: the value buffer is a view of the key buffer's first channels."""
    return case.v_buffer.data_ptr() == case.k_buffer.data_ptr()


def run_old(case: VerifyCase) -> torch.Tensor:
    from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd

    args = list(case.kernel_args())
    args[3] = _output(case)
    extend_attention_fwd(*args, 1.0, 1.0, case.sm_scale, case.logit_cap)
    return args[3]


def run_new(case: VerifyCase, num_kv_splits: int | None = None) -> torch.Tensor:
    from sglang.srt.layers.attention.triton_ops.verify_attention import verify_attention_fwd

    args = list(case.kernel_args())
    args[3] = _output(case)
    sm_count = torch.cuda.get_device_properties(case.q.device).multi_processor_count
    verify_attention_fwd(
        *args, 1.0, 1.0, case.sm_scale, case.logit_cap, sm_count=sm_count, num_kv_splits=num_kv_splits
    )
    return args[3]


def run_decode(case: VerifyCase) -> torch.Tensor:
    """One query token per request over the same prefix: SGLang's split-KV decode attention."""
    from sglang.srt.layers.attention.triton_ops.decode_attention import decode_attention_fwd

    bs, heads, lv = case.kv_indptr.shape[0] - 1, case.q.shape[1], case.v_extend.shape[-1]
    q = case.q[:: case.num_draft_tokens].contiguous()
    out = torch.empty(bs, heads, lv, dtype=q.dtype, device=q.device)
    logits = torch.empty(bs, heads, DECODE_KV_SPLITS, lv, dtype=torch.float32, device=q.device)
    lse = torch.empty(bs, heads, DECODE_KV_SPLITS, dtype=torch.float32, device=q.device)
    splits = torch.full((bs,), DECODE_KV_SPLITS, dtype=torch.int32, device=q.device)
    decode_attention_fwd(
        q, case.k_buffer, case.v_buffer, out, case.kv_indptr, case.kv_indices, logits, lse, splits,
        DECODE_KV_SPLITS, case.sm_scale, 1.0, 1.0, has_mla=is_mla(case),
    )  # fmt: skip
    return out


def measure_row(
    bs: int, context: int, shape: str, tokens: int, bandwidth_gbs: float, splits: tuple[int, ...] = ()
) -> dict:
    """One table row; raises when old and new outputs differ by more than MAX_DIFFERENCE."""
    case = make_case(
        [context] * bs,
        block="tree",
        num_draft_tokens=tokens,
        dtype=torch.bfloat16,
        device="cuda",
        **SHAPES[shape],
    )
    difference = (run_new(case).float() - run_old(case).float()).abs().max().item()
    if difference > MAX_DIFFERENCE:
        raise SystemExit(f"bs {bs} context {context}: split-KV and extend outputs differ by {difference}")
    channels = case.k_buffer.shape[2] + (0 if is_mla(case) else case.v_buffer.shape[2])  # MLA: one latent
    kv_bytes = bs * context * case.k_buffer.shape[1] * channels * 2
    old, new, decode = (time_graph(lambda fn=fn: fn(case)) for fn in (run_old, run_new, run_decode))
    roofline = kv_bytes / (bandwidth_gbs * 1e9) * 1e6
    return {
        "bs": bs,
        "context": context,
        "old": old,
        "new": new,
        "speedup": old / new,
        "decode": decode,
        "roofline": roofline,
        "new/roof": new / roofline,
        "max_difference": difference,
        "new_at_splits": {count: time_graph(lambda count=count: run_new(case, count)) for count in splits},
    }


def format_table(rows: list[dict], shape: str, tokens: int) -> str:
    lines = [f"verify attention, {shape} ({SHAPES[shape]}), {tokens} draft tokens, CUDA graph, microseconds:"]
    lines.append(" ".join(f"{name:>9}" for name in COLUMNS))
    for row in rows:
        cells = [f"{row['bs']:>9}", f"{row['context']:>9}"]
        cells += [f"{row[name]:>9.1f}" for name in ("old", "new")]
        cells += [f"{row['speedup']:>8.2f}x", f"{row['decode']:>9.1f}", f"{row['roofline']:>9.1f}"]
        cells += [f"{row['new/roof']:>8.1f}x"]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bs", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 4096, 8192, 16384, 32768])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="pair")
    parser.add_argument("--tokens", type=int, default=17, help="draft tokens per request (17: DDTREE-16)")
    parser.add_argument("--bandwidth-gbs", type=float, default=4800.0, help="HBM bandwidth (H200: 4800)")
    parser.add_argument(
        "--splits", type=int, nargs="*", default=[], help="also time these fixed split counts"
    )
    parser.add_argument("--json", type=Path, help="write the rows here as JSON")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("verify_attention_bench: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    for bs in args.bs:
        for context in args.contexts:
            row = measure_row(bs, context, args.shape, args.tokens, args.bandwidth_gbs, tuple(args.splits))
            rows.append(row)
            print(format_table([row], args.shape, args.tokens).splitlines()[-1], flush=True)
            if row["new_at_splits"]:
                fixed = ", ".join(f"{count}: {us:.1f}" for count, us in row["new_at_splits"].items())
                print(f"          new at fixed split counts (us): {fixed}", flush=True)
    print(format_table(rows, args.shape, args.tokens))
    if args.json:
        scratch = args.json.with_name(args.json.name + ".partial")
        scratch.write_text(json.dumps({"shape": args.shape, "tokens": args.tokens, "rows": rows}, indent=1))
        scratch.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
