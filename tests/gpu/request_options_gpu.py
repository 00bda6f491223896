"""Device `options` mode: per-row request options (patch ddtree-request-options) on CUDA.

Run by tests/gpu/device_ddtree.sh options after the series is applied to /tmp/site (not collected by pytest).
Checks, on random trees with every option on (tests/unit/request_options_probe.py's requests):
- CUDA equals CPU: tree_penalties.adjust_verify_logits and advance_penalties on both devices, same inputs;
- no host-device sync: both run under torch.cuda.set_sync_debug_mode("error");
- graph-capturable: both captured in one CUDA graph, replayed on new logits, equal to eager;
- the Triton pass (_running_penalties_kernel, the default on CUDA) bit-identical to the torch path
  (SGLANG_DDTREE_TRITON=0) on CUDA: apply_running for all 31 option combinations on random tables with ties,
  negative logits and -inf, and the whole adjust_verify_logits with every option.
- one compiled variant: after tree_penalties.warm_up_running_penalties (timed), all 32 option combinations
  at Kimi's shapes add no JIT cache entry and none of their first launches compiles.
Then times adjust_verify_logits at Kimi K2.6's vocabulary (163840), bs 32, budget 16 (N 17), float32 verify
logits, eager and replayed from a CUDA graph, for: no options, logit_bias only, every option; each with the
Triton pass and with the torch path (one table: the speed-up); beside it the greedy verify's own read of
those logits (argmax) for scale. Then the drafter's share (patch ddtree-draft-penalties): draft_adjustment
plus adjust_draft_logits with every option on bs 32 x 7 draft rows (block 8) at Kimi's vocabulary, eager,
beside the draft rows' argmax (`--device cpu` times it at a small vocabulary: the path runs, not a figure).
Prints one line per check and a table; exit 0 PASS, 1 FAIL, 2 cannot run.
`--device cpu` runs the equality part and the drafter's pass on CPU only (the unit tier's check that the
script works; no sync, graph or Triton checks, no figures).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import sys
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.gpu_timing import time_eager
from tests.unit import request_options_probe as probe

KIMI_VOCAB = 163840


def trees(seed: int, bs: int, size: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [bs, size], mask [bs, size, size]) of random trees with repeated tokens (the probe's few ids,
    EOS and a stop id among them), some padded; `vocab` only bounds them."""
    assert vocab > 13
    rng = random.Random(seed)
    pairs = [probe.random_tree(rng, size, padding=b % 3) for b in range(bs)]
    return torch.stack([t for t, _ in pairs]), torch.stack([m for _, m in pairs])


def settings_for(bs: int, every_option: bool, bias_only: bool = False) -> list[dict]:
    if bias_only:
        return [{"logit_bias": {"7": 2.0, "1234": -1.0}}] * bs
    if not every_option:
        return [{}] * bs
    return [probe.REQUEST_SETTINGS[b % len(probe.REQUEST_SETTINGS)] for b in range(bs)]


def make_batch(settings: list[dict], device: str, vocab: int, fed_steps: int, seed: int):
    batch = probe._batch([probe._request(**s) for s in settings], device=device, vocab=vocab)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(fed_steps):
        step = torch.randint(0, vocab, (len(settings),), generator=gen)
        batch.sampling_info.penalizer_orchestrator.cumulate_output_tokens(step.to(device))
    return batch


def state_tensors(batch) -> list[torch.Tensor]:
    orch = batch.sampling_info.penalizer_orchestrator
    out = []
    for pen in orch.penalizers.values():
        if pen.is_prepared():
            for name in ("cumulated_frequency_penalties", "cumulated_presence_penalties",
                         "cumulated_repetition_penalties", "len_output_tokens"):  # fmt: skip
                if hasattr(pen, name):
                    out.append(getattr(pen, name))
    return out


def one_step(batch, logits, tokens, mask, commit) -> None:
    from sglang.srt.speculative.tree_penalties import adjust_verify_logits, advance_penalties

    adjust_verify_logits(logits, batch.sampling_info, tokens, mask)
    advance_penalties(batch.sampling_info, tokens[:, :5], commit)


