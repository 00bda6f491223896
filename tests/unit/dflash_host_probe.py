"""Run inside the CPU SGLang environment: the host cost of DFLASH/DDTREE decode steps, spec v1 (the default
step) against spec v2 (SGLANG_DFLASH_OVERLAP=1), in the real patched sglang 0.5.13.post1. Prints one line
`DFLASH-HOST-PROBE {json}`. SGLANG_DFLASH_OVERLAP is read once per process: run it once with the switch off
(v1) and once on (v2).

usage: python dflash_host_probe.py TARGET_DIR DRAFTER_DIR [--steps N] [--bs N,..] [--profile]
       [--prompt-len N,..] [--commit K,..]
(issue 25: prompt lengths, and the scripts' drafts accepted per verify, fixed: a DDTREE request emits K + 1
tokens a step; each (length, commit) is a cell `{algo}_bs{bs}_p{N}_c{K}`, c0 the scripts' seeded random)

Each run drives the scheduler's side of a decode iteration as the real loop does (v1: event_loop_normal's
prepare_for_decode -> run_batch -> process_batch_result_decode; v2: event_loop_overlap's prepare_for_decode
-> run_batch (FutureMap, _forward_isolation) -> batch.copy() -> the previous step's result processing) with
the real ScheduleBatch / Req / pools / allocator / ChunkCache / result processor and the real worker's
steps (DFlashWorker / DDTreeWorker made without __init__, as in dflash_overlap_probe). Stand-ins: the target
and the drafter are dflash_overlap_probe's scripts (on a GPU they are CUDA-graph replays, the same in both
paths), the fused draft KV write and the KV move record instead of writing (Triton kernels on a GPU), the
req_to_token writes are a torch loop (a Triton kernel on a GPU). Their time and ops are not counted.

What it measures per decode iteration (steady state, one long greedy request per batch row):
- aten ops dispatched (a TorchDispatchMode; view-like ops left out): on a GPU each is about one kernel
  launch, split by where they run: inside a stretch that v1 replays as a CUDA graph on the GPU
  (step_graphs: the drafter KV append, DFLASH's chain stage, DDTREE's tree stage; here each stretch runs
  through a stand-in BatchGraphs that calls the function: one launch per replay on a GPU), the worker's
  eager code, and the scheduler's code;
- the host time (wall, scripts subtracted) and, with --profile, cProfile's top functions.
"""

from __future__ import annotations

import contextlib
import cProfile
import dataclasses
import gc
import io
import json
import os
import pickle
import pstats
import sys
import time
import traceback
import types
from array import array

import dflash_overlap_probe as ov

# ops that only make a view or a host-side scalar (no kernel on a GPU)
VIEW_OPS = {
    "view",
    "_unsafe_view",
    "reshape",
    "as_strided",
    "slice",
    "select",
    "expand",
    "unsqueeze",
    "squeeze",
    "t",
    "transpose",
    "permute",
    "detach",
    "alias",
    "lift_fresh",
    "split",
    "unbind",
    "_reshape_alias",
    "view_as",
    "narrow",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "is_nonzero",
    "empty",
    "empty_strided",
    "empty_like",
    "result_type",
    "_has_compatible_shallow_copy_type",
    "_to_copy_noop",
}


class _GraphScope:
    """Stands for a captured stretch (step_graphs.BatchGraphs): replay runs the function; on a GPU it is one
    graph launch. The ops inside are counted apart."""

    def __init__(self, name: str, fn, counter_ref: list) -> None:
        self.name, self.fn, self.counter_ref = name, fn, counter_ref
        self.graphs = {1: None, 2: None, 4: None, 8: None}
        self.buffers: list | None = None  # the replay's static input buffers (made at the first replay)
        self.copier = None

    def replay(self, bs: int, *inputs):
        counter = self.counter_ref[0]
        if counter is not None:
            counter.replays[self.name] = counter.replays.get(self.name, 0) + 1
            counter.scope.append("graph:inputs")
            try:
                _copy_inputs_as_replay_does(self, inputs)
            finally:
                counter.scope.pop()
            counter.scope.append(f"graph:{self.name}")
        try:
            return self.fn(*inputs)
        finally:
            if counter is not None:
                counter.scope.pop()


STAND_IN_ROWS = 1024  # the stand-in replay buffers' rows: bs 32 x 17 verify tokens fit


