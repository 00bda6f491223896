"""Run inside the CPU SGLang environment (tests/unit/test_ddtree_sglang.py builds it): the patched
sglang 0.5.13.post1 with DDTREE. Imports SGLang once (about 30 s here) and prints one JSON object with
every fact the tests assert, so each fact costs no further import.

usage: python ddtree_sglang_probe.py TARGET_DIR DRAFTER_DIR
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import os
import socket
import sys
import traceback
import types


def _server_args(argv: list[str]):
    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args(argv)


def _args_case(base: list[str], extra: list[str]) -> dict:
    """ServerArgs for base + extra: the settled fields, or the error's type and message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            a = _server_args(base + extra)
    except SystemExit as e:
        return {"error": "SystemExit", "message": err.getvalue().strip().splitlines()[-1:], "code": e.code}
    except Exception as e:  # the message is what the test checks
        return {"error": type(e).__name__, "message": str(e)}
    return {
        "algorithm": a.speculative_algorithm,
        "num_draft_tokens": a.speculative_num_draft_tokens,
        "block_size": a.speculative_dflash_block_size,
        "budget": a.speculative_ddtree_budget,
        "topk": a.speculative_ddtree_topk,
        "page_size": a.page_size,
        "attention_backend": a.attention_backend,
        "max_spec_tokens": a.max_speculative_num_draft_tokens,
        "overlap_disabled": a.disable_overlap_schedule,
        "window": a.speculative_draft_window_size,
        "eagle_topk": a.speculative_eagle_topk,
    }


def _init_single_process_groups(args) -> None:
    """World size 1 on gloo: what ModelRunner sets up before any CUDA graph runner exists."""
    import torch
    from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(args)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    init_distributed_environment(
        backend="gloo", world_size=1, rank=0, local_rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}"
    )
    initialize_model_parallel(1)
    initialize_dp_attention(
        server_args=args, model_config=types.SimpleNamespace(hidden_size=64, dtype=torch.bfloat16)
    )


class _StopAtBuffers(Exception):
    """Raised by the stand-in attention backend once the runner has sized its buffers."""


class _SizingBackend:
    def init_cuda_graph_state(self, max_bs: int, max_num_token: int) -> None:
        raise _StopAtBuffers(max_bs, max_num_token)


class FlashInferAttnBackend:  # named like the backend whose DFLASH verify skips the mask
    pass


class TritonAttnBackend:
    pass


def _runner_stub(args, is_draft: bool, backend: object):
    """The model-runner attributes CudaGraphRunner reads before it allocates (no GPU, no model)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return types.SimpleNamespace(
        device="cpu",
        server_args=args,
        model_config=types.SimpleNamespace(is_encoder_decoder=False),
        use_ngram_embedding=False,
        spec_algorithm=SpeculativeAlgorithm.from_string(args.speculative_algorithm),
        is_draft_worker=is_draft,
        req_to_token_pool=types.SimpleNamespace(size=8),
        attn_backend=backend,
    )


def _cuda_graph_facts(args) -> dict:
    """Tokens per request and buffer sizes that the real CudaGraphRunner.__init__ computes, and the
    capture-time spec_info of get_spec_info (mask bound or not) for target and drafter."""
    import torch
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner

    out: dict = {}
    drafter_args = copy.copy(args)
    drafter_args.speculative_num_draft_tokens = args.speculative_dflash_block_size
    for role, run_args, is_draft in (("target", args, False), ("drafter", drafter_args, True)):
        try:
            CudaGraphRunner(_runner_stub(run_args, is_draft, _SizingBackend()))
            out[role] = {"error": "runner did not reach init_cuda_graph_state"}
        except _StopAtBuffers as stop:
            max_bs, max_num_token = stop.args
            out[role] = {
                "max_bs": max_bs,
                "max_num_token": max_num_token,
                "per_request": max_num_token // max_bs,
            }
    for name, backend in (("flashinfer", FlashInferAttnBackend()), ("triton", TritonAttnBackend())):
        runner = CudaGraphRunner.__new__(CudaGraphRunner)
        runner.model_runner = _runner_stub(args, False, backend)
        runner.buffers = types.SimpleNamespace(custom_mask=torch.ones(4, dtype=torch.bool))
        spec = runner.get_spec_info(8)
        out[f"capture_{name}"] = {
            "type": type(spec).__name__,
            "mask_bound": spec.custom_mask is runner.buffers.custom_mask,
            "draft_token_num": spec.draft_token_num,
        }
    return out


def _assign_req_to_token_reference(req_pool_indices, req_to_token, start, end, out_cache_loc, bs) -> None:
    """Torch stand-in for SGLang's Triton assign_req_to_token_pool kernel (Triton needs a GPU)."""
    offset = 0
    for i in range(bs):
        s, e = int(start[i]), int(end[i])
        req_to_token[int(req_pool_indices[i]), s:e] = out_cache_loc[offset : offset + e - s]
        offset += e - s


class _Req:
    """The Req attributes verify() touches; finishes after `max_new` tokens (also its max_new_tokens for the
    block test of patch 0032's append, which agrees: a block that stays under it cannot finish it)."""

    def __init__(self, max_new: int):
        self.output_ids: list[int] = []
        self.origin_input_ids = [5]
        self.grammar = None
        self.to_finish = None
        self.sampling_params = types.SimpleNamespace(stop_strs=[], stop_regex_strs=[], max_new_tokens=max_new)
        self.max_new = max_new
        self.spec_verify_ct = 0
        self.spec_num_correct_drafts = 0
        self.kv_committed_len = 0
        self.kv_allocated_len = 0

    def update_finish_state(self) -> None:
        pass

    def finished(self) -> bool:
        return len(self.output_ids) >= self.max_new

    def _spec_v2_block_cannot_finish(self, new_accepted_len: int) -> bool:
        return len(self.output_ids) < self.max_new


