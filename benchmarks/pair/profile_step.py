"""Where one served decode step's time goes: none vs DFLASH vs DDTREE on the trained pair (GPU device).

    python -m benchmarks.pair.profile_step --pair DIR --out OUT [--modes none,dflash,ddtree-16] [--steps 30]
                                           [--contexts 256,4096]
    python -m benchmarks.pair.profile_step --smoke-arch mla --out OUT [--modes none,dflash,ddtree-8] ...
    python -m benchmarks.pair.profile_step --analyze TRACE.json.gz [--mode dflash]     # anywhere

--smoke-arch ARCH profiles the smoke test's tiny models instead of the pair (ddtree.smoke.models: `mla` is
the Kimi-K2.6-shaped MLA + MoE target, `gqa` the Qwen3-shaped one), written to a temporary folder and served
with the smoke's own flags (ddtree.smoke.server.Server, the profile's DDTREE settings from DDTREE_TARGET,
default pro6000; `ddtree-N` sets the budget); the prompts are random real tokens of the tiny vocabulary. Its
weights are crafted, so acceptance is as constructed (DFLASH 2, DDTREE 3 tokens per step), not a trained
drafter's; what it measures is where a step's time goes on that architecture's kernels.

For each mode: one server (serve_bench's settings, graphs for bs 1-32 only); per context (default 256 and
4096, past the drafter's 2048-token window, where the served DFLASH step more than doubled) a warm-up request
and the figures without the profiler (below; every context's before the first profiled window, since the
requests right after a window run slower for seconds), then SGLang's own torch profiler (POST /start_profile,
CPU + GPU activities, `--steps` scheduler steps) over one greedy request at concurrency 1
(`--profile-concurrency N`: N requests sent at once, so the window holds batched steps; the result's mode then
ends in ` cN`); the trace lands in OUT/MODE/ctxN/. The analysis starts at the first decode or verify forward
(the prefill is left out) and splits the window into:
  - drafter forward / target forward: GPU time of the kernels launched inside SGLang's per-forward spans
    (`step[MODE bs=N]`, model_runner.py; kernels are matched to their launch by CUPTI's correlation id, CUDA
    graph replays included). In a speculative step the drafter's forward comes first, then the target's
    verify, both TARGET_VERIFY spans: they are told apart by that order;
  - DDTree's own kernels (ddtree_kernels.py's Triton kernels, by name) and every other kernel launched
    outside those spans (sampling, KV bookkeeping, the drafter's KV append, copies);
  - idle GPU: the window minus the union of all kernel intervals (host work, syncs, scheduling).
Figures are per decode step (the window over the number of target forwards); DDTree's own kernels are also
given as a share of the step (`ddtree_kernel_share_pct`, of the wall window; printed after the table).
Beside them, from the same server
without the profiler: the step time (a full request minus a one-token request, over its verify passes), the
decode tok/s of one request, and the aggregate tok/s of 32 requests at once (`MODE@upstream` serves with
SGLANG_DFLASH_FAST_STEP=0, so old and new steps sit side by side in one table), and the scheduler loop's
phases per decode iteration of those unprofiled requests (patch scheduler-step-phases: SGLANG_STEP_PHASES
names OUT/MODE/phases.jsonl; launch, the wait for the GPU, processing, scheduling; `--sync-sites` also
lists the synchronising calls made while launching a decode step). The trace format is the
Chrome trace torch.profiler writes; nothing here needs SGLang, so it is unit-tested on a synthetic trace.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import itertools
import json
import random
import re
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ddtree.fsutil import atomic_write
from ddtree.smoke.models import SmokeSettings

DDTREE_KERNEL = re.compile(
    r"_tile_topk|_merge_topk|_score_kernel|_rank_kernel|_tree_rows|_verify_greedy|filter_rows|verify_sampling"
    r"|_sample|_radix|_walk|_bonus"
)
STEP_SPAN = re.compile(r"^step\[(?P<mode>[A-Z_]+) bs=(?P<bs>\d+)")
# Rows measured on the same server without the profiler (unprofiled_step_ms), after the profiled split.
UNPROFILED_ROWS = (
    ("unprofiled_step_ms", "step without profiler (ms)"),
    ("tokens_per_step", "tokens per step"),
    ("unprofiled_tok_s", "decode tok/s without profiler"),
    ("aggregate_tok_s_c32", "aggregate tok/s, 32 at once"),
)
# Triton's JITFunction.run: every eager Triton launch passes through it (argument binding, specialisation)
TRITON_LAUNCH = re.compile(r"(^|/)triton/runtime/jit\.py\(\d+\): run$")
PYTHON_TOP = 25  # functions listed per ranking of the Python tracer's host time
CONCURRENT = 32  # requests sent at once for the aggregate figure (the bench's concurrency 32 cell)
SMOKE_PROMPT_TOKENS = 64  # each random prompt of --smoke-arch; prompt_of strings them to each context
GRAPH_BS = ("1", "2", "4", "8", "16", "32")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
# patch scheduler-step-phases: the scheduler's phase clock file, and its sync debug switch
STEP_PHASES_ENV = "SGLANG_STEP_PHASES"
STEP_PHASES_SYNC_ENV = "SGLANG_STEP_PHASES_SYNC"
LOOP_PHASES = ("wall", "launch", "wait", "process", "schedule", "sample", "input", "other")
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def load_trace(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def analyze(trace: dict[str, Any], mode: str) -> dict[str, Any]:
    """Per-step split of GPU time (microseconds) for one mode's trace (see the module docstring)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    # The host side of each forward span; torch also draws it on the GPU's row (gpu_user_annotation).
    host = [e for e in events if e.get("cat") != "gpu_user_annotation"]
    spans = sorted((e for e in host if STEP_SPAN.match(str(e.get("name", "")))), key=lambda e: float(e["ts"]))
    # The window starts at the first decode or verify forward: the prompt's prefill is not a decode step.
    decode_start = min(
        (float(s["ts"]) for s in spans if STEP_SPAN.match(s["name"]).group("mode") != "EXTEND"), default=None
    )
    # Launches: CUDA runtime calls (graph replays, torch kernels) and driver calls (Triton: cuLaunchKernel).
    runtime = [e for e in events if e.get("cat") in LAUNCH_CATS and "correlation" in (e.get("args") or {})]
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    # which forward span launched each runtime call (same thread, inside the span's interval)
    owner_of_correlation: dict[int, str] = {}
    roles: list[str] = []
    verify_seen = 0
    for span in spans:
        kind = STEP_SPAN.match(span["name"]).group("mode")
        if kind == "TARGET_VERIFY" and mode != "none":
            role = "drafter forward" if verify_seen % 2 == 0 else "target forward"
            verify_seen += 1
        elif kind == "DECODE":
            role = "target forward"
        else:
            role = f"{kind.lower()} forward"
        roles.append(role)
        start, stop = float(span["ts"]), float(span["ts"]) + float(span.get("dur", 0))
        for call in runtime:
            if call.get("tid") == span.get("tid") and start <= float(call["ts"]) <= stop:
                owner_of_correlation[int(call["args"]["correlation"])] = role
    buckets: dict[str, float] = defaultdict(float)
    intervals = []
    for kernel in gpu:
        begin, dur = float(kernel["ts"]), float(kernel.get("dur", 0))
        correlation = (kernel.get("args") or {}).get("correlation")
        role = owner_of_correlation.get(int(correlation)) if correlation is not None else None
        if role == "extend forward" or (decode_start is not None and begin < decode_start):
            continue
        intervals.append((begin, begin + dur))
        if role is None:
            if DDTREE_KERNEL.search(str(kernel.get("name", ""))):
                role = "DDTree kernels"
            elif kernel.get("cat") != "kernel":
                role = "copies outside forwards"
            else:
                role = "other kernels outside forwards"
        buckets[role] += dur
    if not intervals:
        return {"mode": mode, "steps": 0, "per_step_us": {}}
    window_end = max(b for _, b in intervals)
    window = window_end - min(a for a, _ in intervals)
    busy = _union(intervals)
    steps = max(1, roles.count("target forward"))
    per_step = {name: round(value / steps, 1) for name, value in sorted(buckets.items())}
    per_step["idle GPU"] = round((window - busy) / steps, 1)
    per_step["wall"] = round(window / steps, 1)
    share = round(100.0 * buckets.get("DDTree kernels", 0.0) / window, 1) if window else 0.0
    result = {"mode": mode, "steps": steps, "forward_spans": len(spans), "per_step_us": per_step,
              "ddtree_kernel_share_pct": share}  # fmt: skip
    # the Python tracer's frames of the thread that runs the steps (the scheduler's), not the watchdogs'
    step_threads = {s.get("tid") for s in spans}
    stacks = [e for e in events if e.get("cat") == "python_function" and e.get("tid") in step_threads]
    if stacks and decode_start is not None:
        result["python_us_per_step"] = python_hotspots(stacks, steps, decode_start, window_end)
    return result


