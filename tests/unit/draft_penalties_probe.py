"""Probe for tests/unit/test_draft_penalties.py: the request options on the drafter's logits (patch
ddtree-draft-penalties) in the real, patched sglang on CPU.

Run with PYTHONPATH = the patched CPU sglang environment (tests/unit/test_ddtree_sglang.py builds it). Prints
one line `DRAFT-PENALTIES-PROBE {json}`.

The reference applies the options by hand from the token counts of the request's output (history + root):
frequency * count and presence, min_new_tokens' EOS/stop ids at the rows whose output would be too short,
repetition scaling on seen tokens, logit_bias. The batches are real SamplingBatchInfo objects fed by the real
penalizers (request_options_probe's stand-ins: namespace requests and batch, real SamplingParams). The worker
routing uses DDTreeWorker / DFlashWorker made without __init__ (ddtree_sglang_probe's stand-ins), with spies
on the graph replay and on adjust_draft_logits.
"""

from __future__ import annotations

import json
import os
import traceback
import types

import ddtree_sglang_probe as base
import request_options_probe as rop
import torch

VOCAB = rop.VOCAB
DEPTH = 4
MIXED = [
    {"frequency_penalty": 0.5, "presence_penalty": 0.3, "repetition_penalty": 1.3, "min_new_tokens": 6,
     "stop_token_ids": [rop.STOP], "logit_bias": {"7": 2.5, "9": -1.25}},
    {},
    {"repetition_penalty": 1.2},
    {"logit_bias": {"11": 4.0}, "min_new_tokens": 3},
]  # fmt: skip
HISTORY = [[7, 9, 7], [9, 7, 9], [7, 7, 12], [11, 13, 7]]  # fed one token a step, as plain decoding does
ROOTS = [9, 7, 7, 12]  # the verify roots (the last output token, not yet in the penalizers)


def mixed_batch():
    batch = rop._batch([rop._request(**s) for s in MIXED])
    rop._feed(batch, [list(step) for step in zip(*HISTORY, strict=True)])
    return batch


def hand_reference(settings: dict, seen: list[int], rows: torch.Tensor) -> torch.Tensor:
    """rows float [DEPTH, V] of one request adjusted by hand: `seen` is its whole output (history + root)."""
    counts = torch.bincount(torch.tensor(seen), minlength=rows.shape[1]).to(torch.float32)
    out = rows.clone()
    if "frequency_penalty" in settings:
        out = out - settings["frequency_penalty"] * counts
    if "presence_penalty" in settings:
        out = out - settings["presence_penalty"] * (counts > 0).to(torch.float32)
    if "min_new_tokens" in settings:
        stops = [rop.EOS, *settings.get("stop_token_ids", [])]
        for j in range(rows.shape[0]):  # row j follows len(seen) + j output tokens
            if len(seen) + j < settings["min_new_tokens"]:
                out[j, stops] = float("-inf")
    if "repetition_penalty" in settings:
        factor = settings["repetition_penalty"]
        scaled = torch.where(out < 0, out * factor, out / factor)
        out = torch.where(counts > 0, scaled, out)
    for token, bias in settings.get("logit_bias", {}).items():
        out[:, int(token)] += bias
    return out


