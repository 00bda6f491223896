"""Serve the trained pair with the pinned, patched SGLang in each mode; `ddtree bench` judges (GPU device).

    python -m benchmarks.pair.serve_bench --pair DIR --out OUT [--modes none,dflash,ddtree-8,...]

For each mode, one server (ddtree.smoke.server.Server: triton attention, the profile's backend; CUDA graphs
on, batch sizes up to 64), then:
  1. greedy check: the pair's held-out eval prompts (eval_prompts.json), all at once, temperature 0,
     ignore_eos, the continuation length the rig evaluated; output ids and spec_accept_length per request;
  2. `ddtree bench --api generate --tokenizer PAIR/target` at every temperature (default 0 and 1.0) over
     contexts x concurrencies (defaults 256,1024,4096 x 1,8,32,64; 4096 is past the 2048-token drafter
     window, so the compact draft cache slides).
A mode whose OUT/MODE/run.json exists without an error is not run again (a sitting resumes).
It writes OUT/MODE/greedy.json, OUT/MODE/bench-tT/ (results.json, report.md) and OUT/MODE/server.log.
`summarize` (run after every mode is done, also on another machine) compares the greedy outputs across
modes, puts served acceptance beside the rig's offline evaluation on the same served tokens, and writes
OUT/summary.json + summary.md. A mode that would start after --deadline seconds is skipped and said so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ddtree.fsutil import atomic_write
from ddtree.smoke import check as smoke
from ddtree.smoke import server as smoke_server
from ddtree.smoke.models import SmokeSettings

MODES = ("none", "dflash", "ddtree-8", "ddtree-16", "ddtree-32")
# A mode may carry one variant suffix: the same server settings with one step switch changed, so one sitting
# puts old and new side by side (dflash@upstream: SGLang's own step, patches 0008, 0009, 0012 and 0013's step
# work off; ddtree-16@extend: patch 0009's split-KV target verify off (the served default is on since
# 2026-12-02, patch 0017), @splitkv: on whatever the default; ddtree-16@eager, dflash@eager: patch 0012's
# step CUDA graphs and patch 0013's one-launch verify metadata off (the served default is on since
# 2026-12-01); @graphs: both on, whatever the default; ddtree-16@meta: patch 0013 alone; dflash@overlap:
# overlap scheduling with the spec-v2 step, patches 0019-0022, explicitly (ddtree-16@overlap: DDTREE's
# tree step, patch 0022); @overlap-tbt: overlap with patch 0030's result fast path off, every accepted block's
# finish checked token by token as patch 0024 alone did); @nodraftpen: the drafter without the request's
# penalties, logit_bias and min_new_tokens (patch 0031 off: SGLANG_DDTREE_DRAFT_PENALTIES=0), for
# options_acceptance's with/without (issue 28); @target-bs: the step's graphs captured for the target's
# graph batch sizes only (patch step-graphs-every-batch-size off); @overlap-target-bs: the same under overlap;
# @v1: overlap off (SGLANG_DFLASH_OVERLAP=0), the v1 step, the default until patch dflash-overlap-default (the
# default now is auto: overlap on at TP 1, so dflash/ddtree-16 and their @overlap serve the same step here).
# Every switch is set explicitly for every server, to the served default unless the variant says.
FAST_STEP_ENV = "SGLANG_DFLASH_FAST_STEP"
SPLITKV_ENV = "SGLANG_DDTREE_SPLITKV_VERIFY"
STEP_GRAPHS_ENV = "SGLANG_DFLASH_STEP_GRAPHS"
FAST_METADATA_ENV = "SGLANG_DDTREE_FAST_METADATA"
OVERLAP_ENV = "SGLANG_DFLASH_OVERLAP"
RESULT_FAST_PATH_ENV = "SGLANG_SPEC_V2_RESULT_FAST_PATH"
DRAFT_PENALTIES_ENV = "SGLANG_DDTREE_DRAFT_PENALTIES"
EVERY_BS_ENV = "SGLANG_DFLASH_STEP_GRAPHS_EVERY_BS"
STEP_DEFAULTS = {
    FAST_STEP_ENV: "1", SPLITKV_ENV: "1", STEP_GRAPHS_ENV: "1", FAST_METADATA_ENV: "1", OVERLAP_ENV: "auto",
    RESULT_FAST_PATH_ENV: "1", DRAFT_PENALTIES_ENV: "1", EVERY_BS_ENV: "1",
}  # fmt: skip
VARIANTS = {
    "upstream": {FAST_STEP_ENV: "0", SPLITKV_ENV: "0", STEP_GRAPHS_ENV: "0", FAST_METADATA_ENV: "0"},
    "extend": {SPLITKV_ENV: "0"},
    "splitkv": {SPLITKV_ENV: "1"},
    "eager": {STEP_GRAPHS_ENV: "0", FAST_METADATA_ENV: "0"},
    "graphs": {STEP_GRAPHS_ENV: "1", FAST_METADATA_ENV: "1"},
    "meta": {STEP_GRAPHS_ENV: "0", FAST_METADATA_ENV: "1"},
    "overlap": {OVERLAP_ENV: "1"},
    "v1": {OVERLAP_ENV: "0"},
    "overlap-tbt": {OVERLAP_ENV: "1", RESULT_FAST_PATH_ENV: "0"},
    "nodraftpen": {DRAFT_PENALTIES_ENV: "0"},
    "target-bs": {EVERY_BS_ENV: "0"},
    "overlap-target-bs": {OVERLAP_ENV: "1", EVERY_BS_ENV: "0"},
}
BLOCK = 8  # served block size (the profile's --speculative-num-draft-tokens)
TOPK = 4
WINDOW = 2048
# Graphs for the bench's batch sizes and a few between (a batch pads up to the next one): each captured size
# costs start-up time in every mode, and five modes start in one sitting.
SERVER_ARGS = (
    "--cuda-graph-bs", "1", "2", "4", "8", "16", "24", "32", "48", "64",
    "--max-running-requests", "64", "--mem-fraction-static", "0.3",
)  # fmt: skip


def split_mode(mode: str) -> tuple[str, str | None]:
    """("ddtree-16", "splitkv") for "ddtree-16@splitkv"; an unknown variant: ValueError naming the known."""
    base, _, variant = mode.partition("@")
    if variant and variant not in VARIANTS:
        raise ValueError(f"mode {mode!r}: unknown variant @{variant} (known: {', '.join(sorted(VARIANTS))})")
    return base, variant or None


def step_environment_of(mode: str) -> dict[str, str]:
    """The step switches a mode's server runs with: the defaults, then its variant's."""
    _, variant = split_mode(mode)
    return {**STEP_DEFAULTS, **VARIANTS.get(variant or "", {})}


@contextlib.contextmanager
def step_environment(mode: str) -> Iterator[None]:
    """The mode's step switches in os.environ while its server starts inside; restored afterwards."""
    wanted = step_environment_of(mode)
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def eval_prompts(pair: Path) -> tuple[list[list[int]], int]:
    """The pair's held-out eval prompts and the continuation length the rig evaluated them with."""
    evals = json.loads((pair / "eval_prompts.json").read_text())
    return evals["prompts"], len(evals["continuations"][0])