BOUND_OBJECT = re.compile(r" at 0x[0-9a-fA-F]+>$")


def _short(name: str) -> str:
    """'/tmp/site/sglang/srt/managers/scheduler.py(1234): run_batch' -> 'scheduler.py:1234 run_batch'; a C
    method's name without the address of the object it was bound to ('<built-in method to of Tensor object
    at 0x7f..>' -> '<built-in method to of Tensor object>'), so one method on many tensors is one row and the
    same row in two runs (2026-12-03d: `to` on different tensors split into rows that no two runs shared)."""
    where, _, function = name.partition("): ")
    if not function:
        return BOUND_OBJECT.sub(">", name)
    path, _, line = where.rpartition("(")
    return f"{path.rsplit('/', 1)[-1]}:{line} {function}"


def python_hotspots(
    calls: list[dict[str, Any]], steps: int, window_start: float, window_end: float, top: int = PYTHON_TOP
) -> dict[str, Any]:
    """Host time per decode step (us) by Python function, from the profiler's Python tracer (with_stack):
    inclusive (a function's whole call, counted once when it recurses) and self (its own frames, without the
    calls it makes, torch's C functions included as calls), both counted from `window_start` on (a call open
    at the first decode forward counts from there). The tracer slows every Python call down, so the figures
    rank where host time goes; the unprofiled step time says how long it really is. Frames open over the
    whole window (the process's and the event loop's callers) say nothing and are left out of the ranking."""
    inclusive: dict[str, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    launches: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # caller -> [Triton launches, us]
    by_thread: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for call in calls:
        by_thread[call.get("tid")].append(call)
    for thread_calls in by_thread.values():
        thread_calls.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0))))
        stack: list[tuple[float, str, str]] = []  # (end, name, full name) of the calls open at this point
        for call in thread_calls:
            start, end = float(call["ts"]), float(call["ts"]) + float(call.get("dur", 0))
            while stack and stack[-1][0] <= start:
                stack.pop()
            full = str(call.get("name", ""))
            name = _short(full)
            counted = min(end, window_end) - max(start, window_start)  # the part inside the decode window
            if counted > 0:
                if stack:
                    own[stack[-1][1]] -= counted  # the caller's own time leaves this call out
                if name not in {open_name for _, open_name, _ in stack}:
                    inclusive[name] += counted
                own[name] += counted
                if TRITON_LAUNCH.search(full):  # Triton's Python launcher: charged to the code that launched
                    caller = next((n for _, n, f in reversed(stack) if not _in_triton_or_builtin(f)), "?")
                    launches[caller][0] += 1
                    launches[caller][1] += counted
            stack.append((end, name, full))

    whole = 0.98 * (window_end - window_start)

    def ranked(values: dict[str, float]) -> list[list[Any]]:
        best = sorted(((k, v) for k, v in values.items() if inclusive[k] < whole), key=lambda item: -item[1])[
            :top
        ]
        return [[name, round(value / steps, 1)] for name, value in best]

    by_caller = sorted(launches.items(), key=lambda item: -item[1][1])
    return {
        "inclusive": ranked(inclusive),
        "self": ranked(own),
        "self_total": round(sum(own.values()) / steps, 1),
        "triton_launches": [
            [caller, round(n / steps, 1), round(us / steps, 1)] for caller, (n, us) in by_caller
        ],
    }


