"""Run inside the CPU SGLang environment with TRITON_INTERPRET=1 (tests/unit/test_dflash_step_host.py): the
host-light step of patch 0008 (sglang/srt/speculative/dflash_step_host.py) against upstream's own code in the
same patched tree, each side fed the same inputs. Prints one line `DFLASH-STEP-PROBE {json}`.

Stand-ins: DFlashWorker is made without __init__ (its constructor loads a drafter on a GPU) and given the
attributes the compared methods read; verify() runs on a batch stub whose assign_req_to_token kernel is a
torch loop (SGLang's is a Triton kernel launched on CUDA tensors only).
"""

from __future__ import annotations

import json
import os
import traceback
import types

import torch
from ddtree_sglang_probe import _assign_req_to_token_reference as _assign_reference
from ddtree_sglang_probe import (
    _Req,  # the Req attributes verify() touches, finishing after max_new tokens
    whole_vocab_lm_head,
)


def _with_fast_step(value: str, fn):
    saved = os.environ.get("SGLANG_DFLASH_FAST_STEP")
    os.environ["SGLANG_DFLASH_FAST_STEP"] = value
    try:
        return fn()
    finally:
        if saved is None:
            os.environ.pop("SGLANG_DFLASH_FAST_STEP")
        else:
            os.environ["SGLANG_DFLASH_FAST_STEP"] = saved


def _upstream_worker(window: int, page_size: int):
    from sglang.srt.speculative.dflash_worker import DFlashWorker

    worker = object.__new__(DFlashWorker)
    worker.__dict__.update(draft_window_size=window, page_size=page_size, device=torch.device("cpu"))
    return worker


def _compact_facts() -> dict:
    """Kernel (interpreter), torch fallback and upstream's masked gather, on the same req_to_token tables."""
    from sglang.srt.speculative import dflash_step_host as host

    cases = {
        "short_and_long_p1": ([5, 300, 64, 65], 64, 1),
        "page16": ([5, 300, 100, 17], 64, 16),
        "window_2048_over_blocks": ([2048, 4100, 1, 700], 2048, 1),
    }
    out = {}
    gen = torch.Generator().manual_seed(1)
    for name, (lens, window, page) in cases.items():
        bs, width = len(lens), 4200
        target = torch.randint(1, 10**6, (bs + 2, width), generator=gen, dtype=torch.int32)
        pools = torch.tensor([3, 0, 5, 1][:bs], dtype=torch.int64)
        seq = torch.tensor(lens, dtype=torch.int32)
        worker = _upstream_worker(window, page)
        up_lens = worker._compute_compact_draft_seq_lens(seq)
        start = seq.to(torch.int64) - up_lens.to(torch.int64)
        up_locs = worker._gather_req_to_token_segments(
            req_to_token=target, req_pool_indices=pools, start=start, lengths=up_lens
        )
        up_rows = torch.zeros_like(target)
        _assign_reference(pools, up_rows, torch.zeros_like(up_lens), up_lens, up_locs, bs)
        results = {}
        for path in ("kernel", "torch"):
            rows = torch.zeros_like(target)
            os.environ["SGLANG_DFLASH_STEP_TRITON"] = "1" if path == "kernel" else "0"
            got = host.rewrite_compact_rows(
                target_req_to_token=target,
                draft_req_to_token=rows,
                req_pool_indices=pools,
                seq_lens=seq,
                window=window,
                page_size=page,
            )
            results[path] = {
                "lens_equal": got.tolist() == up_lens.tolist(),
                "rows_equal": bool(torch.equal(rows, up_rows)),
            }
        os.environ.pop("SGLANG_DFLASH_STEP_TRITON")
        host_lens = host.compact_draft_lens_host(seq, window, page)
        out[name] = {
            **results,
            "host_lens_equal": host_lens.tolist() == up_lens.tolist(),
            "lens": up_lens.tolist(),
            "kernel_module": host._triton() is not None,
        }
    return out