def _verify_facts() -> dict:
    """DDTreeVerifyInput.verify on a two-request batch with a known tree and known target argmax."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import ddtree_info
    from sglang.srt.speculative.ddtree_utils import build_ddtree, verify_input_ids

    ddtree_info.assign_req_to_token_pool_func = _assign_req_to_token_reference
    bs, depth, vocab, budget, topk = 2, 3, 16, 5, 2
    logp = torch.full((bs, depth, vocab), -20.0)
    # depth 1: tokens 3 (best) and 4; depth 2: 6 then 7; depth 3: 9 then 10
    for d, (a, b) in enumerate(((3, 4), (6, 7), (9, 10))):
        logp[:, d, a], logp[:, d, b] = -0.1, -2.5
    tree = build_ddtree(torch.log_softmax(logp, dim=-1), budget, topk)
    size = budget + 1
    seq_lens = torch.tensor([4, 6], dtype=torch.int32)
    # target argmax per verify row: request 0 follows 3 -> 6 -> then says 11 (not in the tree);
    # request 1 rejects the first depth: says 4 (the second-best child) then 7.
    tok = tree.tokens
    argmax = torch.full((bs, size), 15, dtype=torch.long)

    def row_of(b: int, token: int, parent_row: int) -> int:
        for i in range(budget):
            if int(tok[b, i]) == token and int(tree.parents[b, i]) + 1 == parent_row:
                return i + 1
        raise AssertionError(f"token {token} under row {parent_row} not in tree {tok[b].tolist()}")

    argmax[0, 0] = 3
    r3 = row_of(0, 3, 0)
    argmax[0, r3] = 6
    r6 = row_of(0, 6, r3)
    argmax[0, r6] = 11
    argmax[1, 0] = 4
    r4 = row_of(1, 4, 0)
    argmax[1, r4] = 12
    logits = torch.nn.functional.one_hot(argmax.view(-1), vocab).float() * 10
    hidden = torch.arange(bs * size, dtype=torch.float32).view(-1, 1).repeat(1, 3)

    out_cache_loc = torch.arange(100, 100 + bs * size, dtype=torch.int64)
    freed: list[int] = []
    req_to_token = torch.full((2, 32), -1, dtype=torch.int64)
    reqs = [_Req(max_new=100), _Req(max_new=1)]  # request 1 finishes after its first emitted token
    batch = types.SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY,
        reqs=reqs,
        batch_size=lambda: bs,
        sampling_info=None,
        out_cache_loc=out_cache_loc,
        token_to_kv_pool_allocator=types.SimpleNamespace(free=lambda x: freed.extend(x.tolist())),
        req_pool_indices=torch.tensor([0, 1]),
        req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token),
        seq_lens=seq_lens.clone(),
        seq_lens_cpu=seq_lens.clone(),
        seq_lens_sum=int(seq_lens.sum()),
        device="cpu",
    )
    spec = ddtree_info.DDTreeVerifyInput(
        draft_token=verify_input_ids(tree, torch.tensor([5, 5])).reshape(-1),
        positions=torch.zeros(bs * size, dtype=torch.long),
        draft_token_num=size,
        tree=tree,
    )
    logits_output = types.SimpleNamespace(next_token_logits=logits, hidden_states=hidden)
    bonus, commit_lens, next_hidden, correct = spec.verify(
        batch=batch, logits_output=logits_output, page_size=1
    )
    return {
        "tree_tokens": tok.tolist(),
        "rows": {"r3": r3, "r6": r6, "r4": r4},
        "output_ids": [r.output_ids for r in reqs],
        "bonus": bonus.tolist(),
        "commit_lens": commit_lens.tolist(),
        "correct": correct,
        "next_hidden_rows": next_hidden[:, 0].tolist(),
        "kept_slots": batch.out_cache_loc.tolist(),
        "freed": sorted(freed),
        "req_to_token_0": req_to_token[0, 4:8].tolist(),
        "req_to_token_1": req_to_token[1, 6:8].tolist(),
        "seq_lens": batch.seq_lens.tolist(),
        "seq_lens_sum": batch.seq_lens_sum,
        "kv_committed": [r.kv_committed_len for r in reqs],
    }


def _prepare_facts() -> dict:
    """DDTreeVerifyInput.prepare_for_verify on a two-request batch: slots from SGLang's real token allocator
    (CPU), req_to_token rows, and the flat Triton mask against a plain per-row reference."""
    import torch
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import ddtree_info, dflash_info
    from sglang.srt.speculative.ddtree_utils import build_ddtree, verify_input_ids

    ddtree_info.assign_req_to_token_pool_func = _assign_req_to_token_reference
    dflash_info.assign_req_to_token_pool_func = _assign_req_to_token_reference
    bs, budget = 2, 5
    size = budget + 1
    tree = build_ddtree(
        torch.randn(bs, 3, 16, generator=torch.Generator().manual_seed(3)).log_softmax(-1), budget, 2
    )
    allocator = TokenToKVPoolAllocator(64, torch.bfloat16, "cpu", None, False)
    seq_lens = torch.tensor([4, 6], dtype=torch.int64)
    req_to_token = torch.full((2, 32), -1, dtype=torch.int32)
    batch = types.SimpleNamespace(
        forward_mode=ForwardMode.DECODE,
        batch_size=lambda: bs,
        tree_cache=types.SimpleNamespace(token_to_kv_pool_allocator=allocator, is_chunk_cache=lambda: True),
        req_pool_indices=torch.tensor([1, 0]),
        req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token),
        seq_lens=seq_lens.clone(),
        seq_lens_cpu=seq_lens.clone(),
        device="cpu",
    )
    spec = ddtree_info.DDTreeVerifyInput(
        draft_token=verify_input_ids(tree, torch.tensor([7, 8])).reshape(-1),
        positions=torch.zeros(bs * size, dtype=torch.long),
        draft_token_num=size,
        tree=tree,
    )
    spec.prepare_for_verify(batch, 1)
    expect_mask: list[bool] = []
    for b, prefix in enumerate(seq_lens.tolist()):
        for i in range(size):
            expect_mask += [True] * prefix + tree.mask[b, i].tolist()
    slots = batch.out_cache_loc.tolist()
    return {
        "input_ids_are_draft": batch.input_ids is spec.draft_token,
        "slots": slots,
        "available_after": allocator.available_size(),
        "req_to_token_1": req_to_token[1, 4 : 4 + size].tolist(),
        "req_to_token_0": req_to_token[0, 6 : 6 + size].tolist(),
        "untouched": int((req_to_token[1, :4] != -1).sum() + (req_to_token[0, :6] != -1).sum()),
        "mask_equal": spec.custom_mask.tolist() == expect_mask,
        "mask_len": int(spec.custom_mask.numel()),
        "mask_is_tree": bool(not tree.mask.all()),
    }


def _reference_target_probs(
    row_logits: list[float],
    temp: float,
    top_k: int,
    top_p: float,
    min_p: float,
    top_p_after_top_k: bool = False,
):
    """One row's sampling distribution under plain decoding, from SGLang's sampler rules (plain Python).

    Default: the pytorch backend, and flashinfer's joint top-k/top-p kernel (top-p on the whole distribution).
    top_p_after_top_k: flashinfer's min-p path (top_k_renorm_prob, then top_p_renorm_prob on that, then
    min-p relative to the maximum).
    """
    import math

    scaled = [x / temp for x in row_logits]
    top = max(scaled)
    weights = [math.exp(x - top) for x in scaled]
    total = sum(weights)
    probs = [w / total for w in weights]
    order = sorted(range(len(probs)), key=lambda t: -probs[t])
    top_k_mass = sum(probs[t] for t in order[:top_k]) if top_p_after_top_k else 1.0
    kept, before = set(), 0.0
    for rank, t in enumerate(order):
        if rank < top_k and before / top_k_mass <= top_p and probs[t] >= min_p * probs[order[0]]:
            kept.add(t)
        before += probs[t]
    mass = sum(probs[t] for t in kept)
    return [probs[t] / mass if t in kept else 0.0 for t in range(len(probs))]


def _chi_square(counts: dict, expected: dict, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom; cells expecting fewer than min_expected are pooled."""
    stat, cells, pooled_count, pooled_expected = 0.0, 0, 0, 0.0
    for cell in set(counts) | set(expected):
        count, expect = counts.get(cell, 0), expected.get(cell, 0.0)
        if expect < min_expected:
            pooled_count += count
            pooled_expected += expect
            continue
        stat += (count - expect) ** 2 / expect
        cells += 1
    if pooled_expected > 0:
        stat += (pooled_count - pooled_expected) ** 2 / pooled_expected
        cells += 1
    elif pooled_count:
        stat = float("inf")  # a token plain decoding never samples
    return stat, max(cells - 1, 1)