def _copy_inputs_as_replay_does(scope: _GraphScope, inputs: tuple) -> None:
    """The copies a real replay makes into its static buffers (counted under "graph:inputs": on a GPU they
    run eagerly before the graph): step_graphs.InputCopier over the stretch's own buffers where the series
    has it (patch dflash-overlap-prepare-trim), else a slice and a copy_ per input, as BatchGraphs.replay did
    before it. The buffers (1024 rows, torch.empty: no op counted; a real capture holds the largest captured
    batch, and 64 rows stopped the probe at bs 8, whose DDTREE-8 verify has 72 rows) are made at the first
    replay; the function still reads its own arguments."""
    import torch
    from sglang.srt.speculative import step_graphs

    if scope.buffers is None:
        scope.buffers = [torch.empty((STAND_IN_ROWS, *arg.shape[1:]), dtype=arg.dtype) for arg in inputs]
        copier = getattr(step_graphs, "InputCopier", None)
        scope.copier = copier(scope.buffers) if copier is not None else None
    if scope.copier is not None:
        scope.copier(inputs)
    else:
        for buf, arg in zip(scope.buffers, inputs, strict=True):
            buf[: arg.shape[0]].copy_(arg)


def _op_counter():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: dict[str, dict[str, int]] = {}
            self.replays: dict[str, int] = {}
            self.scope: list[str] = ["scheduler"]
            self._paused = False

        @property
        def paused(self) -> bool:
            return self._paused

        @paused.setter
        def paused(self, value: bool) -> None:
            self._paused = value

        def __enter__(self):
            ov._ACTIVE_COUNTERS.append(self)
            return super().__enter__()

        def __exit__(self, *exc):
            ov._ACTIVE_COUNTERS.remove(self)
            return super().__exit__(*exc)

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            name = func._schema.name.split("::")[-1]
            if not self._paused and name not in VIEW_OPS:
                where = self.scope[-1]
                bucket = self.ops.setdefault(where, {})
                key = f"{name} @ {ov._caller()}" if os.environ.get("HOST_PROBE_SITES") else name
                bucket[key] = bucket.get(key, 0) + 1
            return func(*args, **(kwargs or {}))

    return Counter(), torch


class _ScriptClock:
    """Time spent in the scripted models (inside dflash_overlap_probe._uncounted), to subtract."""

    def __init__(self) -> None:
        self.total = 0.0
        self._since: float | None = None

    @property
    def paused(self) -> bool:
        return self._since is not None

    @paused.setter
    def paused(self, value: bool) -> None:
        now = time.perf_counter()
        if value and self._since is None:
            self._since = now
        elif not value and self._since is not None:
            self.total += now - self._since
            self._since = None


def _worker_scope(counter_ref: list, name: str, fn):
    def wrapped(*a, **k):
        counter = counter_ref[0]
        if counter is not None:
            counter.scope.append(name)
        try:
            return fn(*a, **k)
        finally:
            if counter is not None:
                counter.scope.pop()

    return wrapped


class _DetokenizerSink:
    """The detokenizer socket: pickles what send_pyobj would send (its host cost stays in the step)."""

    def __init__(self) -> None:
        self.sent_bytes = 0

    def send_output(self, payload) -> None:
        self.sent_bytes += len(pickle.dumps(payload))


