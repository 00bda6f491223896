"""Probe for tests/unit/test_ddtree_request_options.py: per-node penalties in the real, patched sglang on CPU.

Run with PYTHONPATH = the patched CPU sglang environment (tests/unit/test_ddtree_sglang.py builds it). Prints
one line `REQUEST-OPTIONS-PROBE {json}`.

The reference is plain decoding, one token at a time: for every tree row it makes a one-request batch with
SGLang's own SamplingBatchInfo.from_schedule_batch, feeds the request's output so far and then the row's
root-to-node path to the real penalizers (BatchedPenalizerOrchestrator.cumulate_output_tokens, as
ScheduleBatch.prepare_for_decode does each step), and adjusts the row as the scheduler's forward copy does
(copy_for_forward, then apply_logits_bias: additive penalties, repetition scaling, logit_bias).

Stand-ins: the batch is a namespace with reqs and device (no model, no memory pools); the requests are
namespaces with real SamplingParams and a tokenizer namespace (eos and additional stop ids); the global
server args SamplingBatchInfo reads (deterministic inference, custom logit processors) are a namespace.
"""

from __future__ import annotations

import json
import random
import traceback
import types

import torch

VOCAB = 40
EOS = 3
STOP = 5  # a request's stop_token_ids entry


def _request(**params):
    from sglang.srt.sampling.sampling_params import SamplingParams

    sampling = SamplingParams(max_new_tokens=64, **params)
    sampling.normalize(None)
    return types.SimpleNamespace(
        sampling_params=sampling,
        custom_logit_processor=None,
        tokenizer=types.SimpleNamespace(eos_token_id=EOS, additional_stop_token_ids=None),
    )


REQUEST_SETTINGS = [
    {"frequency_penalty": 0.5, "presence_penalty": 0.3, "repetition_penalty": 1.3, "min_new_tokens": 7,
     "stop_token_ids": [STOP], "logit_bias": {"7": 2.5, "9": -1.25}},
    {"repetition_penalty": 0.8, "min_new_tokens": 3},
    {"logit_bias": {"11": 4.0}},
    {"frequency_penalty": -0.7, "presence_penalty": 1.1},
    {},
]  # fmt: skip


class _StubBatch(types.SimpleNamespace):
    """A namespace that can be weakly referenced (the orchestrator holds its batch by weakref)."""

    __slots__ = ("__weakref__",)


def _batch(reqs):
    from sglang.srt.sampling import sampling_batch_info as sbi

    sbi.get_global_server_args = lambda: types.SimpleNamespace(
        enable_deterministic_inference=False, enable_custom_logit_processor=False
    )
    batch = _StubBatch(reqs=reqs, device="cpu")
    batch.sampling_info = sbi.SamplingBatchInfo.from_schedule_batch(batch, VOCAB)
    return batch


def _feed(batch, tokens_per_step):
    """Plain decoding's feeding: one token per request per step (ScheduleBatch.prepare_for_decode)."""
    for step in tokens_per_step:
        batch.sampling_info.penalizer_orchestrator.cumulate_output_tokens(
            torch.tensor(step, dtype=torch.int64)
        )


def reference_row(settings: dict, fed: list[int], row_logits: torch.Tensor) -> torch.Tensor:
    """Plain decoding's adjusted logits for one request after it has fed `fed`, one token at a time."""
    batch = _batch([_request(**settings)])
    _feed(batch, [[t] for t in fed])
    forward_copy = batch.sampling_info.copy_for_forward()
    out = row_logits.clone().view(1, -1)
    forward_copy.apply_logits_bias(out)
    return out.view(-1)