def _in_triton_or_builtin(full_name: str) -> bool:
    return full_name.startswith(("triton/", "<built-in")) or "/triton/" in full_name


def table(results: list[dict[str, Any]]) -> str:
    rows = [*sorted({k for r in results for k in r["per_step_us"]} - {"wall"}), "wall"]
    lines = ["| per decode step (us) | " + " | ".join(r["mode"] for r in results) + " |",
             "|---|" + "---|" * len(results)]  # fmt: skip
    for name in rows:
        cells = [str(r["per_step_us"].get(name, "-")) for r in results]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| steps profiled | " + " | ".join(str(r["steps"]) for r in results) + " |")
    for key, name in UNPROFILED_ROWS:
        if any(key in r for r in results):
            lines.append(f"| {name} | " + " | ".join(str(r.get(key, "-")) for r in results) + " |")
    estimates = [unprofiled_idle_pct(r) for r in results]
    if any(e is not None for e in estimates):
        cells = ["-" if e is None else str(e) for e in estimates]
        lines.append("| GPU idle of the step without profiler (%, est.) | " + " | ".join(cells) + " |")
    lines += phase_lines(results)
    for result in results:
        python = result.get("python_us_per_step")
        if not python:
            continue
        title = f"Python host time per step, {result['mode']} (us, profiled; own: {python['self_total']})"
        lines += ["", title, "", "| function | inclusive | | function | self |", "|---|---|---|---|---|"]
        for (inc_name, inc), (own_name, own) in itertools.zip_longest(
            python["inclusive"], python["self"], fillvalue=("", "")
        ):
            lines.append(f"| {inc_name} | {inc} | | {own_name} | {own} |")
        if python.get("triton_launches"):
            lines += ["", "| Triton launches from | per step | us per step (profiled) |", "|---|---|---|"]
            lines += [f"| {caller} | {n} | {us} |" for caller, n, us in python["triton_launches"]]
    return "\n".join(lines) + "\n"


