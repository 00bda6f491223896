"""DDTREE's v2 commit stage as a CUDA graph (patch ddtree-overlap-commit-graph, SGLANG_DFLASH_OVERLAP=1) on a
GPU: a replay equals the eager stage, outputs and the target KV pool alike.

Runs the patched SGLang installed on the device (/tmp/site on PYTHONPATH, tests/gpu/README.md): the worker's
own `_commit_stage` (ddtree_info.commit_path_v2: emitted tokens, padded outputs, commit and new lengths,
committed rows, and the committed path's target KV moved by the pool's Triton `move_kv_cache`) on a worker
made without its constructor, over SGLang's real MHATokenToKVPool (enable_kv_cache_copy, as DDTREE servers
create it) and ReqToTokenPool on the GPU, captured by step_graphs.BatchGraphs with the inputs
`_capture_commit_stage` declares, and replayed on fresh walks. Stand-ins: the walk's results are random valid
paths (no model is loaded). With `-s` it prints the host time per call of the eager stage and of a replay.
"""

from __future__ import annotations

import time
import types

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)
step_graphs = pytest.importorskip("sglang.srt.speculative.step_graphs")
ddtree_worker = pytest.importorskip("sglang.srt.speculative.ddtree_worker")
memory_pool = pytest.importorskip("sglang.srt.mem_cache.memory_pool")

BUDGET, BLOCK, SLOTS, LAYERS, CONTEXT = 8, 8, 8192, 4, 1024
DEPTH, SIZE = BLOCK - 1, BUDGET + 1
BATCH_SIZES = (1, 2, 4, 8)


def make_worker() -> object:
    """A DDTreeWorker carrying only what `_commit_stage` reads: the target's KV pool and req_to_token."""
    worker = ddtree_worker.DDTreeWorker.__new__(ddtree_worker.DDTreeWorker)
    worker.__dict__.update(
        block_size=BLOCK,
        num_verify_tokens=SIZE,
        ddtree_budget=BUDGET,
        tree_depth=DEPTH,
        commit_stage_graphs=None,
    )
    pool = memory_pool.MHATokenToKVPool(
        SLOTS, 1, torch.bfloat16, 2, 64, LAYERS, "cuda", False, enable_kv_cache_copy=True
    )
    rows = memory_pool.ReqToTokenPool(
        size=64, max_context_len=CONTEXT, device="cuda", enable_memory_saver=False
    )
    gen = torch.Generator(device="cuda").manual_seed(0)
    for buffer in (*pool.k_buffer, *pool.v_buffer):
        buffer.copy_(torch.randn(buffer.shape, device="cuda", generator=gen).to(buffer.dtype))
    # every row maps distinct slots (slot 0, the padding slot, in none)
    slots = torch.randperm(SLOTS - 1, device="cuda", generator=gen)[: 64 * 120] + 1
    rows.req_to_token[:64, :120] = slots.view(64, 120).to(rows.req_to_token.dtype)
    worker.target_worker = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(token_to_kv_pool=pool, req_to_token_pool=rows)
    )
    return worker