def reference_case() -> dict:
    """adjust_draft_logits on a mixed batch against the hand reference; the request without options is left
    bit for bit; a TP-like split (two column shards, chunks of two requests) gives the same logits."""
    from sglang.srt.speculative.tree_penalties import adjust_draft_logits, draft_adjustment

    gen = torch.Generator().manual_seed(3)
    batch = mixed_batch()
    bs = len(MIXED)
    logits = torch.randn(bs * DEPTH, VOCAB, generator=gen) * 3
    adjustment = draft_adjustment(batch.sampling_info, torch.tensor(ROOTS), DEPTH)
    got = logits.clone()
    adjust_draft_logits(got, adjustment)
    per_request = []
    for b, settings in enumerate(MIXED):
        rows = slice(b * DEPTH, (b + 1) * DEPTH)
        want = hand_reference(settings, HISTORY[b] + [ROOTS[b]], logits[rows])
        finite = torch.isfinite(want)
        per_request.append(
            {
                "same_inf": bool(torch.equal(torch.isinf(got[rows]), torch.isinf(want))),
                "max_abs_diff": float((got[rows][finite] - want[finite]).abs().max()),
                "changed": bool(not torch.equal(got[rows], logits[rows])),
                "bit_equal_input": bool(torch.equal(got[rows], logits[rows])),
                "inf_rows": [int(torch.isinf(r).any()) for r in got[rows]],
            }
        )
    split = logits.clone()
    cut = 17
    for first in range(0, bs, 2):
        rows = slice(first * DEPTH, (first + 2) * DEPTH)
        for cols in (slice(0, cut), slice(cut, VOCAB)):
            part = split[rows, cols].clone()
            adjust_draft_logits(part, adjustment, row_start=first * DEPTH, col_start=cols.start)
            split[rows, cols] = part
    padded = torch.cat(
        [logits, torch.randn(bs * DEPTH, 3, generator=gen)], dim=1
    )  # an LM head past the vocab
    padded_got = padded.clone()
    adjust_draft_logits(padded_got, adjustment)
    misaligned = None
    try:
        adjust_draft_logits(logits[1 : 1 + DEPTH].clone(), adjustment, row_start=1)
    except ValueError as exc:
        misaligned = str(exc)
    return {
        "per_request": per_request,
        "split_equal": bool(torch.equal(split, got)),
        "padded_equal": bool(
            torch.equal(padded_got[:, :VOCAB], got) and torch.equal(padded_got[:, VOCAB:], padded[:, VOCAB:])
        ),
        "misaligned_refused": misaligned,
    }


def no_options_case() -> dict:
    """A batch whose requests set nothing: no adjustment at all (draft_adjustment None)."""
    from sglang.srt.speculative.tree_penalties import draft_adjustment

    batch = rop._batch([rop._request(), rop._request(temperature=0.5)])
    rop._feed(batch, [[7, 9]])
    return {"adjustment_is_none": draft_adjustment(batch.sampling_info, torch.tensor([9, 7]), DEPTH) is None}


def switch_case() -> dict:
    """SGLANG_DDTREE_DRAFT_PENALTIES: unset and "1" on, "0" off, anything else refused in one line."""
    from sglang.srt.speculative.tree_penalties import DRAFT_PENALTIES_ENV, draft_penalties_enabled

    out: dict = {}
    saved = os.environ.pop(DRAFT_PENALTIES_ENV, None)
    try:
        out["unset"] = draft_penalties_enabled()
        for value in ("1", "0", "2", "true", "", " 1"):
            os.environ[DRAFT_PENALTIES_ENV] = value
            try:
                out[repr(value)] = draft_penalties_enabled()
            except ValueError as exc:
                out[repr(value)] = f"refused: {exc}"
    finally:
        os.environ.pop(DRAFT_PENALTIES_ENV, None)
        if saved is not None:
            os.environ[DRAFT_PENALTIES_ENV] = saved
    return out


def _draft_block(bs: int, hidden: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, types.SimpleNamespace]:
    """(hidden rows [bs * DEPTH, hidden], block ids [bs, DEPTH + 1] with ROOTS first, the drafter's output:
    those rows after a zero row)."""
    hs = torch.randn(bs * DEPTH, hidden, generator=torch.Generator().manual_seed(seed))
    block = torch.zeros((bs, DEPTH + 1), dtype=torch.long)
    block[:, 0] = torch.tensor(ROOTS[:bs])
    hidden_states = torch.cat([torch.zeros(bs, 1, hidden), hs.view(bs, DEPTH, -1)], 1)
    out = types.SimpleNamespace(hidden_states=hidden_states)
    return hs, block, out


def _routing_batch(batch, seq: torch.Tensor):
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    bs = len(batch.reqs)
    batch.forward_mode = ForwardMode.DECODE
    batch.batch_size = lambda: bs
    batch.tree_cache = types.SimpleNamespace(
        token_to_kv_pool_allocator=TokenToKVPoolAllocator(256, torch.bfloat16, "cpu", None, False),
        is_chunk_cache=lambda: True,
    )
    batch.req_pool_indices = torch.arange(bs)
    batch.req_to_token_pool = types.SimpleNamespace(req_to_token=torch.full((bs, 200), -1, dtype=torch.int32))
    batch.seq_lens, batch.seq_lens_cpu = seq.clone(), seq.clone()
    return batch