def _chi_square_critical(df: int, z: float = 3.0902) -> float:
    """Upper critical value of chi-square with df degrees of freedom at p = 0.001 (z: the normal quantile),
    by the Wilson-Hilferty approximation."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * a**0.5) ** 3


def _filter_order_facts(trials: int = 20000) -> dict:
    """Chi-square of the first two emitted tokens of the sampling tree verify against plain decoding.

    A Markov target over 8 tokens (each token's next-token logits: one fixed ladder, permuted per token);
    every request: temperature 1, top-k 3, top-p 0.75, min-p 0.05. With the flashinfer backend plain decoding
    takes its min-p path (top-p on the top-k-renormalised mass: 2 tokens survive), with pytorch the joint
    rule (top-p on the whole mass: 3 survive), so the two references differ clearly. The token after the
    first comes from a depth-1 tree row when the first draft token was accepted, else from the next verify
    step (rooted at the first token). Each backend is checked against its own reference (must pass) and
    the other's (must fail: the test has the power to see a wrong order). A control samples plain decoding
    with SGLang's own torch sampler and checks it against the joint reference.
    """
    import torch
    from sglang.srt.layers.sampler import top_k_top_p_min_p_sampling_from_probs_torch
    from sglang.srt.server_args import get_global_server_args
    from sglang.srt.speculative import ddtree_info
    from sglang.srt.speculative.ddtree_utils import build_ddtree, emitted_tokens, verify_input_ids

    vocab, depth, budget, topk, root = 8, 3, 6, 3, 0
    temp, top_k, top_p, min_p = 1.0, 3, 0.75, 0.05
    ladder = torch.tensor([3.0, 2.5, 2.0, 1.0, 0.5, 0.0, -1.0, -2.0])
    gen = torch.Generator().manual_seed(21)
    table = torch.stack([ladder[torch.randperm(vocab, generator=gen)] for _ in range(vocab)])  # [prev, next]
    # A drafter that follows the target's argmax chain from the root: deep trees, frequent acceptance.
    chain, rows = root, []
    for _ in range(depth):
        rows.append(torch.log_softmax(table[chain], dim=-1))
        chain = int(table[chain].argmax())
    tree = build_ddtree(
        torch.stack(rows).unsqueeze(0).expand(trials, depth, vocab).contiguous(), budget, topk
    )
    size = budget + 1
    info = types.SimpleNamespace(
        temperatures=torch.full((trials, 1), temp),
        top_ks=torch.full((trials,), top_k, dtype=torch.int32),
        top_ps=torch.full((trials,), top_p),
        min_ps=torch.full((trials,), min_p),
        need_top_k_sampling=True,
        need_top_p_sampling=True,
        need_min_p_sampling=True,
        is_all_greedy=False,
    )

    def step(roots: torch.Tensor):
        spec = ddtree_info.DDTreeVerifyInput(
            draft_token=verify_input_ids(tree, roots).reshape(-1),
            positions=torch.zeros(trials * size, dtype=torch.long),
            draft_token_num=size,
            tree=tree,
        )
        row_tokens = torch.cat([roots.view(-1, 1), tree.tokens], dim=1)  # [trials, N]: each row's last token
        result = spec._walk(table[row_tokens.reshape(-1)].clone(), info, trials)
        return result[0], emitted_tokens(tree.tokens, *result)

    def references(after_top_k: bool) -> dict:
        q = [
            _reference_target_probs(table[t].tolist(), temp, top_k, top_p, min_p, after_top_k)
            for t in range(vocab)
        ]
        return {(a, b): trials * q[root][a] * q[a][b] for a in range(vocab) for b in range(vocab)}

    global_args = get_global_server_args()
    saved_backend = global_args.sampling_backend
    out: dict = {}
    try:
        for backend in ("pytorch", "flashinfer"):
            global_args.sampling_backend = backend
            torch.manual_seed(2100)
            accept_len, first = step(torch.full((trials,), root, dtype=torch.long))
            t1 = first[:, 0]
            _, second = step(t1)
            t2 = torch.where(accept_len >= 1, first[:, 1], second[:, 0])
            counts: dict = {}
            for pair in zip(t1.tolist(), t2.tolist(), strict=True):
                counts[pair] = counts.get(pair, 0) + 1
            own, other = (True, False) if backend == "flashinfer" else (False, True)
            stat, df = _chi_square(counts, references(own))
            wrong, wrong_df = _chi_square(counts, references(other))
            out[backend] = {
                "stat": stat,
                "critical": _chi_square_critical(df),
                "wrong_order_stat": wrong,
                "wrong_order_critical": _chi_square_critical(wrong_df),
                "second_from_tree_row": int((accept_len >= 1).sum()),
            }
    finally:
        global_args.sampling_backend = saved_backend
    torch.manual_seed(2101)
    probs = torch.softmax(table[root] / temp, dim=-1).expand(trials, vocab).contiguous()
    sampled = top_k_top_p_min_p_sampling_from_probs_torch(
        probs.clone(),
        torch.full((trials,), top_k),
        torch.full((trials,), top_p),
        torch.full((trials,), min_p),
        True,
        None,
        torch.zeros(trials, dtype=torch.long),
    )
    q_root = _reference_target_probs(table[root].tolist(), temp, top_k, top_p, min_p)
    values, numbers = torch.unique(sampled, return_counts=True)
    control, control_df = _chi_square(
        {(t,): n for t, n in zip(values.tolist(), numbers.tolist(), strict=True)},
        {(t,): trials * q_root[t] for t in range(vocab)},
    )
    out["torch_sampler_control"] = {"stat": control, "critical": _chi_square_critical(control_df)}
    return out


def _sampling_facts() -> dict:
    """The non-greedy verify path on a mixed batch: target distributions per request settings, and the
    greedy request of the batch walked exactly as a greedy batch would walk it."""
    import torch
    from sglang.srt.speculative import ddtree_info
    from sglang.srt.speculative.ddtree_utils import build_ddtree, verify_input_ids

    gen = torch.Generator().manual_seed(5)
    bs, budget, vocab = 3, 6, 12
    size = budget + 1
    tree = build_ddtree(torch.randn(bs, 3, vocab, generator=gen).log_softmax(-1), budget, 3)
    settings = [
        (1.0, 1, 1.0, 0.0),
        (0.7, 3, 1.0, 0.0),
        (1.3, 1 << 30, 0.8, 0.05),
    ]  # greedy, top-k, top-p+min-p
    info = types.SimpleNamespace(
        temperatures=torch.tensor([[t] for t, _, _, _ in settings]),
        top_ks=torch.tensor([k for _, k, _, _ in settings], dtype=torch.int32),
        top_ps=torch.tensor([p for _, _, p, _ in settings]),
        min_ps=torch.tensor([m for _, _, _, m in settings]),
        need_top_k_sampling=True,
        need_top_p_sampling=True,
        need_min_p_sampling=True,
        is_all_greedy=False,
    )
    logits = 2.0 * torch.randn(bs * size, vocab, generator=gen)
    probs = ddtree_info.target_probs_for_sampling(logits, info, size)
    err = 0.0
    for row in range(bs * size):
        expect = _reference_target_probs(logits[row].tolist(), *settings[row // size])
        err = max(err, max(abs(a - b) for a, b in zip(probs[row].tolist(), expect, strict=True)))
    spec = ddtree_info.DDTreeVerifyInput(
        draft_token=verify_input_ids(tree, torch.zeros(bs, dtype=torch.long)).reshape(-1),
        positions=torch.zeros(bs * size, dtype=torch.long),
        draft_token_num=size,
        tree=tree,
    )
    # Make the greedy request's target follow its tree for two levels, so its walk accepts something: the
    # first node below depth 1 has a depth-1 parent (budget 6 > top-k 3 guarantees one).
    deep = next(i for i in range(budget) if int(tree.parents[0, i]) >= 0)
    parent = int(tree.parents[0, deep])
    logits[0, int(tree.tokens[0, parent])] = 50.0
    logits[parent + 1, int(tree.tokens[0, deep])] = 50.0
    walked = spec._walk(logits.clone(), info, bs)
    greedy = tree.verify_greedy(logits.argmax(dim=-1).view(bs, size))
    return {
        "max_abs_err": err,
        "greedy_rows_one_hot": bool(((probs[:size] == 0) | (probs[:size] == 1)).all()),
        "greedy_request_walk": [walked[0][0].item(), walked[1][0].tolist(), walked[2][0].item()],
        "greedy_reference_walk": [greedy[0][0].item(), greedy[1][0].tolist(), greedy[2][0].item()],
    }


def _request_facts() -> dict:
    """The scheduler's DDTREE request check on real SamplingParams: the message per setting (None: served)."""
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    ddtree = SpeculativeAlgorithm.from_string("DDTREE")
    cases = {
        "plain": {"temperature": 0.8, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "stop": ["ab"]},
        "greedy_logit_bias": {"temperature": 0.0, "logit_bias": {"3": 1.5}},
        "frequency": {"frequency_penalty": 0.5},
        "presence": {"presence_penalty": -0.3},
        "repetition": {"repetition_penalty": 1.2},
        "min_new_tokens": {"min_new_tokens": 4},
        "several": {"frequency_penalty": 0.1, "min_new_tokens": 2},
    }
    out: dict = {}
    for name, params in cases.items():
        req = types.SimpleNamespace(sampling_params=SamplingParams(**params), custom_logit_processor=None)
        out[name] = ddtree.validate_request(req)
    req = types.SimpleNamespace(sampling_params=SamplingParams(), custom_logit_processor='{"callable": "x"}')
    out["custom_logit_processor"] = ddtree.validate_request(req)
    out["dflash_has_no_extra_check"] = getattr(SpeculativeAlgorithm.DFLASH, "validate_request", None) is None
    from sglang.srt.speculative.dflash_utils import validate_dflash_request

    dflash_req = types.SimpleNamespace(
        sampling_params=SamplingParams(frequency_penalty=0.5, min_new_tokens=3),
        custom_logit_processor='{"callable": "x"}',
        return_logprob=False,
    )
    out["dflash_custom_logit_processor"] = validate_dflash_request(dflash_req)
    dflash_req.custom_logit_processor = None
    out["dflash_penalties"] = validate_dflash_request(dflash_req)
    from sglang.srt.speculative.tree_penalties import custom_logit_processor_refusal

    # What the tokenizer manager and /generate (streams, before the HTTP 200) ask of a GenerateReqInput field.
    processor = '{"callable": "x"}'
    out["refusal"] = {
        "ddtree": custom_logit_processor_refusal(processor, "DDTREE"),
        "dflash_batch": custom_logit_processor_refusal([None, processor], "DFLASH"),
        "batch_without": custom_logit_processor_refusal([None, None], "DDTREE"),
        "plain": custom_logit_processor_refusal(processor, None),
        "eagle": custom_logit_processor_refusal(processor, "EAGLE"),
    }
    return out


def _batch_invariant_facts() -> dict:
    """The worker's last line of defence: a verify batch with a custom logit processor (penalties: served)."""
    from sglang.srt.speculative.ddtree_worker import unsupported_sampling_in_batch

    def info(required: bool, custom: bool):
        return types.SimpleNamespace(
            penalizer_orchestrator=types.SimpleNamespace(is_required=required),
            has_custom_logit_processor=custom,
        )

    return {
        "clean": unsupported_sampling_in_batch(info(False, False)),
        "none": unsupported_sampling_in_batch(None),
        "penalties": unsupported_sampling_in_batch(info(True, False)),
        "custom": unsupported_sampling_in_batch(info(False, True)),
    }


def _sliding_window_facts(args) -> dict:
    """target_sliding_window on model-runner stubs, and DDTreeWorker refusing such a target at start (the
    check runs before DFlashWorker.__init__, so stubs carry it that far)."""
    import torch
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.speculative.ddtree_worker import DDTreeWorker, target_sliding_window

    def runner(window, layer_windows):
        model = torch.nn.ModuleList(
            [
                RadixAttention(2, 8, 1.0, 2, layer_id=i, sliding_window_size=w)
                for i, w in enumerate(layer_windows)
            ]
        )
        return types.SimpleNamespace(sliding_window_size=window, model=model)

    out = {
        "full": target_sliding_window(runner(None, [-1, -1])),
        "runner_window": target_sliding_window(runner(4096, [-1, -1])),
        "layer_window": target_sliding_window(runner(None, [-1, 512])),
    }
    worker = DDTreeWorker.__new__(DDTreeWorker)
    try:
        DDTreeWorker.__init__(
            worker, args, 0, 0, None, 0, 0, 0, 0, types.SimpleNamespace(model_runner=runner(4096, [4096]))
        )
        out["worker_error"] = None
    except RuntimeError as exc:
        out["worker_error"] = str(exc)
    return out


class _StopAfterWarningCheck(Exception):
    """Raised by a stub where DFlash's decode step goes on to draft, right after its sampling warning."""


def _fallback_warning_facts() -> dict:
    """DFlash's decode step on a non-greedy batch where sgl_kernel's chain sampling kernel is missing: DFLASH
    warns that it falls back to greedy verification; DDTREE (which samples with its own verify) must not."""
    import logging

    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import dflash_worker
    from sglang.srt.speculative.ddtree_worker import DDTreeWorker

    records: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    def stop(*_args, **_kwargs):
        raise _StopAfterWarningCheck

    handler = _Collect()
    dflash_worker.logger.addHandler(handler)
    saved = dflash_worker.is_dflash_sampling_verify_available
    dflash_worker.is_dflash_sampling_verify_available = lambda: False
    batch = types.SimpleNamespace(
        forward_mode=ForwardMode.DECODE,
        has_grammar=False,
        sampling_info=types.SimpleNamespace(is_all_greedy=False),
        batch_size=stop,  # the first thing the step does after its warning check
    )
    out: dict = {}
    try:
        for name, cls in (("dflash", dflash_worker.DFlashWorker), ("ddtree", DDTreeWorker)):
            worker = cls.__new__(cls)
            worker._warned_sampling_fallback = False  # what DFlashWorker.__init__ sets
            worker.tp_rank = 0
            records.clear()
            with contextlib.suppress(_StopAfterWarningCheck):
                dflash_worker.DFlashWorker._prepare_for_speculative_decoding(worker, batch, None)
            out[name] = [r for r in records if "falling back to greedy" in r]
    finally:
        dflash_worker.is_dflash_sampling_verify_available = saved
        dflash_worker.logger.removeHandler(handler)
    return out


def _warm_up_facts() -> dict:
    """The worker's start-up warm-up when a Triton kernel fails to compile (stubbed: no GPU here): a logged
    warning and no warmed paths instead of an exception; and the Triton sampling path's default (off)."""
    import logging
    import os

    from sglang.srt.speculative import ddtree_utils, ddtree_worker

    records: list[tuple[int, str]] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append((record.levelno, record.getMessage()))

    def broken(*_args, **_kwargs):
        raise RuntimeError("PassManager::run failed (stub)")

    handler = _Collect()
    ddtree_worker.logger.addHandler(handler)
    saved = ddtree_worker.warm_up_kernels
    ddtree_worker.warm_up_kernels = broken
    try:
        warmed = ddtree_worker.warm_up_kernels_or_warn(8, 4, 7, 1000, "cpu", None)
    finally:
        ddtree_worker.warm_up_kernels = saved
        ddtree_worker.logger.removeHandler(handler)
    saved_env = os.environ.pop("SGLANG_DDTREE_TRITON_SAMPLING", None)
    try:
        default_on = ddtree_utils._sampling_kernels() is not None
        os.environ["SGLANG_DDTREE_TRITON_SAMPLING"] = "0"
        switched_off = ddtree_utils._sampling_kernels() is not None
        del os.environ["SGLANG_DDTREE_TRITON_SAMPLING"]
    finally:
        if saved_env is not None:
            os.environ["SGLANG_DDTREE_TRITON_SAMPLING"] = saved_env
    return {
        "warmed": warmed,
        "warnings": [message for level, message in records if level == logging.WARNING],
        "sampling_kernels_by_default": default_on,
        "sampling_kernels_switched_off": switched_off,
        "greedy_kernels_importable": ddtree_utils._kernels() is not None,
    }


def whole_vocab_lm_head(weight) -> types.SimpleNamespace:
    """A stand-in for SGLang's vocab-parallel LM head at TP 1: the whole vocabulary (weight [vocab, hidden])
    on this rank from id 0, no added tokens: what the drafter's top-k / argmax read of it."""
    vocab = int(weight.shape[0])
    shard = types.SimpleNamespace(
        num_org_elements=vocab,
        num_org_elements_padded=vocab,
        num_added_elements=0,
        org_vocab_start_index=0,
        added_vocab_start_index=vocab,
    )
    return types.SimpleNamespace(weight=weight, shard_indices=shard)


def _topk_facts() -> dict:
    """The worker's vocab-parallel top-k (TP 1) against log_softmax + topk on the full logits."""
    import torch
    from sglang.srt.speculative.ddtree_worker import DDTreeWorker

    torch.manual_seed(0)
    hidden, vocab, rows = 8, 40, 6
    weight = torch.randn(vocab, hidden)
    hs = torch.randn(rows, hidden)
    worker = DDTreeWorker.__new__(DDTreeWorker)
    worker.ddtree_topk, worker.ddtree_budget = 3, 8
    worker.model_runner = types.SimpleNamespace(model_config=types.SimpleNamespace(vocab_size=vocab))
    lm_head = whole_vocab_lm_head(weight)
    vals, ids = worker._draft_topk_from_vocab_parallel_head(hidden_states=hs, lm_head=lm_head, chunk_size=4)
    # the served case: every row in one chunk (the single-chunk return, no output buffers)
    one_vals, one_ids = worker._draft_topk_from_vocab_parallel_head(hidden_states=hs, lm_head=lm_head)
    ref_vals, ref_ids = torch.topk(torch.log_softmax(hs @ weight.T, dim=-1), 3, dim=-1)
    return {
        "ids_equal": bool(torch.equal(ids, ref_ids)),
        "max_abs_err": float((vals - ref_vals).abs().max()),
        "one_chunk_equals_chunked": bool(torch.equal(one_ids, ids) and torch.equal(one_vals, vals)),
        "one_chunk_dtypes": [str(one_vals.dtype), str(one_ids.dtype)],
    }


def _tree_stage_facts() -> dict:
    """The worker's tree stage (patch ddtree-step-graph) at TP 1 against the reference path (log_softmax ->
    build_ddtree -> root + nodes at seq_len + depth); BatchGraphs replays nothing for a size it did not
    capture; _build_verify_input copies its inputs into the graphs' buffers and takes the captured output
    (a stand-in capture: the stage run over the buffers; CUDA graphs cannot run on CPU, the GPU test replays
    real ones), which is the same verify input as the eager stage's; the refusal reasons."""
    import torch
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import ddtree_info, dflash_info, step_graphs
    from sglang.srt.speculative.ddtree_utils import build_ddtree
    from sglang.srt.speculative.ddtree_worker import DDTreeWorker

    ddtree_info.assign_req_to_token_pool_func = _assign_req_to_token_reference
    dflash_info.assign_req_to_token_pool_func = _assign_req_to_token_reference
    torch.manual_seed(1)
    hidden, vocab, bs, depth, budget, topk = 8, 40, 3, 4, 8, 3
    weight = torch.randn(vocab, hidden)
    lm_head = whole_vocab_lm_head(weight)
    worker = DDTreeWorker.__new__(DDTreeWorker)
    worker.ddtree_topk, worker.ddtree_budget, worker.tree_depth = topk, budget, depth
    worker.block_size, worker.num_verify_tokens = depth + 1, budget + 1
    worker.model_runner = types.SimpleNamespace(model_config=types.SimpleNamespace(vocab_size=vocab))
    worker.target_worker = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(model=types.SimpleNamespace(lm_head=lm_head))
    )
    worker.page_size = 1
    hs = torch.randn(bs * depth, hidden)
    root = torch.tensor([5, 7, 9])
    seq = torch.tensor([10, 3, 100])
    tree, ids, pos = worker._tree_stage(hs, root, seq)
    ref = build_ddtree(torch.log_softmax(hs @ weight.T, dim=-1).view(bs, depth, vocab), budget, topk)
    calls = []

    def counted(*args):
        calls.append(args[1].shape[0])
        return worker._tree_stage(*args)

    graphs = step_graphs.BatchGraphs(
        "tree stage",
        counted,
        batch_sizes=[bs],
        inputs=[
            step_graphs.GraphInput(depth, (hidden,), weight.dtype),
            step_graphs.GraphInput(1, (), torch.long),
            step_graphs.GraphInput(1, (), torch.long),
        ],
        device=torch.device("cpu"),
    )
    not_captured = graphs.replay(bs, hs, root, seq)
    # A stand-in capture (CUDA graphs cannot run on CPU): the output is made over the input buffers once, and
    # a "replay" recomputes the stage from the buffers into those same output tensors, as a graph would.
    views = graphs._views(bs)
    captured_output = worker._tree_stage(*views)

    def tensors(output) -> list:
        tree, ids_out, pos_out = output
        fields = [getattr(tree, f.name) for f in dataclasses.fields(tree)]
        return [t for t in fields if isinstance(t, torch.Tensor)] + [ids_out, pos_out]

    def stand_in_replay() -> None:
        calls.append("replay")
        for kept, fresh in zip(tensors(captured_output), tensors(worker._tree_stage(*views)), strict=True):
            kept.copy_(fresh)

    graphs.graphs[bs] = types.SimpleNamespace(
        graph=types.SimpleNamespace(replay=stand_in_replay), output=captured_output
    )

    def verify_input(graphs_object):
        worker.tree_stage_graphs = graphs_object
        allocator = TokenToKVPoolAllocator(128, torch.bfloat16, "cpu", None, False)
        batch = types.SimpleNamespace(
            forward_mode=ForwardMode.DECODE,
            batch_size=lambda: bs,
            sampling_info=None,
            tree_cache=types.SimpleNamespace(
                token_to_kv_pool_allocator=allocator, is_chunk_cache=lambda: True
            ),
            req_pool_indices=torch.tensor([1, 0, 2]),
            req_to_token_pool=types.SimpleNamespace(req_to_token=torch.full((3, 160), -1, dtype=torch.int32)),
            seq_lens=seq.clone(),
            seq_lens_cpu=seq.clone(),
            device="cpu",
        )
        block = torch.zeros((bs, depth + 1), dtype=torch.long)
        block[:, 0] = root
        out = types.SimpleNamespace(
            hidden_states=torch.cat([torch.zeros(bs, 1, hidden), hs.view(bs, depth, hidden)], 1)
        )
        spec = worker._build_verify_input(
            batch=batch, draft_logits_output=out, block_ids=block, positions_2d=None, lm_head=lm_head
        )
        return spec.draft_token.tolist(), spec.positions.tolist(), spec.custom_mask.tolist()

    calls.clear()
    through_graphs = verify_input(graphs)
    calls_through_graphs = list(calls)
    without = verify_input(None)
    refusal = step_graphs.step_graphs_refusal
    cuda = torch.device("cuda", 0)
    os.environ.pop(step_graphs.STEP_GRAPHS_ENV, None)
    unset = refusal(device=cuda, tp_size=1, cuda_graphs=True)  # on unless switched off
    os.environ[step_graphs.STEP_GRAPHS_ENV] = "0"
    switched_off = refusal(device=cuda, tp_size=1, cuda_graphs=True)
    os.environ[step_graphs.STEP_GRAPHS_ENV] = "1"
    os.environ[step_graphs.STEP_GRAPHS_TP_ENV] = "1"
    tp2_opted_in = refusal(device=cuda, tp_size=2, cuda_graphs=True)
    os.environ.pop(step_graphs.STEP_GRAPHS_TP_ENV)
    facts = {
        "tokens_equal": bool(torch.equal(tree.tokens, ref.tokens)),
        "parents_equal": bool(torch.equal(tree.parents, ref.parents)),
        "mask_equal": bool(torch.equal(tree.mask, ref.mask)),
        "ids_are_root_then_nodes": bool(
            torch.equal(ids.view(bs, -1), torch.cat([root[:, None], ref.tokens], 1))
        ),
        "positions_are_seq_len_plus_depth": bool(
            torch.equal(pos.view(bs, -1), seq[:, None] + ref.verify_depth)
        ),
        "uncaptured_replay": not_captured,
        "verify_input_through_graphs_equal": through_graphs == without,
        "calls_through_graphs": calls_through_graphs,
        "refusals": {
            "cpu": refusal(device=torch.device("cpu"), tp_size=1, cuda_graphs=True),
            "tp2": refusal(device=cuda, tp_size=2, cuda_graphs=True),
            "tp2_opted_in": tp2_opted_in,
            "tp1_context": step_graphs.tp_capture_context(1),
            "tp2_context": getattr(step_graphs.tp_capture_context(2), "__name__", None),
            "no_graphs": refusal(device=cuda, tp_size=1, cuda_graphs=False),
            "switched_off": switched_off,
            "cuda_tp1": refusal(device=cuda, tp_size=1, cuda_graphs=True),
            "unset": unset,
        },
    }
    os.environ.pop(step_graphs.STEP_GRAPHS_ENV)
    return facts