def phase_lines(results: list[dict[str, Any]]) -> list[str]:
    """The scheduler loop's phases per decode iteration without the profiler (patch scheduler-step-phases),
    at one request and at 32, one table; nothing when no result has them."""
    keys = [k for k in ("phases_c1", f"phases_c{CONCURRENT}") if any(k in r for r in results)]
    if not keys:
        return []
    modes = " | ".join(r["mode"] for r in results)
    lines = [
        "",
        f"| loop phase per decode iteration, no profiler (us) | {modes} |",
        "|---|" + "---|" * len(results),
    ]
    for key in keys:
        where = key.removeprefix("phases_")
        for phase in (*LOOP_PHASES, "mean_bs"):
            cells = [
                str((r.get(key) or {}).get(phase if phase == "mean_bs" else f"{phase}_us", "-"))
                for r in results
            ]
            lines.append(f"| {where} {phase} | " + " | ".join(cells) + " |")
    return lines


def unprofiled_idle_pct(result: dict[str, Any]) -> float | None:
    """The GPU's idle share of the step without the profiler, estimated as 1 - (kernel time per step under
    the profiler) / (the unprofiled step). Why: the profiler's own host cost (CUPTI callbacks per launch)
    stretches the window, so the profiled idle share overstates a host-bound step's (on 2026-12-03b plain
    decoding idled 62 % profiled at a 1.13 ms step); kernel durations barely change under it. None without
    both figures."""
    per_step, step_ms = result.get("per_step_us") or {}, result.get("unprofiled_step_ms")
    if "wall" not in per_step or "idle GPU" not in per_step or not step_ms:
        return None
    busy_us = per_step["wall"] - per_step["idle GPU"]
    return round(max(0.0, 100.0 * (1.0 - busy_us / (1000.0 * step_ms))), 1)


def ddtree_share_lines(results: list[dict[str, Any]]) -> list[str]:
    """One line per profiled result: DDTree's own kernels' GPU time per step and their share of the step."""
    lines = []
    for result in results:
        per_step = result.get("per_step_us") or {}
        if "wall" not in per_step:
            continue
        lines.append(
            f"DDTREE's own kernels, {result['mode']}: {per_step.get('DDTree kernels', 0.0)} of "
            f"{per_step['wall']} us per step ({result.get('ddtree_kernel_share_pct', 0.0)} % of the step)"
        )
    return lines