def equality(device: str, bs: int = 6, size: int = 17, vocab: int = 4096) -> dict:
    """The same step on `device` and on the CPU: adjusted logits and penalizer state after the advance."""
    tokens, mask = trees(11, bs, size, vocab)
    logits = torch.randn(bs * size, vocab, generator=torch.Generator().manual_seed(12)) * 3
    commit = torch.tensor([1 + b % 5 for b in range(bs)], dtype=torch.int32)
    results = {}
    for dev in ("cpu", device):
        batch = make_batch(settings_for(bs, True), dev, vocab, fed_steps=3, seed=13)
        got = logits.to(dev).clone()
        one_step(batch, got, tokens.to(dev), mask.to(dev), commit.to(dev))
        results[dev] = (got.cpu(), [t.cpu() for t in state_tensors(batch)])
    (a, sa), (b, sb) = results["cpu"], results[device]
    finite = torch.isfinite(a)
    return {
        "same_inf": bool(torch.equal(torch.isinf(a), torch.isinf(b))),
        "max_abs_diff": float((a[finite] - b[finite]).abs().max()),
        "bit_equal": bit_equal(a, b),  # reported: the gate is CUDA Triton vs CUDA torch (triton_equals_torch)
        "state_equal": len(sa) == len(sb) and all(torch.equal(x, y) for x, y in zip(sa, sb, strict=True)),
        "changed_rows": int((a != logits).any(dim=1).sum()),
    }


def no_sync_and_graph(bs: int = 8, size: int = 17, vocab: int = 32000) -> dict:
    """Eager under sync-debug "error", then one CUDA graph of the step replayed on new logits vs eager."""
    tokens, mask = trees(21, bs, size, vocab)
    tokens, mask = tokens.cuda(), mask.cuda()
    commit = torch.tensor([1 + b % 5 for b in range(bs)], dtype=torch.int32, device="cuda")
    gen = torch.Generator().manual_seed(22)
    first = (torch.randn(bs * size, vocab, generator=gen) * 3).cuda()
    second = (torch.randn(bs * size, vocab, generator=gen) * 3).cuda()
    out: dict = {}
    eager_batch = make_batch(settings_for(bs, True), "cuda", vocab, fed_steps=3, seed=23)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        eager_first = first.clone()
        one_step(eager_batch, eager_first, tokens, mask, commit)
        eager_second = second.clone()
        one_step(eager_batch, eager_second, tokens, mask, commit)
        out["no_sync"] = True
    except RuntimeError as exc:
        out["no_sync"], out["sync_error"] = False, str(exc)[:300]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    if not out["no_sync"]:
        return out
    graph_batch = make_batch(settings_for(bs, True), "cuda", vocab, fed_steps=3, seed=23)
    static = first.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    snapshot = [t.clone() for t in state_tensors(graph_batch)]
    with torch.cuda.stream(stream):  # warm-up outside the graph, then restore the state it advanced
        one_step(graph_batch, static.clone(), tokens, mask, commit)
    torch.cuda.current_stream().wait_stream(stream)
    for t, s in zip(state_tensors(graph_batch), snapshot, strict=True):
        t.copy_(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        one_step(graph_batch, static, tokens, mask, commit)
    for t, s in zip(state_tensors(graph_batch), snapshot, strict=True):
        t.copy_(s)
    static.copy_(first)
    graph.replay()
    replay_first = static.clone()
    static.copy_(second)
    graph.replay()
    torch.cuda.synchronize()
    out["graph_equal"] = bool(torch.equal(replay_first, eager_first) and torch.equal(static, eager_second))
    out["graph_state_equal"] = all(
        torch.equal(a, b) for a, b in zip(state_tensors(graph_batch), state_tensors(eager_batch), strict=True)
    )
    return out


def torch_path():
    """adjust_verify_logits on its torch ops (SGLANG_DDTREE_TRITON=0), for the reference and the table."""
    return mock.patch.dict(os.environ, {"SGLANG_DDTREE_TRITON": "0"})


def bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32)))