def _real_output_streamer(args, cache, algo):
    """SGLang's SchedulerOutputStreamer (what the result processing sends each step: a non-streaming request
    every DEFAULT_FORCE_STREAM_INTERVAL tokens and at its finish), with the detokenizer socket a pickling sink
    and the load report left out."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.scheduler_components.output_streamer import SchedulerOutputStreamer

    return SchedulerOutputStreamer(
        send_to_detokenizer=_DetokenizerSink(),
        tree_cache=cache,
        ps=types.SimpleNamespace(dp_rank=0),
        server_args=args,
        is_generation=True,
        spec_algorithm=algo,
        disaggregation_mode=DisaggregationMode.NULL,
        enable_hicache_storage=lambda: False,
        load_inquirer_get_loads=lambda *a, **k: None,
    )


def run(
    args,
    tree: bool,
    steps: int,
    bs: int,
    window: int | None,
    profile: bool,
    prompt_len: int = 200,
    commit: int | None = None,
) -> dict:
    import torch
    from sglang.srt.managers import scheduler as scheduler_module
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.mem_cache import common as mem_common
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import set_global_server_args_for_scheduler
    from sglang.srt.speculative import (
        ddtree_info,
        dflash_info,
        dflash_info_v2,
        dflash_step_host,
        dflash_worker,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    set_global_server_args_for_scheduler(args)
    mem_common.support_triton = lambda backend: False
    for module in (dflash_info, dflash_info_v2, dflash_worker, ddtree_info):
        module.assign_req_to_token_pool_func = ov._assign_reference
    torch_rewrite = dflash_step_host._rewrite_compact_rows_torch

    def rewrite_as_kernel(*a, **k):  # one Triton launch on a GPU
        with ov._uncounted():
            return torch_rewrite(*a, **k)

    dflash_step_host._rewrite_compact_rows_torch = rewrite_as_kernel
    algo = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    v2 = algo.supports_spec_v2()
    n = int(args.speculative_num_draft_tokens)
    new_tokens = 40 * steps + 200
    context = prompt_len + new_tokens + 64
    req_pool = ReqToTokenPool(
        size=bs + 2,
        max_context_len=context + mem_common.get_req_to_token_extra_context_len(args),
        device="cpu",
        enable_memory_saver=False,
    )
    allocator = TokenToKVPoolAllocator(bs * (context + 4 * n) + 64, torch.bfloat16, "cpu", None, False)
    cache = ChunkCache(
        CacheInitParams(
            disable=True, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator, page_size=1
        )
    )
    model_config = types.SimpleNamespace(
        vocab_size=512, is_encoder_decoder=False, context_len=context, think_end_id=None
    )
    errors: list[str] = []
    rids = [f"r{i}" for i in range(bs)]
    streams = {
        rid: [10 + (7 * i + 3 * j) % 480 for j in range(new_tokens + 8 * n)] for i, rid in enumerate(rids)
    }
    prompts = {rid: [10 + (5 * i + j) % 480 for j in range(prompt_len)] for i, rid in enumerate(rids)}
    common = dict(window=window, req_pool=req_pool, allocator=allocator, errors=errors)
    if tree:
        models = ov._DDTreeV2Models(
            streams,
            {r: prompt_len for r in rids},
            n,
            7,
            block=int(args.speculative_dflash_block_size),
            budget=int(args.speculative_ddtree_budget),
            topk=int(args.speculative_ddtree_topk),
            **common,
        )
    else:
        models = ov._DFlashV2Models(streams, {r: prompt_len for r in rids}, n, 7, **common)
    models.check_reserved = v2
    if commit is not None:  # every verify commits `commit` tokens (the scripts' default: seeded random)
        models.commit_scripts = {rid: [commit] for rid in rids}
    worker = models.worker
    counter_ref: list = [None]
    # the stretches v1 replays as CUDA graphs on a GPU (step_graphs), as stand-ins that call the function
    rope = torch.zeros(context + 8 * n, 4)
    worker.__dict__.update(
        _fused_kv_helper=types.SimpleNamespace(rotary_emb=types.SimpleNamespace(cos_sin_cache=rope)),
        _append_rope_ptr=rope.data_ptr(),
        _append_max_position=context + 8 * n - 1,
        _kv_append_graphs=_GraphScope("kv_append", worker._append_padded, counter_ref),
    )
    if v2 and hasattr(worker, "_append_padded_v2"):  # patch dflash-overlap-step-graphs: v2's own append graph
        worker._kv_append_v2_graphs = _GraphScope("kv_append", worker._append_padded_v2, counter_ref)
    if v2 and hasattr(type(worker), "_block_stage_v2"):  # patch dflash-overlap-block-graph
        worker._block_stage_v2_graphs = _GraphScope("block_stage", worker._block_stage_v2, counter_ref)
    if v2 and not tree and hasattr(type(worker), "_capture_chain_tail_v2"):  # patch dflash-overlap-host-trim
        from sglang.srt.speculative.dflash_step_v2 import chain_tail_v2

        worker._chain_tail_v2_graphs = _GraphScope("chain_tail", chain_tail_v2, counter_ref)
    if tree:
        worker.tree_stage_graphs = _GraphScope("tree_stage", worker._tree_stage, counter_ref)
        if v2 and hasattr(type(worker), "_commit_stage"):  # patch ddtree-overlap-commit-graph
            worker.commit_stage_graphs = _GraphScope("commit_stage", worker._commit_stage, counter_ref)
    else:
        worker._chain_stage_graphs = _GraphScope("chain_stage", worker._chain_stage, counter_ref)
    # a GPU target's LM head for the chain stage check (`lm_head is self._target_lm_head()`)
    real_forward = worker.forward_batch_generation
    worker_step = _worker_scope(counter_ref, "worker", real_forward)

    def lean_forward(batch, on_publish=None):
        with ov._uncounted():
            models.current = {int(batch.req_pool_indices[i]): req for i, req in enumerate(batch.reqs)}
            models.available_at_entry = allocator.available_size()
        kwargs = {"on_publish": on_publish} if on_publish is not None else {}
        return worker_step(batch, **kwargs)

    models.forward_batch_generation = lean_forward
    future_map = algo.create_future_map(torch.device("cpu"), req_pool, False) if v2 else None
    sched = types.SimpleNamespace(
        forward_ct=0,
        scripted_scheduler_hook=None,
        profiler_manager=ov._NoOp(),
        forward_sleep_time=None,
        is_generation=True,
        enable_overlap=v2,
        enable_pdmux=False,
        future_map=future_map
        or types.SimpleNamespace(spec_algo=algo, output_tokens_buf=None, resolve_seq_lens_cpu=lambda b: None),
        forward_stream_ctx=contextlib.nullcontext(),
        forward_stream=ov._NoOp(),
        schedule_stream=ov._NoOp(),
        model_worker=models,
        batch_record_buf=[[], []],
        batch_record_ct=0,
        device_module=torch.get_device_module("cpu"),
        server_args=args,
        spec_algorithm=algo,
    )
    for name in (
        "run_batch",
        "_forward_isolation",
        "record_batch_in_overlap",
        "_maybe_report_active_ranks",
        "update_cache_from_scheduler",
    ):
        setattr(sched, name, getattr(scheduler_module.Scheduler, name).__get__(sched))
    processor = ov.stand_in_result_processor(
        args, model_config, allocator, cache, req_pool, models, overlap=v2
    )
    processor = dataclasses.replace(processor, output_streamer=_real_output_streamer(args, cache, algo))
    reqs = []
    for rid in rids:
        params = SamplingParams(max_new_tokens=new_tokens, temperature=0)
        params.normalize(None)
        params.verify(512)
        req = Req(rid, "", array("q", prompts[rid]), params, vocab_size=512, eos_token_ids={2})
        req.init_next_round_input(cache)
        req.fill_len = len(req.full_untruncated_fill_ids)
        reqs.append(req)
    batch = ScheduleBatch.init_new(reqs, req_pool, allocator, cache, model_config, True, algo)
    batch.prepare_for_extend()
    prefill = sched.run_batch(batch)
    queue = [(batch.copy(), prefill)] if v2 else []
    if not v2:
        processor.process_batch_result_prefill(batch, prefill)
    running = batch
    timings: list[float] = []
    script_share: list[float] = []
    clock = _ScriptClock()
    ov._ACTIVE_COUNTERS.append(clock)
    per_step_ops: list[dict] = []
    per_step_replays: list[dict] = []
    profiler = cProfile.Profile() if profile else None
    warm = 5
    total = warm + 3 * steps
    committed_tokens = 0
    blocks_kept: list[int] = []

    phase_ms: dict[str, list[float]] = {"prepare": [], "run_batch": [], "process": []}
    phase_on = [False]

    def mark(name: str, since: float, script_since: float) -> tuple[float, float]:
        now, script = time.perf_counter(), clock.total
        if phase_on[0]:
            phase_ms[name].append(1000 * ((now - since) - (script - script_since)))
        return now, script

    def iteration() -> None:
        nonlocal queue
        since, script_since = time.perf_counter(), clock.total
        running.filter_batch()
        running.prepare_for_decode()
        since, script_since = mark("prepare", since, script_since)
        result = sched.run_batch(running)
        since, script_since = mark("run_batch", since, script_since)
        if v2:
            queue.append((running.copy(), result))
            done_batch, done_result = queue.pop(0)
            if done_batch.forward_mode.is_extend():
                processor.process_batch_result_prefill(done_batch, done_result)
            else:
                processor.process_batch_result_decode(done_batch, done_result)
        else:
            processor.process_batch_result_decode(running, result)
        mark("process", since, script_since)

    gc_events: list[tuple[int, float]] = []  # (generation, seconds) of each collection in the timed steps
    gc_started: list[float] = []
    timing = [False]

    def on_gc(phase: str, info: dict) -> None:
        if not timing[0]:
            return
        if phase == "start":
            gc_started.append(time.perf_counter())
        elif gc_started:
            gc_events.append((int(info["generation"]), time.perf_counter() - gc_started.pop()))

    gc.callbacks.append(on_gc)
    try:
        for i in range(total):
            phase = (
                "warm"
                if i < warm
                else ("time" if i < warm + steps else ("ops" if i < warm + 2 * steps else "prof"))
            )
            if running.is_empty():
                errors.append(f"the batch emptied at iteration {i}")
                break
            before_tokens = sum(len(r.output_ids) for r in running.reqs)
            if phase == "ops":
                counter, _ = _op_counter()
                counter_ref[0] = counter
                with counter:
                    iteration()
                counter_ref[0] = None
                per_step_ops.append(counter.ops)
                per_step_replays.append(counter.replays)
            elif phase == "prof" and profiler is not None:
                profiler.enable()
                iteration()
                profiler.disable()
            else:
                clock.total = 0.0
                timing[0] = phase == "time"
                phase_on[0] = phase == "time"
                blocks = sys.getallocatedblocks()
                start = time.perf_counter()
                iteration()
                wall = time.perf_counter() - start
                timing[0] = False
                phase_on[0] = False
                if phase == "time":
                    blocks_kept.append(sys.getallocatedblocks() - blocks)
                if phase == "time":
                    timings.append(wall - clock.total)
                    script_share.append(clock.total)
            if phase != "warm":
                committed_tokens += sum(len(r.output_ids) for r in running.reqs) - before_tokens
    finally:
        gc.callbacks.remove(on_gc)
        ov._ACTIVE_COUNTERS.remove(clock)
        dflash_step_host._rewrite_compact_rows_torch = torch_rewrite
    measured = max(1, len(per_step_ops))
    buckets: dict[str, dict[str, float]] = {}
    for ops in per_step_ops:
        for where, names in ops.items():
            for name, count in names.items():
                b = buckets.setdefault(where, {})
                b[name] = b.get(name, 0) + count / measured
    replays: dict[str, float] = {}
    for r in per_step_replays:
        for name, count in r.items():
            replays[name] = replays.get(name, 0) + count / measured
    out = {
        "v2": v2,
        "algorithm": args.speculative_algorithm,
        "bs": bs,
        "window": window,
        "errors": errors[:10],
        "host_ms_per_step_median": 1000 * sorted(timings)[len(timings) // 2] if timings else None,
        "host_ms_per_step_mean": 1000 * sum(timings) / len(timings) if timings else None,
        # host ms per step by the loop's phase (median; scripts excluded): the scheduler's prepare
        # (filter_batch, prepare_for_decode), run_batch (the worker's step; v2: FutureMap, batch copy), and
        # the result processing (v2: the previous step's)
        "phase_ms_median": {
            name: round(sorted(values)[len(values) // 2], 4) for name, values in phase_ms.items() if values
        },
        "prompt_len": prompt_len,
        "commit": commit,
        "script_ms_per_step_mean": 1000 * sum(script_share) / len(script_share) if script_share else None,
        "ops_per_step": {where: round(sum(names.values()), 1) for where, names in buckets.items()},
        "ops_by_name": {
            where: dict(sorted(((k, round(v, 2)) for k, v in names.items()), key=lambda kv: -kv[1]))
            for where, names in buckets.items()
        },
        "graph_replays_per_step": replays,
        # Python's collections during the timed steps: per generation, how many and their seconds
        "gc_per_step": {
            str(g): [
                round(sum(1 for gen, _ in gc_events if gen == g) / max(1, len(timings)), 3),
                round(1000 * sum(t for gen, t in gc_events if gen == g) / max(1, len(timings)), 4),
            ]
            for g in (0, 1, 2)
        },
        "gc_counts_after": list(gc.get_count()),
        "tokens_per_step": committed_tokens / max(1, (total - warm)) / bs,
    }
    if profiler is not None:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(60)
        stats.sort_stats("tottime").print_stats(40)
        out["profile"] = text.getvalue()
        out["sglang_calls_per_step"], out["sglang_calls_by_function"] = sglang_calls(stats, max(1, steps))
    return out


def _is_sglang(path: str) -> bool:
    return f"{os.sep}sglang{os.sep}" in path


def sglang_calls(stats: pstats.Stats, steps: int) -> tuple[float, dict[str, float]]:
    """Python calls per profiled step made by SGLang's own code (issue 25: host work that grows with the
    context or the accepted tokens shows as calls that grow): every call of a function defined under sglang/,
    and every call of a builtin or C function (torch ops, list and array methods, len) made from one; the
    scripted models and this probe left out. Returns the total and the count per function ('file.py:line
    name'; 'builtin <name>' for C functions, summed over their SGLang callers)."""
    by_function: dict[str, float] = {}
    for (path, line, name), (_cc, calls, _tt, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if _is_sglang(path):
            key, count = f"{os.path.basename(path)}:{line} {name}", calls
        elif path == "~":  # a builtin: its calls from SGLang's functions
            count = sum(value[0] for caller, value in callers.items() if _is_sglang(caller[0]))
            key = f"builtin {name}"
        else:
            continue
        if count:
            by_function[key] = by_function.get(key, 0) + count / steps
    total = round(sum(by_function.values()), 2)
    return total, dict(sorted(((k, round(v, 2)) for k, v in by_function.items()), key=lambda kv: -kv[1]))


def main() -> None:
    target, drafter = sys.argv[1], sys.argv[2]
    rest = sys.argv[3:]
    steps = int(rest[rest.index("--steps") + 1]) if "--steps" in rest else 20
    sizes = [int(x) for x in rest[rest.index("--bs") + 1].split(",")] if "--bs" in rest else [1]
    profile = "--profile" in rest
    window = int(rest[rest.index("--window") + 1]) if "--window" in rest else 2048
    algos = rest[rest.index("--algos") + 1].split(",") if "--algos" in rest else ["ddtree", "dflash"]
    # issue 25: several prompt lengths / fixed commits per verify in one process; a cell's key gets
    # `_p{prompt}_c{commit}` when either is given (c0: the scripts' seeded random commits)
    prompt_lens = (
        [int(x) for x in rest[rest.index("--prompt-len") + 1].split(",")] if "--prompt-len" in rest else []
    )
    commits = [int(x) for x in rest[rest.index("--commit") + 1].split(",")] if "--commit" in rest else []
    if any(n < 1 for n in prompt_lens + commits):
        raise SystemExit(
            f"--prompt-len and --commit take numbers of at least 1, got {prompt_lens} and {commits}"
        )
    cells = [(p, c) for p in prompt_lens or [200] for c in commits or [None]]
    suffixed = bool(prompt_lens or commits)
    facts: dict = {"switch": os.environ.get(ov.OVERLAP_ENV, "")}
    try:
        from sglang.srt.server_args import prepare_server_args

        common = [
            "--model-path",
            target,
            "--skip-tokenizer-init",
            "--device",
            "cpu",
            "--attention-backend",
            "triton",
        ]
        overlap = [] if facts["switch"] == "1" else ["--disable-overlap-schedule"]
        argv = {
            "dflash": [
                *common,
                "--speculative-algorithm",
                "DFLASH",
                "--speculative-draft-model-path",
                drafter,
            ],
            "ddtree": [
                *common,
                "--speculative-algorithm",
                "DDTREE",
                "--speculative-draft-model-path",
                drafter,
                "--speculative-ddtree-budget",
                "8",
            ],
        }
        for algo in algos:
            args = prepare_server_args([*argv[algo], *overlap])
            for bs in sizes:
                for prompt_len, commit in cells:
                    key = f"{algo}_bs{bs}" + (f"_p{prompt_len}_c{commit or 0}" if suffixed else "")
                    facts[key] = run(args, algo == "ddtree", steps, bs, window, profile, prompt_len, commit)
    except Exception:
        facts["probe_error"] = traceback.format_exc()
    print("DFLASH-HOST-PROBE " + json.dumps(facts))


if __name__ == "__main__":
    main()