def _dflash_verify_once() -> dict:
    """DFlashVerifyInput.verify, greedy, 3 requests with block 5: accepts 2, 0, and 4 but finishes after 2."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import dflash_info

    dflash_info.assign_req_to_token_pool_func = _assign_reference
    bs, size, vocab = 3, 5, 32
    candidates = torch.tensor([[7, 3, 4, 9, 9], [7, 1, 2, 3, 4], [7, 5, 6, 8, 10]])
    argmax = torch.tensor([[3, 4, 20, 0, 0], [21, 0, 0, 0, 0], [5, 6, 8, 10, 22]])
    logits = torch.nn.functional.one_hot(argmax.view(-1), vocab).float() * 10
    hidden = torch.arange(bs * size, dtype=torch.float32).view(-1, 1).repeat(1, 2)
    seq_lens = torch.tensor([4, 9, 6], dtype=torch.int32)
    freed: list[int] = []
    req_to_token = torch.full((3, 32), -1, dtype=torch.int64)
    reqs = [_Req(100), _Req(100), _Req(2)]
    batch = types.SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY,
        reqs=reqs,
        batch_size=lambda: bs,
        sampling_info=None,
        out_cache_loc=torch.arange(100, 100 + bs * size, dtype=torch.int64),
        token_to_kv_pool_allocator=types.SimpleNamespace(free=lambda x: freed.extend(x.tolist())),
        req_pool_indices=torch.tensor([2, 0, 1]),
        req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token),
        seq_lens=seq_lens.clone(),
        seq_lens_cpu=seq_lens.clone(),
        seq_lens_sum=int(seq_lens.sum()),
        device="cpu",
    )
    spec = dflash_info.DFlashVerifyInput(
        draft_token=candidates.reshape(-1),
        positions=torch.zeros(bs * size, dtype=torch.long),
        draft_token_num=size,
    )
    out = types.SimpleNamespace(next_token_logits=logits, hidden_states=hidden)
    bonus, commit, next_hidden, correct = spec.verify(batch=batch, logits_output=out, page_size=1)
    return {
        "output_ids": [r.output_ids for r in reqs],
        "bonus": bonus.tolist(),
        "commit_lens": commit.tolist(),
        "correct": correct,
        "next_hidden_rows": next_hidden[:, 0].tolist(),
        "kept_slots": batch.out_cache_loc.tolist(),
        "freed": sorted(freed),
        "req_to_token": req_to_token.tolist(),
        "seq_lens": batch.seq_lens.tolist(),
        "seq_lens_cpu": batch.seq_lens_cpu.tolist(),
        "seq_lens_sum": batch.seq_lens_sum,
        "kv_committed": [r.kv_committed_len for r in reqs],
    }


def _path_indices_facts() -> dict:
    from sglang.srt.speculative.dflash_step_host import path_step_indices, prefix_step_indices

    chain = prefix_step_indices([2, 0, 3], 4, torch.device("cpu"))
    tree = path_step_indices([3, 1, 2], [[4, 6], [], [0, 5, 7]], 9, torch.device("cpu"))
    return {
        "chain_kept": chain.kept.tolist(),
        "chain_freed": chain.freed.tolist(),
        "tree_kept": tree.kept.tolist(),
        "tree_freed": tree.freed.tolist(),
    }


def _host_ints_facts() -> list[dict]:
    """host_ints_to_device on the CPU (patch 0032 builds int64/int32 through torch.frombuffer): what comes
    back for empty, one-element and extreme lists, and a dtype that keeps torch.tensor."""
    from sglang.srt.speculative.dflash_step_host import host_ints_to_device

    cases = [
        ([], torch.int64), ([7], torch.int64), ([-3, 0, 2**40, -(2**63)], torch.int64),
        ([], torch.int32), ([-(2**31), 0, 2**31 - 1], torch.int32), ([1, -2, 300], torch.int16),
    ]  # fmt: skip
    out = []
    for values, dtype in cases:
        got = host_ints_to_device(values, dtype, "cpu")
        got.add_(0)  # writable
        out.append({"values": values, "dtype": str(dtype), "got": got.tolist(), "got_dtype": str(got.dtype)})
    return out


def _tree_mask_facts() -> dict:
    """The flat verify mask by the kernel (interpreter) vs ddtree_utils.flatten_verify_mask, on real trees."""
    from sglang.srt.speculative.ddtree_utils import build_ddtree, flatten_verify_mask
    from sglang.srt.speculative.dflash_step_host import tree_verify_mask

    out = {}
    gen = torch.Generator().manual_seed(3)
    for name, (lens, budget, topk, depth) in {
        "bs3_budget8": ([4, 300, 1], 8, 4, 7),
        "bs1_budget16_long": ([2100], 16, 4, 7),
        "bs2_budget32": ([33, 129], 32, 4, 7),
    }.items():
        logp = torch.log_softmax(torch.randn(len(lens), depth, 50, generator=gen), dim=-1)
        tree = build_ddtree(logp, budget, topk)
        seq = torch.tensor(lens, dtype=torch.int32)
        got = tree_verify_mask(tree.mask, seq, sum(lens))
        want = flatten_verify_mask(tree.mask, seq, sum(lens))
        out[name] = {"equal": bool(torch.equal(got, want)), "numel": got.numel(), "dtype": str(got.dtype)}
    return out


def _mask_policy_facts() -> dict:
    from sglang.srt.speculative.dflash_utils import resolve_dflash_verify_mask_policy

    def backend(name: str, window):
        return type(name, (), {"sliding_window_size": window})()

    facts = {}
    for switch in ("1", "0"):
        facts[switch] = _with_fast_step(
            switch,
            lambda: {
                "triton": resolve_dflash_verify_mask_policy(backend("TritonAttnBackend", None))[1],
                "triton_window": resolve_dflash_verify_mask_policy(backend("TritonAttnBackend", 128))[1],
                "flashinfer": resolve_dflash_verify_mask_policy(backend("FlashInferAttnBackend", None))[1],
                "hybrid_triton": resolve_dflash_verify_mask_policy(
                    types.SimpleNamespace(full_attn_backend=backend("TritonAttnBackend", -1))
                )[1],
            },
        )
    return facts


def _append_worker(block: int, window: int | None, target_r2t: torch.Tensor, draft_r2t: torch.Tensor):
    """A DFlashWorker (no __init__) with what the KV append reads; the fused write records its arguments."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: F401  (import check)
    from sglang.srt.speculative.dflash_worker import DFlashWorker

    writes: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    worker = object.__new__(DFlashWorker)
    worker.__dict__.update(
        device=torch.device("cpu"),
        model_runner=types.SimpleNamespace(device=torch.device("cpu")),
        block_size=block,
        _block_pos_offsets=torch.arange(block, dtype=torch.int64),
        draft_window_size=window,
        use_compact_draft_cache=window is not None,
        page_size=1,
        fast_step=True,
        _use_fused_kv_materialize=True,
        _fused_kv_helper=object(),
        _kv_append_graphs=None,
        _append_max_position=10**6,
        target_worker=types.SimpleNamespace(
            model_runner=types.SimpleNamespace(
                req_to_token_pool=types.SimpleNamespace(req_to_token=target_r2t)
            )
        ),
        draft_model_runner=types.SimpleNamespace(
            req_to_token_pool=types.SimpleNamespace(req_to_token=draft_r2t)
        ),
        draft_model=types.SimpleNamespace(project_target_hidden=lambda h: h * 2.0 + 1.0),
        _append_target_hidden_fused=lambda hidden, pos, loc, max_position=None: writes.append(
            (hidden, pos, loc)
        ),
    )
    return worker, writes