def triton_equals_torch(bs: int = 6, size: int = 17, vocab: int = 50021, device: str = "cuda") -> dict:
    """On CUDA: apply_running_kernel vs apply_running_torch bit for bit in every option combination (the
    kernel's real division and rounding, which the CPU interpreter cannot show), then adjust_verify_logits
    with every option, Triton pass vs SGLANG_DDTREE_TRITON=0."""
    from sglang.srt.speculative import tree_penalties as tp

    gen = torch.Generator().manual_seed(41)
    logits = torch.randn(bs * size, vocab, generator=gen) * 4
    ties = torch.rand(bs * size, vocab, generator=gen) < 0.3
    logits[ties] = torch.randint(-16, 17, (int(ties.sum()),), generator=gen).float() * 0.125
    logits[torch.rand(bs * size, vocab, generator=gen) < 0.01] = float("-inf")
    factors = torch.tensor([1.1, 0.9, 1.3, 1.05, 1.7])
    tables = {
        "frequency": torch.randint(0, 5, (bs, vocab), generator=gen).float() * 0.35,
        "presence": torch.where(torch.rand(bs, vocab, generator=gen) < 0.3, -0.6, 0.0),
        "too_short": torch.rand(bs, size, generator=gen) < 0.5,
        "stop_penalties": torch.where(torch.rand(bs, vocab, generator=gen) < 0.01, float("-inf"), 0.0),
        "repetition": torch.where(
            torch.rand(bs, vocab, generator=gen) < 0.5,
            factors[torch.randint(0, 5, (bs, vocab), generator=gen)],
            1.0,
        ),
        "logit_bias": torch.randn(bs, vocab, generator=gen),
    }
    logits, tables = logits.to(device), {name: table.to(device) for name, table in tables.items()}
    names = ("frequency", "presence", "min_new", "repetition", "logit_bias")
    unequal, combos = [], 0
    for combo in itertools.product((False, True), repeat=len(names)):
        if not any(combo):
            continue
        on = dict(zip(names, combo, strict=True))
        option = {"too_short": "min_new", "stop_penalties": "min_new"}
        chosen = {name: table if on[option.get(name, name)] else None for name, table in tables.items()}
        want, got = logits.clone(), logits.clone()
        tp.apply_running_torch(want, size, **chosen)
        tp.apply_running_kernel(got, size, **chosen)
        combos += 1
        if not bit_equal(want, got):
            unequal.append(",".join(n for n in names if on[n]))
    tokens, mask = trees(42, bs, size, vocab)
    tokens, mask = tokens.to(device), mask.to(device)
    adjusted = {}
    for path in ("triton", "torch"):
        batch = make_batch(settings_for(bs, True), device, vocab, fed_steps=3, seed=43)
        adjusted[path] = logits.clone()
        with torch_path() if path == "torch" else contextlib.nullcontext():
            tp.adjust_verify_logits(adjusted[path], batch.sampling_info, tokens, mask)
    return {
        "kernel_used": tp._kernel_applies(
            logits, {}
        ),  # adjust_verify_logits' default here is the Triton pass
        "combinations": combos,
        "unequal": unequal,
        "adjust_bit_equal": bit_equal(adjusted["triton"], adjusted["torch"]),
        "adjust_changed_rows": int((adjusted["triton"] != logits).any(dim=1).sum()),
    }


def compiled_variants() -> int:
    """Variants of _running_penalties_kernel in Triton's in-process JIT cache for the current device."""
    from sglang.srt.speculative import tree_penalties as tp

    kernel = tp._running_penalties_kernel
    device = torch.cuda.current_device()
    return len(kernel.device_caches[device][0]) if device in kernel.device_caches else 0