def say(msg: str) -> None:
    print(f"[serve {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def server_settings(mode: str) -> tuple[str, SmokeSettings]:
    """(smoke mode name, settings) of one of MODES (a variant suffix changes the step, not the settings)."""
    mode, _ = split_mode(mode)
    budget = int(mode.split("-")[1]) if mode.startswith("ddtree-") else 8
    # 420 s: on a fresh machine (cold Triton cache) a DDTREE-16 server with graphs for 9 sizes took about
    # 240 s to be ready (2026-12-03c's second hold), which the former 240 s limit failed.
    settings = SmokeSettings(
        block_size=BLOCK, budget=budget, topk=TOPK, window=WINDOW, launch_timeout_s=420.0,
        extra_server_args=SERVER_ARGS,
    )  # fmt: skip
    kind = {"none": "baseline", "dflash": "dflash"}.get(mode, "ddtree")
    return kind, settings


def greedy_check(
    server: smoke_server.Server, prompts: list[list[int]], new_tokens: int, options: dict | None = None
) -> dict:
    """Every prompt at once, greedy, `new_tokens` each (plus request `options`, e.g. a penalty)."""
    params = {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True, **(options or {})}

    def one(prompt: list[int]) -> dict:
        return server.client.post_json("/generate", {"input_ids": prompt, "sampling_params": params})

    one(prompts[0])  # warm-up (JIT, first graph replay)
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(one, prompts))
    elapsed = time.monotonic() - start
    metas = [a.get("meta_info", {}) for a in answers]
    return {
        "outputs": [list(a["output_ids"]) for a in answers],
        "accept_lengths": [m.get("spec_accept_length") for m in metas],
        "verify_counts": [m.get("spec_verify_ct") for m in metas],
        "seconds": round(elapsed, 3),
    }