def random_tree(rng: random.Random, size: int, padding: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens long [size], mask bool [size, size]) of a random tree, root first, parents before children;
    the last `padding` nodes are padding (token 0, row = itself only). Small token range: many repeats."""
    mask = torch.zeros((size, size), dtype=torch.bool)
    mask[0, 0] = True
    tokens = [rng.choice([EOS, STOP, 7, 9, 11, 12, 13])]
    for i in range(1, size - padding):
        parent = rng.randrange(i)
        mask[i] = mask[parent]
        mask[i, i] = True
        tokens.append(rng.choice([EOS, STOP, 7, 9, 11, 12, 13, tokens[0]]))
    for i in range(size - padding, size):
        mask[i, i] = True
        tokens.append(0)
    return torch.tensor(tokens, dtype=torch.int64), mask


def _compare(got: torch.Tensor, want: torch.Tensor) -> dict:
    same_inf = bool(torch.equal(torch.isinf(got), torch.isinf(want)))
    finite = torch.isfinite(want) & torch.isfinite(got)
    diff = float((got[finite] - want[finite]).abs().max()) if bool(finite.any()) else 0.0
    return {
        "same_inf": same_inf,
        "max_abs_diff": diff,
        "bit_equal_fraction": float((got == want).float().mean()),
        "argmax_equal": bool(torch.equal(got.argmax(dim=-1), want.argmax(dim=-1))),
    }


def tree_case(seed: int, size: int, history_len: int, chain: bool) -> dict:
    """Every row of a batch of random trees (or DFLASH chains) against the one-token-at-a-time reference."""
    from sglang.srt.speculative.tree_penalties import adjust_verify_logits, chain_mask

    rng = random.Random(seed)
    torch.manual_seed(seed)
    bs = len(REQUEST_SETTINGS)
    trees = [random_tree(rng, size, padding=0 if chain or b % 2 == 0 else 2) for b in range(bs)]
    tokens = torch.stack([t for t, _ in trees])
    mask = chain_mask(bs, size, "cpu") if chain else torch.stack([m for _, m in trees])
    if chain:
        tokens = torch.tensor(
            [[rng.choice([EOS, STOP, 7, 9, 11, 12]) for _ in range(size)] for _ in range(bs)]
        )
    histories = [[rng.choice([7, 9, 11, 12, 13, 20]) for _ in range(history_len)] for _ in range(bs)]
    logits = torch.randn(bs * size, VOCAB) * 3
    batch = _batch([_request(**s) for s in REQUEST_SETTINGS])
    _feed(batch, [[h[step] for h in histories] for step in range(history_len)])
    got = logits.clone()
    adjust_verify_logits(got, batch.sampling_info, tokens, mask)
    want = torch.empty_like(logits)
    for b in range(bs):
        for i in range(size):
            path = [int(tokens[b, j]) for j in range(size) if bool(mask[b, i, j]) or j == 0]
            want[b * size + i] = reference_row(REQUEST_SETTINGS[b], histories[b] + path, logits[b * size + i])
    real_rows = torch.ones(bs, size, dtype=torch.bool)
    for b in range(bs):
        real_rows[b] = mask[b].diagonal() & mask[b, :, 0]
    keep = real_rows.reshape(-1)
    result = _compare(got[keep], want[keep])
    result["rows"] = int(keep.sum())
    # What verify did before (one adjustment per request, repeated over its rows) must differ from the
    # reference, or these cases would not tell per-node adjustment apart.
    forward_copy = batch.sampling_info.copy_for_forward()
    per_request = torch.zeros(bs, VOCAB)
    forward_copy.apply_logits_bias(per_request)
    repeated = logits + torch.repeat_interleave(per_request, size, dim=0)
    result["per_request_matches_reference"] = bool(torch.equal(repeated[keep], want[keep]))
    result["changed_rows"] = int((got != logits).any(dim=1).sum())
    result["min_new_boundary_inside"] = bool(
        torch.isneginf(got[:size, EOS]).any() and torch.isfinite(got[:size, EOS]).any()
    )
    return result


def advance_case(seed: int, steps: int, size: int) -> dict:
    """Several verify steps fed by advance_penalties vs plain decoding fed one token per step: equal states,
    and equal adjusted rows afterwards."""
    from sglang.srt.speculative.tree_penalties import adjust_verify_logits, advance_penalties, chain_mask

    rng = random.Random(seed)
    bs = len(REQUEST_SETTINGS)
    batch = _batch([_request(**s) for s in REQUEST_SETTINGS])
    outputs = [[rng.choice([7, 9, 11])] for _ in range(bs)]  # the prefill's token: the first root
    for _ in range(steps):
        kept = torch.tensor(
            [[o[-1]] + [rng.choice([7, 9, 11, 12, 13, 20]) for _ in range(size - 1)] for o in outputs]
        )
        commit = torch.tensor([rng.randint(1, size) for _ in range(bs)], dtype=torch.int32)
        advance_penalties(batch.sampling_info, kept, commit)
        for b in range(bs):
            # commit tokens appended: commit - 1 accepted drafts, then the bonus (any token)
            outputs[b] += [*kept[b, 1 : int(commit[b])].tolist(), rng.choice([7, 9, 11, EOS])]
    # The state now counts every output token but the last (the next root).
    logits = torch.randn(bs * size, VOCAB) * 3
    roots = torch.tensor([o[-1] for o in outputs])
    tokens = torch.stack(
        [torch.cat([roots[b : b + 1], torch.tensor([9, 7, EOS, 11][: size - 1])]) for b in range(bs)]
    )
    got = logits.clone()
    adjust_verify_logits(got, batch.sampling_info, tokens, chain_mask(bs, size, "cpu"))
    want = torch.empty_like(logits)
    for b in range(bs):
        for i in range(size):
            fed = outputs[b][:-1] + tokens[b, : i + 1].tolist()
            want[b * size + i] = reference_row(REQUEST_SETTINGS[b], fed, logits[b * size + i])
    return {**_compare(got, want), "output_lens": [len(o) for o in outputs]}


def main() -> dict:
    facts: dict = {}
    facts["tree_n9"] = tree_case(seed=1, size=9, history_len=4, chain=False)
    facts["tree_n17"] = tree_case(seed=2, size=17, history_len=2, chain=False)
    facts["tree_fresh"] = tree_case(seed=3, size=9, history_len=0, chain=False)
    facts["chain_b8"] = tree_case(seed=4, size=8, history_len=3, chain=True)
    facts["advance"] = advance_case(seed=5, steps=3, size=5)
    return facts


if __name__ == "__main__":
    try:
        out = main()
    except Exception:
        out = {"probe_error": traceback.format_exc()}
    print("REQUEST-OPTIONS-PROBE " + json.dumps(out))
