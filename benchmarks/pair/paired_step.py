"""Two modes' decode step from two servers that run at once, measured in ABBA order (GPU device).

    python -m benchmarks.pair.paired_step --pair DIR --out OUT --paired A,B [--rounds 8] [--contexts 256,4096]

Why: on the H200 the host's speed drifts by about 25% between servers started minutes apart, so
profile_step's side-by-side tables (one server per mode, one after the other) cannot tell a 10% change from
noise (2026-12-01: `ddtree-16@torchmeta` came out slower than `@eager`, which no code difference explains).
Here the two servers run at the same time on the same GPU and take turns:
  - the same settings for both (serve_bench's for the mode, graphs for bs 1-4, --mem-fraction-static 0.2 each,
    --sleep-on-idle so the idle one does not spin a CPU core), on ports apart; each mode's step switches
    (serve_bench.step_environment_of: `@eager`, `@extend`, `@graphs`, `@meta`, `@splitkv`, `@upstream`) go
    into its own server's process environment only. B starts once A is ready: SGLang sizes its KV pool from
    the free memory it sees around its model load, which A's pool would shrink if A allocated it meanwhile;
  - per context, a warm-up request to each (its greedy output is the one compared), then `--rounds` rounds of
    four measurements A, B, B, A (profile_step.unprofiled_step_ms with one full and one one-token request
    each; no profiler): a drift linear over a round cancels in its ratio B/A = (B1 + B2) / (A1 + A2).
Reported per context: each mode's median step ms, decode tok/s and tokens per step over its 2R measurements,
the per-round ratio B/A of step ms and of tok/s (median, min, max), and where the greedy outputs first differ.
Kept with them: how the prompt was built and its sha256, and both servers' greedy outputs, so a difference
can be replayed later. After the run (both servers stopped) the rig's target in float32, on this machine's
GPU (the CPU without one), reads its top-1 minus top-2 logit at every first difference, on the prompt and
the outputs' common prefix (near_tie.logit_gap, as summarize does): at most near_tie.NEAR_TIE is a bf16
near-tie that a decode step and a verify pass round differently, above it a bug. A rig that cannot load (or
a gap that cannot be computed) is said in the table; the job does not fail for it.
Writes OUT/paired.json and OUT/paired.md (after every context); both servers are stopped at the end, also on
an error, Ctrl-C or SIGTERM. Exit 0, 1 when a context failed, 2 on bad input, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import re
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

from ddtree.fsutil import atomic_write
from ddtree.smoke import check as smoke
from ddtree.smoke import server as smoke_server

from benchmarks.pair import near_tie, profile_step, serve_bench

GRAPH_BS = ("1", "2", "4")  # only bs 1 is measured: few graphs, both servers ready sooner
MEM_FRACTION = "0.2"  # two servers on one GPU
ORDER = ("A", "B", "B", "A")
BASE_MODE = re.compile(r"none|dflash|ddtree-\d+")


def parse_modes(text: str) -> tuple[str, str]:
    """("ddtree-16@eager", "ddtree-16") from "ddtree-16@eager,ddtree-16"; ValueError saying what's wrong."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if len(modes) != 2:
        raise ValueError(f"--paired {text!r}: give two modes, A,B (e.g. ddtree-16@eager,ddtree-16)")
    for mode in modes:
        base, _ = serve_bench.split_mode(mode)  # an unknown variant: ValueError naming the known ones
        if not BASE_MODE.fullmatch(base):
            raise ValueError(
                f"--paired: unknown mode {base!r} (none, dflash or ddtree-N, with an optional @variant)"
            )
    a, b = modes
    same_server = serve_bench.server_settings(a) == serve_bench.server_settings(b)
    if a == b or (same_server and serve_bench.step_environment_of(a) == serve_bench.step_environment_of(b)):
        raise ValueError(f"--paired {text!r}: {a} and {b} start the same server; nothing to compare")
    return a, b