def walk(bs: int, seed: int) -> tuple[torch.Tensor, ...]:
    """(tree tokens, accept_len, accept_idx, bonus, seq_lens, req_pool_indices): a random valid walk per
    request (accepted node indices increasing, so a path row never lies below its position), its rows
    distinct, its reserved entries inside the mapped part of the row."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 160000, (bs, BUDGET), generator=gen)
    accept_len = torch.randint(0, DEPTH + 1, (bs,), generator=gen)
    accept_idx = torch.full((bs, DEPTH), -1, dtype=torch.long)
    for b in range(bs):
        n = int(accept_len[b])
        accept_idx[b, :n] = torch.randperm(BUDGET, generator=gen)[:n].sort().values
    bonus = torch.randint(0, 160000, (bs,), generator=gen)
    seq_lens = torch.randint(1, 120 - SIZE, (bs,), generator=gen)
    req_pool_indices = torch.randperm(64, generator=gen)[:bs]
    return tuple(t.cuda() for t in (tokens, accept_len, accept_idx, bonus, seq_lens, req_pool_indices))


def kv_state(worker) -> list[torch.Tensor]:
    pool = worker.target_worker.model_runner.token_to_kv_pool
    return [b.clone() for b in (*pool.k_buffer, *pool.v_buffer)]


def set_kv(worker, state: list[torch.Tensor]) -> None:
    pool = worker.target_worker.model_runner.token_to_kv_pool
    for buffer, saved in zip((*pool.k_buffer, *pool.v_buffer), state, strict=True):
        buffer.copy_(saved)


@pytest.fixture(scope="module")
def captured() -> tuple[object, object]:
    worker = make_worker()
    before = kv_state(worker)
    long = torch.long
    graphs = step_graphs.BatchGraphs(
        "DDTREE commit stage (spec v2)",
        worker._commit_stage,
        batch_sizes=BATCH_SIZES,
        inputs=[  # as DDTreeWorker._capture_commit_stage declares them
            step_graphs.GraphInput(1, (BUDGET,), long),
            step_graphs.GraphInput(1, (), long),
            step_graphs.GraphInput(1, (DEPTH,), long),
            step_graphs.GraphInput(1, (), long),
            step_graphs.GraphInput(1, (), long),
            step_graphs.GraphInput(1, (), long),
        ],
        device=torch.device("cuda"),
    )
    with torch.no_grad():
        assert graphs.capture_all() == len(BATCH_SIZES), graphs.failed
    after = kv_state(worker)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if not torch.equal(a[1:], b[1:])]
    assert not changed, "capturing moved KV outside the padding slot 0"
    return worker, graphs


@pytest.mark.parametrize("bs", BATCH_SIZES)
def test_replay_equals_the_eager_commit_stage(captured, bs: int) -> None:
    worker, graphs = captured
    for seed in (bs, bs + 100):  # two different walks: the replay must follow the new values
        inputs = walk(bs, seed)
        start = kv_state(worker)
        with torch.no_grad():
            expect = [t.clone() for t in worker._commit_stage(*inputs)]
        eager_kv = kv_state(worker)
        set_kv(worker, start)
        with torch.no_grad():
            got = graphs.replay(bs, *inputs)
        torch.cuda.synchronize()
        names = ("emitted", "out_tokens", "commit_lens", "new_seq_lens", "row_index")
        for name, a, b in zip(names, got, expect, strict=True):
            assert torch.equal(a, b), f"bs {bs} seed {seed}: {name} differs from the eager stage"
        for i, (a, b) in enumerate(zip(kv_state(worker), eager_kv, strict=True)):
            assert torch.equal(a, b), f"bs {bs} seed {seed}: KV buffer {i} differs from the eager move"
        moved = sum(not torch.equal(a, b) for a, b in zip(start, eager_kv, strict=True))
        assert moved > 0 or int(inputs[1].sum()) == 0, "a path with accepted nodes moves KV"


def test_print_host_time_eager_vs_replay(captured) -> None:
    worker, graphs = captured
    print("\nDDTREE commit stage, us per call (host + GPU, synchronised every 200 calls): bs, eager, replay")
    for bs in (1, 8):
        inputs = walk(bs, 5)
        timings = []
        for fn, args in ((worker._commit_stage, inputs), (graphs.replay, (bs, *inputs))):
            torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.no_grad():
                for _ in range(200):
                    fn(*args)
            torch.cuda.synchronize()
            timings.append((time.perf_counter() - start) / 200 * 1e6)
        eager, replay = timings
        print(f"  bs {bs:3d}  eager {eager:8.1f}  replay {replay:8.1f}  {eager / replay:5.2f}x")
        assert all(t > 0 for t in timings)