def ddtree_routing_case() -> dict:
    """DDTreeWorker._build_verify_input: a batch with options builds its tree eagerly from adjusted draft
    logits (equal to the tree from the hand-adjusted log-probs) and never replays the captured stage; a batch
    without options, or the switch off, replays it and never calls adjust_draft_logits."""
    from sglang.srt.speculative import ddtree_info, ddtree_worker, dflash_info
    from sglang.srt.speculative.ddtree_utils import build_ddtree

    ddtree_info.assign_req_to_token_pool_func = base._assign_req_to_token_reference
    dflash_info.assign_req_to_token_pool_func = base._assign_req_to_token_reference
    ddtree_worker.get_tp_group = lambda: types.SimpleNamespace(world_size=1)  # one rank, no process group
    gen = torch.Generator().manual_seed(5)
    hidden, budget, topk = 8, 8, 3
    weight = torch.randn(VOCAB, hidden, generator=gen)
    lm_head = base.whole_vocab_lm_head(weight)
    worker = ddtree_worker.DDTreeWorker.__new__(ddtree_worker.DDTreeWorker)
    worker.ddtree_topk, worker.ddtree_budget, worker.tree_depth = topk, budget, DEPTH
    worker.block_size, worker.num_verify_tokens = DEPTH + 1, budget + 1
    worker.model_runner = types.SimpleNamespace(model_config=types.SimpleNamespace(vocab_size=VOCAB))
    worker.target_worker = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(model=types.SimpleNamespace(lm_head=lm_head))
    )
    worker.page_size = 1
    calls = {"replay": 0, "adjust": 0}

    def replay(bs, *inputs):
        calls["replay"] += 1
        return worker._tree_stage(*inputs)

    worker.tree_stage_graphs = types.SimpleNamespace(replay=replay)
    real_adjust = ddtree_worker.adjust_draft_logits

    def spy(*args, **kwargs):
        calls["adjust"] += 1
        return real_adjust(*args, **kwargs)

    ddtree_worker.adjust_draft_logits = spy
    seq = torch.tensor([10, 12, 9, 30])

    def run(batch, switch: bool) -> tuple[dict, torch.Tensor, torch.Tensor]:
        calls.update(replay=0, adjust=0)
        worker.draft_penalties = switch
        bs = len(batch.reqs)
        hs, block, out = _draft_block(bs, hidden, seed=8)
        spec = worker._build_verify_input(
            batch=_routing_batch(batch, seq[:bs]),
            draft_logits_output=out,
            block_ids=block,
            positions_2d=None,
            lm_head=lm_head,
        )
        return dict(calls), spec.draft_token.view(bs, -1), hs

    try:
        options_calls, options_tokens, hs = run(mixed_batch(), True)
        logits = (hs @ weight.T).float()
        want = torch.cat(
            [
                hand_reference(s, HISTORY[b] + [ROOTS[b]], logits[b * DEPTH : (b + 1) * DEPTH])
                for b, s in enumerate(MIXED)
            ]
        )
        ref = build_ddtree(torch.log_softmax(want, dim=-1).view(len(MIXED), DEPTH, VOCAB), budget, topk)
        plain = build_ddtree(torch.log_softmax(logits, dim=-1).view(len(MIXED), DEPTH, VOCAB), budget, topk)
        ref_ids = torch.cat([torch.tensor(ROOTS)[:, None], ref.tokens], 1)
        plain_ids = torch.cat([torch.tensor(ROOTS)[:, None], plain.tokens], 1)
        off_calls, off_tokens, _ = run(mixed_batch(), False)
        none_batch = rop._batch([rop._request() for _ in range(3)])
        none_calls, none_tokens, _ = run(none_batch, True)
    finally:
        ddtree_worker.adjust_draft_logits = real_adjust
    return {
        "options": options_calls,
        "options_tree_equals_hand_reference": bool(torch.equal(options_tokens, ref_ids)),
        "options_tree_differs_from_unadjusted": bool(not torch.equal(options_tokens, plain_ids)),
        "unoptioned_request_tree_unchanged": bool(torch.equal(options_tokens[1], plain_ids[1])),
        "switch_off": off_calls,
        "switch_off_tree_is_unadjusted": bool(torch.equal(off_tokens, plain_ids)),
        "no_options": none_calls,
        "no_options_tree_is_unadjusted": bool(torch.equal(none_tokens, plain_ids[:3])),
    }