def parse_contexts(text: str) -> list[int]:
    try:
        contexts = [int(c) for c in text.split(",")]
    except ValueError:
        contexts = []
    if not contexts or min(contexts) < 1:
        raise ValueError(f"--contexts {text!r}: give prompt lengths in tokens, e.g. 256,4096")
    return contexts


def start_server(mode: str, pair: Path, log: Path, port: int) -> smoke_server.Server:
    """The mode's server (not yet ready), its step switches in its own environment."""
    kind, settings = serve_bench.server_settings(mode)
    settings = dataclasses.replace(
        settings,
        port=port,
        extra_server_args=(
            "--cuda-graph-bs",
            *GRAPH_BS,
            "--mem-fraction-static",
            MEM_FRACTION,
            "--sleep-on-idle",
        ),
    )
    args = smoke_server.mode_args(kind, pair / "drafter", settings)
    return smoke_server.Server(
        pair / "target", args, log, settings, env=serve_bench.step_environment_of(mode)
    )


def first_difference(a: list[int], b: list[int]) -> dict[str, Any] | None:
    """Where two greedy outputs first differ (a token, or None for the one that ended first); None when
    equal."""
    at = near_tie.first_difference_at(a, b)
    if at is None:
        return None
    return {"at": at, "a": a[at] if at < len(a) else None, "b": b[at] if at < len(b) else None}


def prompt_record(evals_sha256: str, context: int, prompt: list[int]) -> dict[str, Any]:
    """How the context's prompt was built, with digests to check a rebuild against (replay_gap prints the
    same sha256)."""
    return {
        "built": f"profile_step.prompt_of(eval_prompts.json prompts, {context}): cycled, cut to length",
        "tokens": len(prompt), "sha256": near_tie.ids_digest(prompt), "eval_prompts_sha256": evals_sha256,
    }  # fmt: skip


def rig_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def judge_differences(result: dict[str, Any], pair: Path, prompts: dict[int, list[int]]) -> None:
    """Each first difference gets the float32 rig target's gap on prompt + common prefix (in place).

    Failures are recorded, never raised: the timings are the job's result and stand without the gaps.
    """
    todo = [c for c in result["contexts"] if c.get("greedy_first_difference")]
    if not todo:
        return
    try:
        device = rig_device()
        target = near_tie.load_target(pair, device)
    except Exception as exc:  # no weights, a config the rig does not know, no memory: said, not raised
        result["rig"] = {"error": f"the rig could not load: {type(exc).__name__}: {exc}"}
        for ctx in todo:
            ctx["greedy_first_difference"]["gap_error"] = result["rig"]["error"]
        return
    result["rig"] = {"device": device, "dtype": "float32", "near_tie_at_most": near_tie.NEAR_TIE}
    for ctx in todo:
        diff = ctx["greedy_first_difference"]
        common = ctx["greedy_outputs"][result["modes"]["A"]][: diff["at"]]
        try:
            gap = near_tie.logit_gap(target, prompts[ctx["context"]] + common, device)
        except Exception as exc:  # e.g. out of memory at a long context: this one is unjudged
            diff["gap_error"] = f"{type(exc).__name__}: {exc}"
            continue
        diff.update({"gap": gap["gap"], "rig_top": gap["top"], "near_tie": gap["near_tie"]})


def _spread(values: list[float], digits: int = 3) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}  # fmt: skip