def _padded_append_facts() -> dict:
    """Patch ddtree-step-graph's padded KV append (the function its CUDA graph captures, run eagerly here: no
    graphs on CPU) against the eager append of patch 0008, on the same decode batches: the same (slot ->
    projected hidden row, position) writes, the padding only to slot 0, the same draft rows and lengths."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    cases = {
        "three_requests_window": ([1, 4, 2], [9, 70, 33], [2, 0, 1], 4, 16),
        "one_request": ([3], [50], [1], 4, 64),
        "no_window_full_blocks": ([4, 4], [4, 12], [0, 2], 4, None),
    }
    out = {}
    gen = torch.Generator().manual_seed(5)
    for name, (ctx, seq, pools, block, window) in cases.items():
        bs, total = len(ctx), sum(ctx)
        target_r2t = torch.randint(1, 10**5, (4, 128), generator=gen, dtype=torch.int32)
        hidden = torch.randn(total, 6, generator=gen)
        results = {}
        for path in ("eager", "padded"):
            draft_r2t = torch.zeros_like(target_r2t)
            worker, writes = _append_worker(block, window, target_r2t, draft_r2t)
            seq_lens = torch.tensor(seq, dtype=torch.int64)
            if path == "eager":
                batch = types.SimpleNamespace(
                    forward_mode=ForwardMode.DECODE,
                    is_extend_in_batch=False,
                    batch_size=lambda bs=bs: bs,
                    req_pool_indices=torch.tensor(pools),
                    req_to_token_pool=types.SimpleNamespace(req_to_token=target_r2t),
                    seq_lens=seq_lens,
                    seq_lens_cpu=seq_lens.clone(),
                )
                draft_input = types.SimpleNamespace(
                    target_hidden=hidden.clone(),
                    ctx_lens=torch.tensor(ctx, dtype=torch.int32),
                    draft_seq_lens=torch.zeros(bs, dtype=torch.int32),
                )
                worker._append_target_hidden_to_draft_kv(batch, draft_input)
                lens = draft_input.draft_seq_lens
            else:
                padded_hidden = torch.cat([hidden, torch.full((bs * block - total, 6), 99.0)])  # stale rows
                lens = worker._append_padded(
                    padded_hidden, torch.tensor(ctx, dtype=torch.int32), seq_lens, torch.tensor(pools)
                )
            ((rows, positions, locs),) = writes
            placed = {
                int(loc): (rows[i].tolist(), int(positions[i]))
                for i, loc in enumerate(locs.tolist())
                if loc != 0
            }
            results[path] = {
                "placed": placed,
                "writes": int(locs.numel()),
                "padding_to_slot_0": int((locs == 0).sum()),
                "lens": lens.tolist(),
                "draft_rows": draft_r2t.tolist(),
            }
        eager, padded = results["eager"], results["padded"]
        out[name] = {
            "same_placement": eager["placed"] == padded["placed"],
            "placed": len(eager["placed"]),
            "total_ctx": total,
            "eager_writes": eager["writes"],
            "padded_writes": padded["writes"],
            "padding_to_slot_0": padded["padding_to_slot_0"],
            "same_lens": eager["lens"] == padded["lens"],
            "same_draft_rows": eager["draft_rows"] == padded["draft_rows"],
        }
    return out


def _append_routing_facts() -> dict:
    """_append_target_hidden_to_draft_kv replays the captured append in the decode loop (after a verify, in
    TARGET_VERIFY mode; before a draft, DECODE) and runs a prefill's (EXTEND) eagerly. The capture is a
    stand-in (CUDA graphs cannot run on CPU): a "replay" runs the padded append over the input buffers."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.step_graphs import BatchGraphs, GraphInput

    gen = torch.Generator().manual_seed(6)
    target_r2t = torch.randint(1, 10**5, (4, 128), generator=gen, dtype=torch.int32)
    hidden = torch.randn(5, 6, generator=gen)
    out = {}
    for mode in (ForwardMode.TARGET_VERIFY, ForwardMode.DECODE, ForwardMode.EXTEND):
        worker, writes = _append_worker(4, 16, target_r2t, torch.zeros_like(target_r2t))
        graphs = BatchGraphs(
            "append",
            worker._append_padded,
            batch_sizes=[2],
            inputs=[
                GraphInput(4, (6,), torch.float32),
                GraphInput(1, (), torch.int32),
                GraphInput(1, (), torch.int64),
                GraphInput(1, (), torch.int64),
            ],
            device=torch.device("cpu"),
        )
        views, lens_out, replays = graphs._views(2), torch.zeros(2, dtype=torch.int32), []

        def stand_in_replay(views=views, lens_out=lens_out, replays=replays, worker=worker) -> None:
            replays.append(1)
            lens_out.copy_(worker._append_padded(*views))

        graphs.graphs[2] = types.SimpleNamespace(
            graph=types.SimpleNamespace(replay=stand_in_replay), output=lens_out
        )
        rope = torch.zeros(8, 2)
        worker.__dict__.update(
            _kv_append_graphs=graphs,
            _fused_kv_helper=types.SimpleNamespace(rotary_emb=types.SimpleNamespace(cos_sin_cache=rope)),
            _append_rope_ptr=rope.data_ptr(),
        )
        seq_lens = torch.tensor([40, 9], dtype=torch.int64)
        batch = types.SimpleNamespace(
            forward_mode=mode,
            is_extend_in_batch=False,
            batch_size=lambda: 2,
            req_pool_indices=torch.tensor([3, 1]),
            req_to_token_pool=types.SimpleNamespace(req_to_token=target_r2t),
            seq_lens=seq_lens,
            seq_lens_cpu=seq_lens.clone(),
        )
        draft_input = types.SimpleNamespace(
            target_hidden=hidden.clone(),
            ctx_lens=torch.tensor([3, 2], dtype=torch.int32),
            draft_seq_lens=torch.zeros(2, dtype=torch.int32),
        )
        worker._append_target_hidden_to_draft_kv(batch, draft_input)
        out[mode.name] = {
            "replays": len(replays),
            "lens": draft_input.draft_seq_lens.tolist(),
            "lens_not_the_graph_output": draft_input.draft_seq_lens.data_ptr() != lens_out.data_ptr(),
            "ctx_lens_zeroed": draft_input.ctx_lens.tolist() == [0, 0],
            "hidden_emptied": int(draft_input.target_hidden.shape[0]) == 0,
            "committed_rows_written": sum(int((loc != 0).sum()) for _, _, loc in writes),
        }
    return out