def one_variant(bs: int = 4, budget: int = 16, vocab: int = KIMI_VOCAB) -> dict:
    """warm_up_running_penalties compiles the kernel once (or loads it from Triton's disk cache); then every
    option combination at the served shapes launches without compiling: no new JIT cache entry (the
    slowest first launch of a combination is printed: a plain launch, not a compile of about a second)."""
    from sglang.srt.speculative import tree_penalties as tp

    size = budget + 1
    before = compiled_variants()
    start = time.monotonic()
    warmed = tp.warm_up_running_penalties("cuda", vocab, size)
    warm_up_s = time.monotonic() - start
    after_warm_up = compiled_variants()
    logits = torch.randn(bs * size, vocab, device="cuda")
    table = torch.zeros(bs, vocab, device="cuda")
    too_short = torch.zeros(bs, size, dtype=torch.bool, device="cuda")
    slowest_ms = 0.0
    for combo in itertools.product((False, True), repeat=5):
        frequency, presence, min_new, repetition, bias = combo
        torch.cuda.synchronize()
        start = time.monotonic()
        tp.apply_running_kernel(
            logits, size, frequency=table if frequency else None, presence=table if presence else None,
            too_short=too_short if min_new else None, stop_penalties=table if min_new else None,
            repetition=table if repetition else None, logit_bias=table if bias else None,
        )  # fmt: skip
        torch.cuda.synchronize()
        slowest_ms = max(slowest_ms, (time.monotonic() - start) * 1000.0)
    return {
        "warmed": warmed,
        "warm_up_s": round(warm_up_s, 3),
        "variants_before": before,
        "variants_after_warm_up": after_warm_up,
        "variants_after_32_combinations": compiled_variants(),
        "slowest_first_launch_ms": round(slowest_ms, 3),
    }


def time_ms(fn, iters: int = 50) -> float:
    return time_eager(fn, iters) / 1000.0


def timing(bs: int, budget: int, vocab: int) -> dict:
    from sglang.srt.speculative.tree_penalties import adjust_verify_logits

    size = budget + 1
    tokens, mask = trees(31, bs, size, vocab)
    tokens, mask = tokens.cuda(), mask.cuda()
    logits = torch.randn(bs * size, vocab, device="cuda") * 3
    work = logits.clone()
    out: dict = {"bs": bs, "budget": budget, "vocab": vocab}
    out["argmax_ms"] = time_ms(lambda: torch.argmax(work, dim=-1))
    for (name, every, bias), path in itertools.product(
        (("none", False, False), ("logit_bias", False, True), ("all", True, False)), ("triton", "torch")
    ):
        batch = make_batch(settings_for(bs, every, bias), "cuda", vocab, fed_steps=4, seed=32)
        info = batch.sampling_info
        key = f"{name}_{path}"
        with torch_path() if path == "torch" else contextlib.nullcontext():
            out[f"{key}_eager_ms"] = time_ms(lambda info=info: adjust_verify_logits(work, info, tokens, mask))
            work.copy_(logits)  # the adjustments compound; keep the values sane
            out[f"{key}_graph_ms"] = None
            if name != "none":  # nothing to capture without options
                graph = torch.cuda.CUDAGraph()
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    adjust_verify_logits(work, info, tokens, mask)
                torch.cuda.current_stream().wait_stream(stream)
                with torch.cuda.graph(graph):
                    adjust_verify_logits(work, info, tokens, mask)
                out[f"{key}_graph_ms"] = time_ms(graph.replay)
                work.copy_(logits)
    return out


def draft_timing(bs: int, depth: int, vocab: int, device: str) -> dict:
    """ms per call of the drafter's option pass (draft_adjustment + adjust_draft_logits, every option on) over
    bs x depth float32 draft rows, and of the rows' argmax for scale; CUDA events on CUDA, the wall clock on
    CPU. changed_rows: rows the pass moved (0 would mean it timed nothing)."""
    from sglang.srt.speculative.tree_penalties import adjust_draft_logits, draft_adjustment

    batch = make_batch(settings_for(bs, every_option=True), device, vocab, fed_steps=4, seed=33)
    roots = torch.randint(0, vocab, (bs,), generator=torch.Generator().manual_seed(34)).to(device)
    logits = torch.randn(bs * depth, vocab, generator=torch.Generator().manual_seed(35)).to(device) * 3
    work = logits.clone()

    def option_pass() -> None:
        work.copy_(logits)
        adjust_draft_logits(work, draft_adjustment(batch.sampling_info, roots, depth))

    def copy_only() -> None:
        work.copy_(logits)

    def per_call_ms(fn, iters: int = 20) -> float:
        if device == "cuda":
            return time_ms(fn, iters)
        fn()
        begin = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - begin) * 1000.0 / iters

    option_pass()
    changed = int((work != logits).any(dim=1).sum())
    copy_ms = per_call_ms(copy_only)
    return {
        "bs": bs,
        "depth": depth,
        "vocab": vocab,
        "draft_options_ms": round(max(0.0, per_call_ms(option_pass) - copy_ms), 4),
        "draft_argmax_ms": round(per_call_ms(lambda: torch.argmax(logits, dim=-1)), 4),
        "changed_rows": changed,
    }