class _GlooTpGroup:
    """Stand-in for SGLang's TP GroupCoordinator on CPU: its all_gather_into_tensor is a CUDA-only custom op;
    this one gathers the same rank-ordered concatenation with torch.distributed (gloo)."""

    def __init__(self, world_size: int):
        self.world_size = world_size

    def all_gather_into_tensor(self, out, inp) -> None:
        import torch
        import torch.distributed as dist

        parts = [torch.empty_like(inp) for _ in range(self.world_size)]
        dist.all_gather(parts, inp)
        out.copy_(torch.cat(parts))

    def broadcast(self, tensor, src: int = 0):
        import torch.distributed as dist

        dist.broadcast(tensor, src=src)
        return tensor


def _tp_rank_walk(rank: int, world: int) -> tuple[list, list]:
    """Sampling verify on one TP rank whose coins differ from the other ranks' (seed 100 + rank): (the walk
    this rank alone would take, the walk verify applies after its TP broadcast)."""
    import torch
    from sglang.srt.speculative import ddtree_info
    from sglang.srt.speculative.ddtree_utils import build_ddtree, verify_input_ids

    ddtree_info.get_tp_group = lambda: _GlooTpGroup(world)
    gen = torch.Generator().manual_seed(9)
    bs, budget, vocab = 16, 6, 8
    size = budget + 1
    tree = build_ddtree(torch.randn(bs, 3, vocab, generator=gen).log_softmax(-1), budget, 3)
    logits = torch.randn(bs * size, vocab, generator=gen)
    info = types.SimpleNamespace(
        temperatures=torch.ones(bs, 1),
        is_all_greedy=False,
        need_top_k_sampling=False,
        need_top_p_sampling=False,
        need_min_p_sampling=False,
    )
    spec = ddtree_info.DDTreeVerifyInput(
        draft_token=verify_input_ids(tree, torch.zeros(bs, dtype=torch.long)).reshape(-1),
        positions=torch.zeros(bs * size, dtype=torch.long),
        draft_token_num=size,
        tree=tree,
    )
    torch.manual_seed(100 + rank)
    local = tree.verify_sampling(ddtree_info.target_probs_for_sampling(logits, info, size).view(bs, size, -1))
    torch.manual_seed(100 + rank)
    applied = spec._walk(logits, info, bs)
    return [t.tolist() for t in local], [t.tolist() for t in applied]