def measure_context(
    modes: tuple[str, str], clients: dict[str, Any], prompt: list[int], params: dict, rounds: int
) -> dict[str, Any]:
    """One context: warm-ups, then `rounds` rounds of A, B, B, A; the medians and per-round ratios B/A."""
    by_letter = dict(zip("AB", modes, strict=True))
    outputs = {}
    for mode in modes:  # warm-up (JIT, first replays); its greedy output is the one compared
        answer = clients[mode].post_json("/generate", {"input_ids": prompt, "sampling_params": params})
        outputs[mode] = list(answer.get("output_ids") or [])
    measurements = []
    for round_index in range(rounds):
        for letter in ORDER:
            mode = by_letter[letter]
            got = profile_step.unprofiled_step_ms(clients[mode], prompt, params, rounds=1)
            measurements.append({"round": round_index, "mode": mode, **got})
    per_mode = {}
    for mode in modes:
        mine = [m for m in measurements if m["mode"] == mode]
        per_mode[mode] = {
            "step_ms": round(statistics.median(m["unprofiled_step_ms"] for m in mine), 3),
            "tok_s": round(statistics.median(m["unprofiled_tok_s"] for m in mine), 1),
            "tokens_per_step": round(statistics.median(m["tokens_per_step"] for m in mine), 3),
        }
    ratios: dict[str, list[float]] = {"step_ms": [], "tok_s": []}
    for round_index in range(rounds):
        this = [m for m in measurements if m["round"] == round_index]
        for key, field in (("step_ms", "unprofiled_step_ms"), ("tok_s", "unprofiled_tok_s")):
            a_sum = sum(m[field] for m in this if m["mode"] == modes[0])
            b_sum = sum(m[field] for m in this if m["mode"] == modes[1])
            ratios[key].append(b_sum / max(1e-9, a_sum))
    return {
        "per_mode": per_mode,
        "ratio_b_over_a": {
            key: {**_spread(values), "rounds": [round(v, 4) for v in values]}
            for key, values in ratios.items()
        },
        "greedy_first_difference": first_difference(*outputs.values()),
        "greedy_tokens": len(outputs[modes[0]]),
        "greedy_outputs": outputs,
        "measurements": measurements,
    }


def run_paired(
    modes: tuple[str, str], pair: Path, out: Path, rounds: int, contexts: list[int], new_tokens: int
) -> dict[str, Any]:
    """Both servers up, every context measured (a failed context is recorded, the next still runs), both
    stopped at the end whatever happens. OUT/paired.json and .md are rewritten after every context."""
    result: dict[str, Any] = {
        "modes": {"A": modes[0], "B": modes[1]}, "order": "".join(ORDER), "rounds": rounds,
        "new_tokens": new_tokens, "step_env": {m: serve_bench.step_environment_of(m) for m in modes},
        "servers": {}, "contexts": [],
    }  # fmt: skip
    evals, _ = serve_bench.eval_prompts(pair)
    prompts = {context: profile_step.prompt_of(evals, context) for context in contexts}
    evals_sha256 = hashlib.sha256((pair / "eval_prompts.json").read_bytes()).hexdigest()
    params = {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}
    with contextlib.ExitStack() as stack:  # every server started is stopped, even when another stop fails
        port = smoke_server.free_port()
        servers = {}
        for letter, mode in zip("AB", modes, strict=True):
            server = start_server(mode, pair, out / f"server-{letter.lower()}.log", port)
            stack.callback(server.stop)
            servers[mode] = server
            ready_s = server.wait_ready()
            result["servers"][mode] = {"port": port, "ready_s": round(ready_s, 1), "cmd": server.cmd[1:]}
            print(f"paired_step: {letter} = {mode} ready after {ready_s:.0f} s on port {port}", flush=True)
            port = smoke_server.free_port(avoid={port})
        clients = {mode: server.client for mode, server in servers.items()}
        for context, prompt in prompts.items():
            record = {"context": context, "prompt": prompt_record(evals_sha256, context, prompt)}
            try:
                record.update(measure_context(modes, clients, prompt, params, rounds))
            except Exception as exc:  # this context's failure is recorded; the next context still runs
                record["error"] = f"{type(exc).__name__}: {exc}"
            result["contexts"].append(record)
            write(out, result)
            print(f"paired_step: context {context} done", flush=True)
    judge_differences(result, pair, prompts)  # the servers are stopped: their GPU memory is free
    write(out, result)
    return result


