"""The DDTREE tree stage's CUDA graphs (patch ddtree-step-graph) on a GPU: replays equal the eager stage.

Runs the patched SGLang installed on the device (/tmp/site on PYTHONPATH, tests/gpu/README.md): the
worker's own `_tree_stage` (LM-head top-k, tree build, verify ids and positions) on a worker made without
its constructor, captured by BatchGraphs for several batch sizes and replayed on fresh inputs.
Stand-ins (no drafter or target model is loaded): an LM head of Kimi's vocabulary with random weights, and
a one-rank TP group (SGLang's is not initialised in a test process). With `-s` it prints the host time per
call of the eager stage and of a replay (the saving the graphs exist for; a figure, not a timed assertion).
"""

from __future__ import annotations

import time
import types

import pytest
import torch

from tests.unit.ddtree_sglang_probe import whole_vocab_lm_head

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)
step_graphs = pytest.importorskip("sglang.srt.speculative.step_graphs")
ddtree_worker = pytest.importorskip("sglang.srt.speculative.ddtree_worker")

VOCAB, HIDDEN, DEPTH, BUDGET, TOPK = 163840, 1024, 7, 16, 4
BATCH_SIZES = (1, 2, 4, 8, 16, 32)


def make_worker() -> object:
    """A DDTreeWorker carrying only what `_tree_stage` reads (TP 1, the whole vocabulary on this rank)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(VOCAB, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.05
    lm_head = whole_vocab_lm_head(weight)
    worker = ddtree_worker.DDTreeWorker.__new__(ddtree_worker.DDTreeWorker)
    worker.ddtree_topk, worker.ddtree_budget, worker.tree_depth = TOPK, BUDGET, DEPTH
    worker.model_runner = types.SimpleNamespace(model_config=types.SimpleNamespace(vocab_size=VOCAB))
    worker.target_worker = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(model=types.SimpleNamespace(lm_head=lm_head))
    )
    ddtree_worker.prepare_ddtree_plan(BUDGET, TOPK, DEPTH, VOCAB, torch.device("cuda"))
    ddtree_worker.get_tp_group = lambda: types.SimpleNamespace(world_size=1)
    return worker


def inputs(bs: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    hidden = torch.randn(bs * DEPTH, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
    root = torch.randint(0, VOCAB, (bs,), device="cuda", generator=gen)
    seq_lens = torch.randint(1, 8192, (bs,), device="cuda", generator=gen)
    return hidden, root, seq_lens


def host_us_per_call(fn, args: tuple, calls: int = 200) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


@pytest.fixture(scope="module")
def captured() -> tuple[object, object]:
    worker = make_worker()
    graphs = step_graphs.BatchGraphs(
        "tree stage",
        worker._tree_stage,
        batch_sizes=BATCH_SIZES,
        inputs=[
            step_graphs.GraphInput(DEPTH, (HIDDEN,), torch.bfloat16),
            step_graphs.GraphInput(1, (), torch.long),
            step_graphs.GraphInput(1, (), torch.long),
        ],
        device=torch.device("cuda"),
    )
    with torch.no_grad():
        assert graphs.capture_all() == len(BATCH_SIZES), graphs.failed
    return worker, graphs


@pytest.mark.parametrize("bs", BATCH_SIZES)
def test_replay_equals_the_eager_stage(captured, bs: int) -> None:
    worker, graphs = captured
    for seed in (bs, bs + 100):  # two different inputs: the replay must follow the new values
        hidden, root, seq_lens = inputs(bs, seed)
        with torch.no_grad():
            tree, ids, pos = worker._tree_stage(hidden, root, seq_lens)
            expect = [t.clone() for t in (tree.tokens, tree.parents, tree.mask, tree.verify_depth, ids, pos)]
            g_tree, g_ids, g_pos = graphs.replay(bs, hidden, root, seq_lens)
        got = (g_tree.tokens, g_tree.parents, g_tree.mask, g_tree.verify_depth, g_ids, g_pos)
        names = ("tokens", "parents", "mask", "verify_depth", "ids", "positions")
        for name, a, b in zip(names, got, expect, strict=True):
            assert torch.equal(a, b), f"bs {bs} seed {seed}: {name} differs from the eager stage"


def test_a_batch_size_not_captured_is_not_replayed(captured) -> None:
    _, graphs = captured
    hidden, root, seq_lens = inputs(3, 7)
    assert 3 not in graphs.graphs
    assert graphs.replay(3, hidden, root, seq_lens) is None


def test_print_host_time_eager_vs_replay(captured) -> None:
    worker, graphs = captured
    rows = []
    for bs in (1, 8, 32):
        hidden, root, seq_lens = inputs(bs, 1)
        with torch.no_grad():
            eager = host_us_per_call(worker._tree_stage, (hidden, root, seq_lens))
            replay = host_us_per_call(graphs.replay, (bs, hidden, root, seq_lens))
        rows.append((bs, eager, replay))
        assert replay > 0 and eager > 0
    print("\ntree stage, us per call (host + GPU, synchronised every 200 calls): bs, eager, replay, ratio")
    for bs, eager, replay in rows:
        print(f"  bs {bs:3d}  eager {eager:8.1f}  replay {replay:8.1f}  {eager / replay:5.2f}x")


def test_a_capture_context_supplies_the_capture_stream() -> None:
    """The path TP > 1 takes (SGLang's graph_capture yields the stream to capture on), here with a plain
    stream on one GPU: the graphs captured on it replay the eager stage all the same."""
    import contextlib

    worker = make_worker()
    streams: list = []

    @contextlib.contextmanager
    def context():
        streams.append(torch.cuda.Stream())
        yield types.SimpleNamespace(stream=streams[-1])

    graphs = step_graphs.BatchGraphs(
        "tree stage",
        worker._tree_stage,
        batch_sizes=(2,),
        inputs=[
            step_graphs.GraphInput(DEPTH, (HIDDEN,), torch.bfloat16),
            step_graphs.GraphInput(1, (), torch.long),
            step_graphs.GraphInput(1, (), torch.long),
        ],
        device=torch.device("cuda"),
        capture_context=context,
    )
    with torch.no_grad():
        assert graphs.capture_all() == 1, graphs.failed
        hidden, root, seq_lens = inputs(2, 11)
        _, ids, pos = worker._tree_stage(hidden, root, seq_lens)
        ids, pos = ids.clone(), pos.clone()
        _, g_ids, g_pos = graphs.replay(2, hidden, root, seq_lens)
    assert len(streams) == 1
    assert torch.equal(g_ids, ids) and torch.equal(g_pos, pos)