def dflash_routing_case() -> dict:
    """DFlashWorker._build_verify_input: with options the chain is the argmax of the hand-adjusted logits
    (eager, no chain-stage replay); without options or with the switch off the captured chain stage replays
    and adjust_draft_logits is never called. The verify input class is a recording stand-in."""
    from sglang.srt.speculative import dflash_worker as dw

    gen = torch.Generator().manual_seed(9)
    hidden = 8
    weight = torch.randn(VOCAB, hidden, generator=gen)
    lm_head = base.whole_vocab_lm_head(weight)
    worker = object.__new__(dw.DFlashWorker)
    worker.__dict__.update(
        target_worker=types.SimpleNamespace(
            model_runner=types.SimpleNamespace(model=types.SimpleNamespace(lm_head=lm_head))
        ),
        model_runner=types.SimpleNamespace(attn_backend=None),
        block_size=DEPTH + 1,
        page_size=1,
        _draft_block_tokens_buf=torch.zeros((8, DEPTH + 1), dtype=torch.long),
    )
    calls = {"replay": 0, "adjust": 0}

    def replay(bs, hidden_rows, root):
        calls["replay"] += 1
        return worker._chain_stage(hidden_rows, root)

    worker._chain_stage_graphs = types.SimpleNamespace(replay=replay)

    class Recorded:
        def __init__(self, draft_token, positions, draft_token_num):
            self.draft_token = draft_token

        def prepare_for_verify(self, *args, **kwargs):
            pass

    saved = (
        dw.get_tp_group,
        dw.DFlashVerifyInput,
        dw.resolve_dflash_verify_mask_policy,
        dw.adjust_draft_logits,
    )

    def spy(*args, **kwargs):
        calls["adjust"] += 1
        return saved[3](*args, **kwargs)

    dw.get_tp_group = lambda: types.SimpleNamespace(world_size=1)
    dw.DFlashVerifyInput = Recorded
    dw.resolve_dflash_verify_mask_policy = lambda backend: (None, False)
    dw.adjust_draft_logits = spy

    def run(batch, switch: bool):
        calls.update(replay=0, adjust=0)
        worker.draft_penalties = switch
        bs = len(batch.reqs)
        hs, block, out = _draft_block(bs, hidden, seed=11)
        spec = worker._build_verify_input(
            batch=_routing_batch(batch, torch.full((bs,), 10)),
            draft_logits_output=out,
            block_ids=block,
            positions_2d=torch.zeros((bs, DEPTH + 1), dtype=torch.long),
            lm_head=lm_head,
        )
        return dict(calls), spec.draft_token.view(bs, -1).clone(), hs

    try:
        options_calls, chain, hs = run(mixed_batch(), True)
        logits = (hs @ weight.T).float()
        want = torch.cat(
            [
                hand_reference(s, HISTORY[b] + [ROOTS[b]], logits[b * DEPTH : (b + 1) * DEPTH])
                for b, s in enumerate(MIXED)
            ]
        )
        roots = torch.tensor(ROOTS)[:, None]
        ref = torch.cat([roots, want.argmax(-1).view(-1, DEPTH)], 1)
        plain = torch.cat([roots, logits.argmax(-1).view(-1, DEPTH)], 1)
        off_calls, off_chain, _ = run(mixed_batch(), False)
        none_calls, none_chain, _ = run(rop._batch([rop._request() for _ in range(3)]), True)
    finally:
        (
            dw.get_tp_group,
            dw.DFlashVerifyInput,
            dw.resolve_dflash_verify_mask_policy,
            dw.adjust_draft_logits,
        ) = saved
    return {
        "options": options_calls,
        "options_chain_equals_hand_reference": bool(torch.equal(chain, ref)),
        "options_chain_differs_from_unadjusted": bool(not torch.equal(chain, plain)),
        "switch_off": off_calls,
        "switch_off_chain_is_unadjusted": bool(torch.equal(off_chain, plain)),
        "no_options": none_calls,
        "no_options_chain_is_unadjusted": bool(torch.equal(none_chain, plain[:3])),
    }