def _tp_rank_topk(rank: int, world: int, port: int, queue) -> None:
    """One TP rank holding a vocab shard: the worker's top-k vs log_softmax + topk over the full vocab."""
    import torch
    import torch.distributed as dist
    from sglang.srt.speculative import ddtree_worker

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=world, rank=rank)
    ddtree_worker.get_tp_group = lambda: _GlooTpGroup(world)
    torch.manual_seed(0)
    hidden, vocab, rows, k = 8, 48, 6, 4
    weight, hs = torch.randn(vocab, hidden), torch.randn(rows, hidden)
    part = vocab // world
    shard = types.SimpleNamespace(
        num_org_elements=part,
        num_org_elements_padded=part,
        num_added_elements=0,
        org_vocab_start_index=rank * part,
        added_vocab_start_index=vocab,
    )
    worker = ddtree_worker.DDTreeWorker.__new__(ddtree_worker.DDTreeWorker)
    worker.ddtree_topk, worker.ddtree_budget = k, 8
    worker.model_runner = types.SimpleNamespace(model_config=types.SimpleNamespace(vocab_size=vocab))
    head = types.SimpleNamespace(weight=weight[rank * part : (rank + 1) * part], shard_indices=shard)
    vals, ids = worker._draft_topk_from_vocab_parallel_head(hidden_states=hs, lm_head=head, chunk_size=4)
    ref_vals, ref_ids = torch.topk(torch.log_softmax(hs @ weight.T, dim=-1), k, dim=-1)
    walk = _tp_rank_walk(rank, world)
    queue.put(
        (rank, ids.tolist(), bool(torch.equal(ids, ref_ids)), float((vals - ref_vals).abs().max()), walk)
    )
    dist.destroy_process_group()