def bench(url: str, tokenizer_dir: Path, out: Path, args: argparse.Namespace, temperature: float) -> int:
    cmd = [
        sys.executable, "-m", "ddtree.cli", "bench", "--url", url, "--api", "generate",
        "--tokenizer", str(tokenizer_dir), "--contexts", args.contexts, "--concurrency", args.concurrency,
        "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats), "--warmup", "1",
        "--temperature", str(temperature), "--no-plots", "--quiet", "--out", str(out),
    ]  # fmt: skip
    say(f"bench T={temperature}: {' '.join(cmd[3:])}")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.bench_timeout)
    (out.parent / f"{out.name}.txt").write_text(done.stdout + done.stderr)
    say(f"bench T={temperature}: exit {done.returncode}")
    return done.returncode


def run_mode(mode: str, args: argparse.Namespace, prompts: list[list[int]], new_tokens: int) -> dict:
    kind, settings = server_settings(mode)
    folder = args.out / mode
    folder.mkdir(parents=True, exist_ok=True)
    target, drafter = args.pair / "target", args.pair / "drafter"
    with step_environment(mode):
        server = smoke_server.Server(
            target, smoke_server.mode_args(kind, drafter, settings), folder / "server.log", settings
        )
    record: dict = {"mode": mode, "cmd": server.cmd[1:]}
    try:
        record["ready_s"] = round(server.wait_ready(), 1)
        say(f"{mode}: ready after {record['ready_s']} s")
        greedy = greedy_check(server, prompts, new_tokens)
        atomic_write(folder / "greedy.json", json.dumps(greedy) + "\n")
        accepted = [a for a in greedy["accept_lengths"] if a is not None]
        say(
            f"{mode}: greedy check {greedy['seconds']} s"
            + (f", accept {sum(accepted) / len(accepted):.3f}" if accepted else "")
        )
        record["bench_exit"] = {
            str(t): bench(server.url, target, folder / f"bench-t{t}", args, t) for t in args.temperatures
        }
    except Exception as exc:  # one mode's failure is reported and the next mode still runs
        record["error"] = f"{type(exc).__name__}: {exc}"
        say(f"{mode}: FAILED {record['error']}")
    finally:
        server.stop()
    atomic_write(folder / "run.json", json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, required=True, help="the trained pair (benchmarks.pair.train --out)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--contexts", default="256,1024,4096")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 1.0])
    ap.add_argument("--bench-timeout", type=float, default=240.0)
    ap.add_argument("--deadline", type=float, default=540.0, help="seconds: no mode starts after this")
    args = ap.parse_args(argv)
    problem = smoke.gpu_problem()
    if problem:
        print(f"serve_bench: cannot run here: {problem}")
        return 2
    prompts, new_tokens = eval_prompts(args.pair)
    begin = time.monotonic()
    failed = 0
    for mode in args.modes.split(","):
        done = args.out / mode / "run.json"
        if done.is_file() and "error" not in json.loads(done.read_text()):
            say(f"{mode}: already done in {args.out} (remove {done} to run it again)")
            continue
        if time.monotonic() - begin > args.deadline:
            say(f"{mode}: skipped, past the {args.deadline:.0f} s deadline")
            continue
        record = run_mode(mode, args, prompts, new_tokens)
        failed += "error" in record or any(record.get("bench_exit", {}).values())
    say(f"done in {time.monotonic() - begin:.0f} s; {failed} mode(s) with a failure")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