def print_draft_timing(d: dict) -> None:
    print(
        f"draft options (ms per call, bs {d['bs']} x {d['depth']} draft rows, vocab {d['vocab']},"
        f" every option, eager): {d['draft_options_ms']:.3f}; the draft rows' argmax"
        f" {d['draft_argmax_ms']:.3f}; rows changed {d['changed_rows']} of {d['bs'] * d['depth']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("request-options: cannot run here: no CUDA device")
        return 2
    begin = time.monotonic()
    facts: dict = {"equality": equality(args.device)}
    eq = facts["equality"]
    ok = eq["same_inf"] and eq["max_abs_diff"] <= 1e-5 and eq["state_equal"] and eq["changed_rows"] > 0
    print(f"{'ok  ' if ok else 'FAIL'} {args.device} equals CPU: {eq}")
    if args.device == "cuda":
        facts["graph"] = no_sync_and_graph()
        g = facts["graph"]
        passed = g.get("no_sync") and g.get("graph_equal") and g.get("graph_state_equal")
        print(f"{'ok  ' if passed else 'FAIL'} no host sync, one CUDA graph replays like eager: {g}")
        ok = ok and bool(passed)
        facts["one_variant"] = ov = one_variant()
        passed = ov["warmed"] and ov["variants_after_warm_up"] - ov["variants_before"] <= 1
        passed = passed and ov["variants_after_32_combinations"] == ov["variants_after_warm_up"]
        print(f"{'ok  ' if passed else 'FAIL'} warm-up compiles the one variant all combinations use: {ov}")
        ok = ok and bool(passed)
        facts["triton"] = tt = triton_equals_torch()
        passed = (
            tt["kernel_used"] and not tt["unequal"] and tt["combinations"] == 31 and tt["adjust_bit_equal"]
        )
        passed = passed and tt["adjust_changed_rows"] > 0
        print(f"{'ok  ' if passed else 'FAIL'} Triton pass bit-identical to the torch path on CUDA: {tt}")
        ok = ok and bool(passed)
        facts["timing"] = t = timing(32, 16, KIMI_VOCAB)
        print(
            f"timing (ms per call, bs {t['bs']}, budget {t['budget']}, vocab {t['vocab']}, float32 logits):"
        )
        print(f"  argmax over the verify logits (greedy verify's read): {t['argmax_ms']:.3f}")
        heads = ("Triton eager", "Triton graph", "torch eager", "torch graph")
        print(f"  {'options':>10}  " + "  ".join(f"{head:>12}" for head in heads))
        for name in ("none", "logit_bias", "all"):
            cells = [
                t[f"{name}_{path}_{how}_ms"] for path in ("triton", "torch") for how in ("eager", "graph")
            ]
            texts = ["-" if ms is None else f"{ms:.3f}" for ms in cells]
            print(f"  {name:>10}  " + "  ".join(f"{text:>12}" for text in texts))
        facts["draft_timing"] = draft = draft_timing(32, 7, KIMI_VOCAB, "cuda")
        print_draft_timing(draft)
        ok = ok and draft["changed_rows"] > 0
    else:
        facts["draft_timing"] = draft = draft_timing(4, 7, 4096, "cpu")
        print_draft_timing(draft)
        ok = ok and draft["changed_rows"] > 0
    if args.json:
        args.json.write_text(json.dumps(facts, indent=1))
    print(f"request-options: {'PASS' if ok else 'FAIL'} after {time.monotonic() - begin:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