def python_growth_lines(results: list[dict[str, Any]], top: int = 10) -> list[str]:
    """With --stacks at several contexts (issue 25: the v2 step grew 1.72 -> 2.57 ms from context 256 to 1024
    with the same GPU work): per mode, the Python functions whose inclusive and self host time per step grow
    most from the shortest to the longest context. A function missing from the shorter context's ranking
    (PYTHON_TOP) is marked `<` with that ranking's last entry: it was below it, so its growth counts from
    there (a lower bound; 2026-12-03d read `<0 -> 490` for a function under a cutoff of 511 us)."""
    by_mode: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for result in results:
        mode, sep, context = str(result.get("mode", "")).rpartition(" ctx ")
        stacks = result.get("python_us_per_step")
        if sep and stacks and context.isdigit():
            by_mode.setdefault(mode, []).append((int(context), stacks))
    lines = []
    for mode, runs in by_mode.items():
        if len(runs) < 2:
            continue
        (short_ctx, short), (long_ctx, long_) = min(runs, key=lambda r: r[0]), max(runs, key=lambda r: r[0])
        for kind in ("inclusive", "self"):  # self: a wait (a synchronize) or a loop shows where it runs
            ranking = short.get(kind, [])
            before = {name: us for name, us in ranking}
            floor = min((us for _, us in ranking), default=0.0)  # the shorter ranking's last entry
            after = {name: us for name, us in long_.get(kind, [])}
            grown = sorted(
                ((n, before.get(n), us) for n, us in after.items()),
                key=lambda r: -(r[2] - (floor if r[1] is None else r[1])),
            )
            parts = [
                f"{n} {'<' if b is None else ''}{floor if b is None else b:g} -> {a:g}"
                for n, b, a in grown[:top]
                if a > (floor if b is None else b)
            ]
            lines.append(
                f"Python host time that grows, {mode} ctx {short_ctx} -> {long_ctx} ({kind} us per step): "
                + ("; ".join(parts) or "none")
            )
    return lines


def _wait_for_trace(folder: Path, timeout_s: float) -> None:
    """Until a trace file exists and its size holds still for two seconds (the export writes in place)."""
    deadline = time.monotonic() + timeout_s
    last = -1
    while time.monotonic() < deadline:
        sizes = [f.stat().st_size for f in folder.glob("*.trace.json.gz")]
        if sizes and sum(sizes) == last:
            return
        last = sum(sizes) if sizes else -1
        time.sleep(2.0)


def prompt_of(prompts: list[list[int]], length: int) -> list[int]:
    """A prompt of `length` tokens: the held-out eval prompts one after another, cut to length."""
    ids: list[int] = []
    for prompt in itertools.cycle(prompts):
        if len(ids) >= length:
            return ids[:length]
        ids += prompt
    return ids  # no prompts at all


def unprofiled_step_ms(
    client, prompt: list[int], params: dict, rounds: int = 3, phases: Path | None = None
) -> dict[str, Any]:
    """The step time without the profiler, from the same server: (full request - one-token request) over
    the full request's decode steps (verify passes; tokens - 1 without speculation), median of `rounds`.
    With `phases` (the server's SGLANG_STEP_PHASES file): the loop's phases per decode iteration of each full
    request, their medians over the rounds as `phases_c1`."""

    def timed(max_new_tokens: int) -> tuple[float, dict]:
        start = time.perf_counter()
        answer = client.post_json(
            "/generate",
            {"input_ids": prompt, "sampling_params": {**params, "max_new_tokens": max_new_tokens}},
        )
        return time.perf_counter() - start, answer.get("meta_info", {})

    steps_ms, tokens_per_s, accept, spells = [], [], [], []
    for _ in range(rounds):
        first, _ = timed(1)
        before = line_count(phases)
        full, meta = timed(int(params["max_new_tokens"]))
        spells.append(spell_after(phases, before))
        tokens = int(meta.get("completion_tokens") or params["max_new_tokens"])
        steps = int(meta.get("spec_verify_ct") or 0) or max(1, tokens - 1)
        steps_ms.append(1000.0 * (full - first) / steps)
        tokens_per_s.append((tokens - 1) / max(1e-9, full - first))
        accept.append(tokens / steps)
    result = {
        "unprofiled_step_ms": round(statistics.median(steps_ms), 3),
        "unprofiled_tok_s": round(statistics.median(tokens_per_s), 1),
        "tokens_per_step": round(statistics.median(accept), 3),
    }
    found = [spell for spell in spells if spell]
    if found:
        result["phases_c1"] = {key: round(statistics.median(s[key] for s in found), 1) for key in found[0]}
    return result