def _chain_stage_facts() -> dict:
    """DFLASH's chain stage (patch ddtree-step-graph; what its CUDA graph captures, run eagerly here) against
    the LM head's argmax done by hand: the root, then each block row's greedy token. SGLang's TP group is a
    one-rank stand-in (the probe does not initialise torch.distributed)."""
    from sglang.srt.speculative import dflash_worker as dw

    gen = torch.Generator().manual_seed(7)
    vocab, hidden_size, bs, block = 50, 8, 3, 5
    weight = torch.randn(vocab, hidden_size, generator=gen)
    worker = object.__new__(dw.DFlashWorker)
    worker.__dict__.update(
        target_worker=types.SimpleNamespace(
            model_runner=types.SimpleNamespace(
                model=types.SimpleNamespace(lm_head=whole_vocab_lm_head(weight))
            )
        )
    )
    saved = dw.get_tp_group
    dw.get_tp_group = lambda: types.SimpleNamespace(world_size=1)
    try:
        hidden = torch.randn(bs * (block - 1), hidden_size, generator=gen)
        root = torch.tensor([4, 8, 15])
        tokens = worker._chain_stage(hidden, root)
    finally:
        dw.get_tp_group = saved
    expect = torch.cat([root.view(bs, 1), (hidden @ weight.T).argmax(dim=-1).view(bs, block - 1)], dim=1)
    return {"equal": bool(torch.equal(tokens, expect.reshape(-1))), "shape": list(tokens.shape)}