def _drafted_verify_once(
    mode: str, batch, table: torch.Tensor, gen: torch.Generator, adjust: bool
) -> list[int]:
    """One verify step on the Markov target (request_options_probe's), the drafter being the unpenalised
    target plus noise, one depth after another from the previous depth's argmax; with `adjust` each depth's
    draft logits get the step's root-state adjustment (draft_adjustment / adjust_draft_logits) first."""
    from sglang.srt.speculative import ddtree_info, dflash_info
    from sglang.srt.speculative.tree_penalties import adjust_draft_logits, draft_adjustment

    ddtree_info.assign_req_to_token_pool_func = base._assign_req_to_token_reference
    dflash_info.assign_req_to_token_pool_func = base._assign_req_to_token_reference
    ddtree_info.get_tp_group = lambda: types.SimpleNamespace(world_size=1)
    budget, topk = 8, 3
    bs, vocab = len(batch.reqs), table.shape[1]
    roots = torch.tensor([r.output_ids[-1] for r in batch.reqs])
    adjustment = draft_adjustment(batch.sampling_info, roots, DEPTH) if adjust else None
    chain, logp = [roots], []
    for d in range(DEPTH):
        dist = table[chain[-1]] + torch.randn(bs, vocab, generator=gen) * 0.5
        if adjustment is not None:
            rows = torch.zeros(bs, DEPTH, vocab)
            rows[:, d] = dist
            rows = rows.view(bs * DEPTH, vocab)
            adjust_draft_logits(rows, adjustment)
            dist = rows.view(bs, DEPTH, vocab)[:, d]
        logp.append(torch.log_softmax(dist, dim=-1))
        chain.append(dist.argmax(dim=-1))
    return rop.verify_drafts(mode, batch, table, roots, logp, chain, budget, topk)


def _decode(mode: str, adjust: bool, seed: int, table: torch.Tensor, firsts: list[int]) -> tuple[list, int]:
    """(outputs, request verifies) of one batch decoded greedily by DDTREE trees or DFLASH chains."""
    gen = torch.Generator().manual_seed(seed)
    limit = 8 * rop.MAX_NEW * len(rop.DECODE_SETTINGS)
    outputs, _, verifies = rop.decode_batch(
        firsts,
        lambda batch: _drafted_verify_once(mode, batch, table, gen, adjust),
        lambda steps, verifies: verifies > limit,
    )
    return outputs, verifies


def decode_case(seeds: tuple[int, ...]) -> dict:
    """Whole greedy decodes (request_options_probe's six requests and Markov target, one table per seed) with
    drafts from the drafter with and without the adjustment: both equal plain decoding; over the seeds the
    adjusted one accepts more tokens per verify."""
    firsts = [7, 9, 11, 7, 7, 7]
    out: dict = {}
    for mode in ("ddtree", "dflash"):
        for adjust in (True, False):
            equal, verifies, tokens = [], 0, 0
            for seed in seeds:
                table = rop.markov_table(seed)
                plain = [
                    rop.plain_greedy(s, f, table) for s, f in zip(rop.DECODE_SETTINGS, firsts, strict=True)
                ]
                outputs, n = _decode(mode, adjust, seed, table, firsts)
                equal += [a == b for a, b in zip(outputs, plain, strict=True)]
                verifies += n
                tokens += sum(len(o) - 1 for o in outputs)
            out[f"{mode}_{'adjusted' if adjust else 'unadjusted'}"] = {
                "equal": equal,
                "request_verifies": verifies,
                "tokens_per_verify": tokens / verifies,
            }
    return out


def main() -> dict:
    return {
        "reference": reference_case(),
        "no_options": no_options_case(),
        "switch": switch_case(),
        "ddtree_routing": ddtree_routing_case(),
        "dflash_routing": dflash_routing_case(),
        "decode": decode_case(seeds=(6, 7, 8, 9)),
    }


if __name__ == "__main__":
    try:
        result = main()
    except Exception:
        result = {"probe_error": traceback.format_exc()}
    print("DRAFT-PENALTIES-PROBE " + json.dumps(result))