def line_count(path: Path | None) -> int:
    """Lines in the phases file so far (0 without one)."""
    if path is None or not path.is_file():
        return 0
    return len(path.read_text().splitlines())


def spell_after(path: Path | None, before: int, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """The last decode spell the server's phase clock (patch scheduler-step-phases) appended after line
    `before`: it writes when the scheduler goes idle, a moment after the last answer; None when no line
    came (no decode step) or there is no file (a server without the patch)."""
    if path is None or not path.is_file():  # the clock creates its file when the server starts
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        lines = path.read_text().splitlines()[before:]
        spells = [json.loads(line) for line in lines if line.strip()]
        if spells or time.monotonic() >= deadline:
            return spells[-1] if spells else None
        time.sleep(0.05)


def concurrent_tok_s(
    client, prompts: list[list[int]], params: dict, phases: Path | None = None
) -> dict[str, Any]:
    """Aggregate output tok/s of len(prompts) requests sent at once (the bench's concurrency cell, one timed
    round, prefill included), and the first request's greedy output (to compare modes token for token).
    One untimed round first: on 2026-12-03 the first round at 32 on a fresh DDTREE server (its first bs-32
    tree stage, graph replays and kernels) read 2128 tok/s, the next context's round on that server 5596."""
    send_at_once(client, prompts, params)
    before = line_count(phases)
    start = time.perf_counter()
    answers = send_at_once(client, prompts, params)
    elapsed = time.perf_counter() - start
    tokens = sum(int(a.get("meta_info", {}).get("completion_tokens") or 0) for a in answers)
    result = {
        f"aggregate_tok_s_c{len(prompts)}": round(tokens / max(1e-9, elapsed), 1),
        "greedy_output": list(answers[0].get("output_ids") or []),
    }
    spell = spell_after(phases, before)
    if spell:
        result[f"phases_c{len(prompts)}"] = spell
    return result


def send_at_once(client, prompts: list[list[int]], params: dict) -> list[dict]:
    """Every prompt as its own /generate request, all sent at once (one thread each), the answers in order:
    the profiled window then holds batched steps of len(prompts) requests, as a loaded server runs them."""
    if len(prompts) == 1:
        return [client.post_json("/generate", {"input_ids": prompts[0], "sampling_params": params})]
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(
            pool.map(
                lambda ids: client.post_json("/generate", {"input_ids": ids, "sampling_params": params}),
                prompts,
            )
        )


@dataclasses.dataclass(frozen=True)
class Served:
    """What profile_mode serves: a target and its drafter, the prompts cut to each context, and (for the
    smoke's tiny models) the smoke's settings, which every mode's server then takes."""

    target: Path
    drafter: Path
    prompts: list[list[int]]
    smoke: SmokeSettings | None = None

    def mode_settings(self, mode: str) -> tuple[str, SmokeSettings]:
        """(smoke mode name, server settings) of one mode (`ddtree-N`: budget N; `@variant`: its switches)."""
        from benchmarks.pair import serve_bench

        kind, settings = serve_bench.server_settings(mode)  # MODE@upstream: SGLANG_DFLASH_FAST_STEP=0
        if self.smoke is None:
            # Only bs 1 is profiled (and CONCURRENT requests timed): few graph sizes, ready sooner.
            extra = ("--cuda-graph-bs", *GRAPH_BS, "--mem-fraction-static", "0.3")
            return kind, dataclasses.replace(settings, extra_server_args=extra)
        base, _ = serve_bench.split_mode(mode)
        budget = int(base.split("-")[1]) if base.startswith("ddtree-") else self.smoke.budget
        return kind, dataclasses.replace(self.smoke, budget=budget)


def pair_models(pair: Path) -> Served:
    """The trained pair (benchmarks.pair.train's folder) and its held-out eval prompts."""
    from benchmarks.pair import serve_bench

    prompts, _ = serve_bench.eval_prompts(pair)
    return Served(pair / "target", pair / "drafter", prompts)


def smoke_models(arch: str, folder: Path) -> Served:
    """The smoke test's tiny target (`arch`) and drafter, written under `folder`, with the smoke's settings
    (the DDTREE_TARGET profile's block size, budget, top-k, window) and random prompts of real tokens."""
    from ddtree.smoke import check as smoke
    from ddtree.smoke.dims import REAL_TOKENS
    from ddtree.smoke.models import write_models

    settings = dataclasses.replace(smoke.settings_from_profile(None), arch=arch)
    target, drafter = write_models(folder / "models", settings)
    rng = random.Random(settings.seed + 4)
    prompts = [[rng.randrange(REAL_TOKENS) for _ in range(SMOKE_PROMPT_TOKENS)] for _ in range(CONCURRENT)]
    return Served(target, drafter, prompts, smoke=settings)


def profile_mode(
    mode: str,
    served: Served,
    out: Path,
    steps: int,
    new_tokens: int,
    contexts: list[int],
    stacks: bool = False,
    concurrency: int = 1,
    find_syncs: bool = False,
) -> list[dict[str, Any]]:
    """Start the mode's server; per context, profile `steps` scheduler steps of `concurrency` greedy
    requests sent at once (after a warm-up request of the same length) and analyze the trace. One result
    per context. The server's phase clock (SGLANG_STEP_PHASES) times the unprofiled requests' loop phases;
    `find_syncs`: decode launches under torch's sync debug mode, the call sites it names from the log."""
    from ddtree.smoke import server as smoke_server

    from benchmarks.pair import serve_bench

    kind, settings = served.mode_settings(mode)
    folder = (out / mode).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    args = smoke_server.mode_args(kind, served.drafter, settings)
    phases = folder / "phases.jsonl"
    phases.unlink(missing_ok=True)
    clock = {STEP_PHASES_ENV: str(phases), STEP_PHASES_SYNC_ENV: "1" if find_syncs else "0"}
    with serve_bench.step_environment(mode):
        server = smoke_server.Server(served.target, args, folder / "server.log", settings, env=clock)
    prompts = served.prompts
    params = {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}
    results = []
    try:
        server.wait_ready()
        # Every context's figures without the profiler first: on 2026-12-03e the requests right after a
        # profiled window ran slower for seconds (the trace's export and teardown in the server), which read
        # as the v2 step growing from 256 to 1024 when 1024 was measured after 256's window.
        unprofiled: dict[int, dict[str, Any]] = {}
        others_of = {
            c: [prompt_of(prompts[i:] + prompts[:i], c) for i in range(CONCURRENT)] for c in contexts
        }
        for context in contexts:
            prompt = others_of[context][0]  # the prompts strung from the first: prompt_of(prompts, context)
            server.client.post_json("/generate", {"input_ids": prompt, "sampling_params": params})  # warm-up
            unprofiled[context] = unprofiled_step_ms(server.client, prompt, params, phases=phases)
            unprofiled[context] |= concurrent_tok_s(server.client, others_of[context], params, phases=phases)
        for context in contexts:
            where = folder / f"ctx{context}"
            where.mkdir(exist_ok=True)
            body = {"output_dir": str(where), "num_steps": steps, "activities": ["CPU", "GPU"],
                    "with_stack": stacks, "record_shapes": False}  # fmt: skip
            # SGLang answers /start_profile with plain text, not JSON.
            status, answer = server.client.post_text("/start_profile", body, 120.0)
            if status != 200:
                raise RuntimeError(f"POST /start_profile -> HTTP {status}: {answer[:300]}")
            send_at_once(server.client, others_of[context][:concurrency], params)
            _wait_for_trace(where, timeout_s=120.0)
            traces = sorted(where.glob("*.trace.json.gz"))
            label = f"{mode} ctx {context}" + (f" c{concurrency}" if concurrency > 1 else "")
            if traces:
                result = analyze(load_trace(traces[-1]), label)
            else:
                result = {"mode": label, "steps": 0, "per_step_us": {}, "error": f"no trace in {where}"}
            results.append({**result, **unprofiled[context]})
    finally:
        server.stop()
    if find_syncs:
        found = smoke_server.sync_sites(server.log_path.read_text(errors="replace"))
        for result in results:
            result["sync_sites"] = [f"{where}: {what}" for where, what in sorted(found.items())]
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--modes", default="none,dflash,ddtree-16")
    ap.add_argument("--steps", type=int, default=30, help="scheduler steps the profiler records")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument(
        "--contexts", default="256,4096", help="prompt lengths to profile (4096: past the window)"
    )
    ap.add_argument(
        "--stacks", action="store_true",
        help="record Python stacks (torch's Python tracer): host time per Python function; slows the step",
    )  # fmt: skip
    ap.add_argument(
        "--smoke-arch", choices=("gqa", "mla"),
        help="profile the smoke test's tiny models of this architecture (mla: Kimi K2.6's) instead of --pair",
    )  # fmt: skip
    ap.add_argument(
        "--profile-concurrency", type=int, default=1, choices=range(1, CONCURRENT + 1),
        metavar=f"1..{CONCURRENT}",
        help="requests sent at once in the profiled window (32: where the bench's concurrency-32 step goes)",
    )  # fmt: skip
    ap.add_argument(
        "--sync-sites", action="store_true",
        help="launch decode steps under torch's sync debug mode (SGLANG_STEP_PHASES_SYNC=1) and list the "
        "synchronising call sites the server log names",
    )  # fmt: skip
    ap.add_argument("--analyze", type=Path, help="only analyze this trace file")
    ap.add_argument("--mode", default="ddtree", help="with --analyze: none, dflash or ddtree")
    args = ap.parse_args(argv)
    if args.analyze is not None:
        results = [analyze(load_trace(args.analyze), args.mode)]
    else:
        if (args.pair is None) == (args.smoke_arch is None) or args.out is None:
            ap.error("--out and one of --pair or --smoke-arch are needed (or --analyze TRACE)")
        contexts = [int(c) for c in args.contexts.split(",")]
        scratch = Path(tempfile.mkdtemp(prefix="ddtree-profile-")) if args.smoke_arch else None
        try:
            if scratch is not None:
                served = smoke_models(args.smoke_arch, scratch)
                smoke = served.smoke
                print(f"profile_step: the smoke's tiny {args.smoke_arch} target + drafter in {scratch}; "
                      f"DDTREE block {smoke.block_size}, top-k {smoke.topk}, window {smoke.window}",
                      flush=True)  # fmt: skip
            else:
                served = pair_models(args.pair)
            results = profile_modes(served, args, contexts)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
    print(table(results))
    print("\n".join(ddtree_share_lines(results) + python_growth_lines(results)))
    return 0 if all(r["steps"] for r in results) else 1


def profile_modes(served: Served, args: argparse.Namespace, contexts: list[int]) -> list[dict[str, Any]]:
    """Every mode of --modes in turn; profile.json and the table written after each."""
    results: list[dict[str, Any]] = []
    for mode in args.modes.split(","):
        try:
            results += profile_mode(
                mode, served, args.out, args.steps, args.new_tokens, contexts, args.stacks,
                args.profile_concurrency, args.sync_sites,
            )  # fmt: skip
        except Exception as exc:  # one mode's failure is recorded; the next mode still runs
            results.append(
                {"mode": mode, "steps": 0, "per_step_us": {}, "error": f"{type(exc).__name__}: {exc}"}
            )
        # after every mode: a sitting cut short keeps what it measured
        atomic_write(args.out / "profile.json", json.dumps(results, indent=1) + "\n")
        print(table(results), flush=True)
    return results


if __name__ == "__main__":
    raise SystemExit(main())