def table(result: dict[str, Any]) -> str:
    a, b = result["modes"]["A"], result["modes"]["B"]
    lines = [f"Paired: A = {a}, B = {b}, both servers up at once, {result['rounds']} rounds "
             f"{result['order']}, {result['new_tokens']} new tokens, greedy, concurrency 1", ""]  # fmt: skip
    for ctx in result["contexts"]:
        if "error" in ctx:
            lines += [f"context {ctx['context']}: FAILED {ctx['error']}", ""]
            continue
        mine, ratio = ctx["per_mode"], ctx["ratio_b_over_a"]
        lines += [f"| context {ctx['context']} | A {a} | B {b} | B/A per round: median (min-max) |",
                  "|---|---|---|---|"]  # fmt: skip
        for key, name in (("step_ms", "step without profiler (ms), median"),
                          ("tok_s", "decode tok/s, one request, median")):  # fmt: skip
            r = ratio[key]
            lines.append(
                f"| {name} | {mine[a][key]} | {mine[b][key]} | {r['median']} ({r['min']}-{r['max']}) |"
            )
        lines.append(f"| tokens per step | {mine[a]['tokens_per_step']} | {mine[b]['tokens_per_step']} | |")
        lines += [f"| greedy outputs | {greedy_cell(ctx)} | | |", ""]
    return "\n".join(lines)


def greedy_cell(ctx: dict[str, Any]) -> str:
    """Identical, or where the outputs first differ and the rig's verdict on it (or why there is none)."""
    diff = ctx["greedy_first_difference"]
    if diff is None:
        return f"identical ({ctx['greedy_tokens']} tokens)"
    where = f"first differ at token {diff['at']} (A {diff['a']}, B {diff['b']})"
    if "gap" in diff:
        verdict = (f"near-tie (<= {near_tie.NEAR_TIE}, bf16 noise)" if diff["near_tie"]
                   else f"NOT a near-tie (> {near_tie.NEAR_TIE}): a bug")  # fmt: skip
        top = ", ".join(str(t) for t in diff["rig_top"])
        return f"{where}; rig float32 top-1 minus top-2 {diff['gap']} (top {top}): {verdict}"
    if "gap_error" in diff:
        return f"{where}; gap not computed: {diff['gap_error']}"
    return f"{where}; gap not yet computed (after the run)"


def write(out: Path, result: dict[str, Any]) -> None:
    atomic_write(out / "paired.json", json.dumps(result, indent=1) + "\n")
    atomic_write(out / "paired.md", table(result))


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # `timeout`'s SIGTERM stops the servers as Ctrl-C does


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, required=True, help="the trained pair (benchmarks.pair.train --out)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--paired", required=True, help="two modes A,B, e.g. ddtree-16@eager,ddtree-16")
    ap.add_argument("--rounds", type=int, default=8, help="rounds of A, B, B, A")
    ap.add_argument("--contexts", default="256", help="prompt lengths, e.g. 256,4096")
    ap.add_argument("--new-tokens", type=int, default=256)
    args = ap.parse_args(argv)
    try:
        modes = parse_modes(args.paired)
        contexts = parse_contexts(args.contexts)
        if args.rounds < 1 or args.new_tokens < 2:
            raise ValueError(f"--rounds {args.rounds} / --new-tokens {args.new_tokens}: at least 1 / 2")
    except ValueError as exc:
        print(f"paired_step: {exc}", file=sys.stderr)
        return 2
    problem = smoke.gpu_problem()
    if problem:
        print(f"paired_step: cannot run here: {problem}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        result = run_paired(modes, args.pair, args.out, args.rounds, contexts, args.new_tokens)
    except KeyboardInterrupt:
        print("paired_step: interrupted; both servers stopped", file=sys.stderr)
        return 130
    except Exception as exc:  # a server that did not start: said in one line, its log names the cause
        print(f"paired_step: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(table(result), flush=True)
    return 1 if any("error" in c for c in result["contexts"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