def _tp_facts(world: int = 2) -> dict:
    """The TP merge across `world` CPU processes (gloo): every rank must get the full-vocab top-k."""
    import multiprocessing

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_tp_rank_topk, args=(r, world, port, queue)) for r in range(world)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(60)
    results.sort()
    return {
        "ranks": [r[0] for r in results],
        "all_equal_reference": all(r[2] for r in results),
        "same_on_all_ranks": all(r[1] == results[0][1] for r in results),
        "max_abs_err": max(r[3] for r in results),
        "walk_same_on_all_ranks": all(r[4][1] == results[0][4][1] for r in results),
        "walk_is_rank0s": results[0][4][1] == results[0][4][0],
        "ranks_drew_differently": any(r[4][0] != results[0][4][0] for r in results),
    }


def _methods_core_calls_but_spec_lacks(algo: object) -> list[str]:
    """Every `spec_algorithm.NAME(` / `speculative_algorithm.NAME(` call in sglang/srt that the DDTREE spec
    object cannot answer (the scheduler's create_future_map was one: CustomSpecAlgo lacks it upstream)."""
    import re
    from pathlib import Path

    import sglang

    pattern = re.compile(r"spec(?:ulative)?_algorithm\.([a-z_]+)\(")
    names: set[str] = set()
    for path in (Path(sglang.__file__).parent / "srt").rglob("*.py"):
        names.update(pattern.findall(path.read_text(errors="replace")))
    names.discard("upper")  # server_args.speculative_algorithm is a string there
    return sorted(n for n in names if not callable(getattr(algo, n, None)))