def _capture_refusal_facts() -> dict:
    """Patch ddtree-step-graph: DFlashWorker's KV append and chain stage and DDTreeWorker's tree stage all go
    through step_graphs.capture_for_target. For each: why it stays eager (the switch and the device first,
    then the stretch's own conditions, asked only then: a refused append does not grow the RoPE cache), the
    reason kept where the worker keeps it, and one info line at rank 0 under the stretch's name. Workers made
    without __init__ over a target-runner namespace; SGLang's TP group a one-rank stand-in; _pin_rope_cache a
    recorder that refuses; no case reaches a capture (CUDA graphs need a GPU; tests/gpu/ replays them)."""
    import logging

    from sglang.srt.speculative import dflash_worker as dw
    from sglang.srt.speculative import step_graphs
    from sglang.srt.speculative.ddtree_worker import DDTreeWorker

    records: list[str] = []
    handler = logging.Handler(level=logging.INFO)
    handler.emit = lambda record: records.append(record.getMessage())
    graphs_logger = logging.getLogger(step_graphs.__name__)
    graphs_logger.addHandler(handler)
    saved_level, graphs_logger.level = graphs_logger.level, logging.INFO
    pinned: list[int] = []
    lm_head = whole_vocab_lm_head(torch.zeros(8, 4))

    def worker(cls=dw.DFlashWorker, *, device="cuda", fast_step=True, helper=None, with_head=True, rank=0):
        made = object.__new__(cls)
        model = types.SimpleNamespace(lm_head=lm_head) if with_head else types.SimpleNamespace()
        made.__dict__.update(
            device=device,
            tp_rank=rank,
            fast_step=fast_step,
            _fused_kv_helper=helper,
            block_size=5,
            tree_depth=4,
            target_worker=types.SimpleNamespace(
                model_runner=types.SimpleNamespace(
                    server_args=types.SimpleNamespace(disable_cuda_graph=False),
                    graph_runner=types.SimpleNamespace(capture_bs=[1, 2]),
                    model=model,
                    model_config=types.SimpleNamespace(context_len=64),
                )
            ),
            _pin_rope_cache=lambda max_position: pinned.append(max_position) or "pinning refused (stand-in)",
        )
        return made

    def kv_append(**kw) -> dict:
        made, before = worker(**kw), len(records)
        graphs = made._capture_kv_append()
        return {"graphs": graphs, "refusal": made.kv_append_graph_refusal, "logged": records[before:]}

    def chain(**kw) -> dict:
        made, before = worker(**kw), len(records)
        return {"graphs": made._capture_chain_stage(), "logged": records[before:]}

    def tree(**kw) -> dict:
        made, before = worker(DDTreeWorker, **kw), len(records)
        graphs = made._capture_tree_stage()
        return {"graphs": graphs, "refusal": made.tree_stage_refusal, "logged": records[before:]}

    saved_group, saved_env = dw.get_tp_group, os.environ.pop(step_graphs.STEP_GRAPHS_ENV, None)
    dw.get_tp_group = lambda: types.SimpleNamespace(world_size=1)
    try:
        # unset is on: the switch passes, the append's own first condition is what refuses it
        facts = {"unset_slow_step": kv_append(fast_step=False)}
        os.environ[step_graphs.STEP_GRAPHS_ENV] = "0"
        facts["switch_off"] = {"kv_append": kv_append(), "chain": chain(), "tree": tree()}
        os.environ[step_graphs.STEP_GRAPHS_ENV] = "1"
        facts["switch_on"] = {
            "kv_append_slow_step": kv_append(fast_step=False),
            "kv_append_no_fused_helper": kv_append(),
            "kv_append_pins_rope": kv_append(helper=object()),
            "kv_append_cpu": kv_append(device="cpu", helper=object()),
            "kv_append_rank1": kv_append(helper=object(), rank=1),
            "chain_no_lm_head": chain(with_head=False),
            "chain_cpu": chain(device="cpu"),
            "tree_cpu": tree(device="cpu"),
        }
        facts["pinned"] = pinned
        facts["target_lm_head"] = {
            "is_the_targets": worker()._target_lm_head() is lm_head,
            "none_without_one": worker(with_head=False)._target_lm_head() is None,
            "tree_worker_inherits": DDTreeWorker._target_lm_head is dw.DFlashWorker._target_lm_head,
        }
    finally:
        dw.get_tp_group = saved_group
        os.environ.pop(step_graphs.STEP_GRAPHS_ENV, None)
        if saved_env is not None:
            os.environ[step_graphs.STEP_GRAPHS_ENV] = saved_env
        graphs_logger.removeHandler(handler)
        graphs_logger.level = saved_level
    return facts


def main() -> None:
    facts: dict = {}
    try:
        facts["compact"] = _compact_facts()
        facts["dflash_verify_fast"] = _with_fast_step("1", _dflash_verify_once)
        facts["dflash_verify_upstream"] = _with_fast_step("0", _dflash_verify_once)
        facts["indices"] = _path_indices_facts()
        facts["host_ints"] = _host_ints_facts()
        facts["mask_policy"] = _mask_policy_facts()
        facts["tree_mask"] = _tree_mask_facts()
        facts["padded_append"] = _padded_append_facts()
        facts["append_routing"] = _append_routing_facts()
        facts["chain_stage"] = _chain_stage_facts()
        facts["capture_refusals"] = _capture_refusal_facts()
    except Exception:
        facts["probe_error"] = traceback.format_exc()
    print("DFLASH-STEP-PROBE " + json.dumps(facts))


if __name__ == "__main__":
    main()