def main() -> None:
    target, drafter = sys.argv[1], sys.argv[2]
    base = [
        "--model-path",
        target,
        "--skip-tokenizer-init",
        "--device",
        "cpu",
        "--speculative-algorithm",
        "DDTREE",
        "--speculative-draft-model-path",
        drafter,
        "--attention-backend",
        "triton",
    ]
    facts: dict = {}
    cases = {
        "defaults": [],
        "explicit": ["--speculative-ddtree-budget", "7", "--speculative-ddtree-topk", "3"],
        "block4": ["--speculative-num-draft-tokens", "4", "--speculative-ddtree-budget", "2"],
        "block_over_verify": ["--speculative-ddtree-budget", "2"],  # B = 8 from the drafter config
        "window": ["--speculative-draft-window-size", "64"],
        "window_too_small": ["--speculative-draft-window-size", "4"],
        "budget0": ["--speculative-ddtree-budget", "0"],
        "topk0": ["--speculative-ddtree-topk", "0"],
        "budget_too_big": ["--speculative-ddtree-budget", "64"],
        "budget_not_int": ["--speculative-ddtree-budget", "eight"],
        "pp2": ["--pp-size", "2"],
        "page16": ["--page-size", "16"],
        "flashinfer": ["--attention-backend", "flashinfer"],
        # An MLA backend picked for Kimi on Hopper/Blackwell arrives with its page size already set.
        "flashinfer_page64": ["--attention-backend", "flashinfer", "--page-size", "64"],
        "lowercase": ["--speculative-algorithm", "ddtree"],
    }
    for name, extra in cases.items():
        facts[f"args_{name}"] = _args_case(base, extra)
    facts["args_no_drafter"] = _args_case(base[:7] + base[9:], [])
    try:
        from sglang.srt.speculative.ddtree_info import DDTreeVerifyInput
        from sglang.srt.speculative.ddtree_worker import DDTreeWorker
        from sglang.srt.speculative.dflash_info import DFlashVerifyInput
        from sglang.srt.speculative.dflash_worker import DFlashWorker
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        algo = SpeculativeAlgorithm.from_string("DDTREE")
        facts["algo"] = {
            "type": type(algo).__name__,
            "is_dflash": algo.is_dflash(),
            "is_ddtree": algo.is_ddtree(),
            "target_verify_for_draft": algo.supports_target_verify_for_draft(),
            "spec_v2": algo.supports_spec_v2(),
            "worker": algo.create_worker(types.SimpleNamespace(disable_overlap_schedule=True)).__name__,
            "worker_is_dflash": issubclass(DDTreeWorker, DFlashWorker),
            "verify_is_dflash": issubclass(DDTreeVerifyInput, DFlashVerifyInput),
            "missing_methods": _methods_core_calls_but_spec_lacks(algo),
        }
        graph_flags = ["--speculative-ddtree-budget", "6", "--speculative-num-draft-tokens", "4"]
        args = _server_args([*base, *graph_flags])
        _init_single_process_groups(args)
        facts["cuda_graph"] = _cuda_graph_facts(args)
        facts["verify"] = _verify_facts()
        os.environ["SGLANG_DFLASH_FAST_STEP"] = "0"  # patch 0008's switch: the device-mask keep path
        facts["verify_device_masks"] = _verify_facts()
        os.environ.pop("SGLANG_DFLASH_FAST_STEP")
        facts["prepare"] = _prepare_facts()
        facts["sampling"] = _sampling_facts()
        facts["topk"] = _topk_facts()
        facts["tree_stage"] = _tree_stage_facts()
        facts["requests"] = _request_facts()
        facts["batch_invariant"] = _batch_invariant_facts()
        facts["sliding_window"] = _sliding_window_facts(args)
        facts["fallback_warning"] = _fallback_warning_facts()
        facts["warm_up"] = _warm_up_facts()
        facts["filter_order"] = _filter_order_facts()
        facts["topk_tp2"] = _tp_facts(2)
    except Exception:
        facts["probe_error"] = traceback.format_exc()
    print("DDTREE-PROBE " + json.dumps(facts))


if __name__ == "__main__":
    main()
