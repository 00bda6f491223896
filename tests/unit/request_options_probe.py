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


def _batch(reqs, device: str = "cpu", vocab: int = VOCAB):
    from sglang.srt.sampling import sampling_batch_info as sbi

    sbi.get_global_server_args = lambda: types.SimpleNamespace(
        enable_deterministic_inference=False, enable_custom_logit_processor=False
    )
    batch = _StubBatch(reqs=reqs, device=device)
    batch.sampling_info = sbi.SamplingBatchInfo.from_schedule_batch(batch, vocab)
    return batch


def _feed(batch, tokens_per_step):
    """Plain decoding's feeding: one token per request per step (ScheduleBatch.prepare_for_decode)."""
    for step in tokens_per_step:
        batch.sampling_info.penalizer_orchestrator.cumulate_output_tokens(
            torch.tensor(step, dtype=torch.int64)
        )


def reference_row(settings: dict, fed: list[int], row_logits: torch.Tensor) -> torch.Tensor:
    """Plain decoding's adjusted logits for one request after it has fed `fed`, one token at a time."""
    batch = _batch([_request(**settings)], vocab=row_logits.numel())
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


DECODE_SETTINGS = [
    {"repetition_penalty": 1.6},  # breaks the 7 <-> 9 loop
    {"frequency_penalty": 0.9, "presence_penalty": 0.6},
    {"min_new_tokens": 14},  # EOS is the greedy choice after 11
    {"logit_bias": {"12": 3.0, "9": -2.0}},
    {"frequency_penalty": 0.4, "repetition_penalty": 1.2, "min_new_tokens": 6, "stop_token_ids": [STOP]},
    {},
]
MAX_NEW = 24


class _DecodeReq:
    """A request as verify() and the penalizers see it: real SamplingParams, output_ids, finish on EOS / the
    request's stop ids (as Req.update_finish_state, min_new_tokens being the penalizer's job) or length."""

    def __init__(self, settings: dict, first_token: int):
        base = _request(temperature=0.0, **settings)
        self.sampling_params = base.sampling_params
        self.tokenizer = base.tokenizer
        self.custom_logit_processor = None
        self.output_ids = [first_token]  # the prefill's token
        self.origin_input_ids = [1, 2]
        self.grammar = None
        self.to_finish = None
        self.spec_verify_ct = self.spec_num_correct_drafts = 0
        self.kv_committed_len = self.kv_allocated_len = 0
        self._finished = False

    def _stops(self) -> set[int]:
        return {EOS} | set(self.sampling_params.stop_token_ids or ())

    def update_finish_state(self) -> None:
        self._finished = len(self.output_ids) >= MAX_NEW or self.output_ids[-1] in self._stops()

    def _spec_v2_block_cannot_finish(self, new_accepted_len: int) -> bool:
        """The block test of patch 0032's append, by this stand-in's own finish rule."""
        block = self.output_ids[-new_accepted_len:]
        return len(self.output_ids) < MAX_NEW and self._stops().isdisjoint(block)

    def finished(self) -> bool:
        return self._finished


def markov_table(seed: int) -> torch.Tensor:
    """The target: logits depend on the current token only; greedy loops 7 <-> 9, says EOS after 11."""
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(VOCAB, VOCAB, generator=gen) * 1.5
    table[7, 9] = table[9, 7] = 9.0
    table[9, 11] = table[7, 11] = 7.5
    table[11, EOS] = 10.0
    table[12, STOP] = 6.0
    table[:, 0] = -30.0  # the padding token
    return table


def plain_greedy(settings: dict, first: int, table: torch.Tensor) -> list[int]:
    """Plain decoding: one token per step, the penalizers fed everything emitted so far."""
    req = _DecodeReq(settings, first)
    while True:
        row = reference_row(settings, req.output_ids, table[req.output_ids[-1]])
        req.output_ids.append(int(row.argmax()))
        req.update_finish_state()
        if req.finished():
            return req.output_ids


def _verify_once(mode: str, batch, table: torch.Tensor, gen: torch.Generator) -> list[int]:
    """One verify step for the whole batch on the Markov target: drafts are the unpenalised target's greedy
    chain, perturbed; DDTREE builds a tree of budget 8 (top-k 3, depth 4), DFLASH verifies the chain."""
    from sglang.srt.speculative import ddtree_info, dflash_info

    def assign(req_pool_indices, req_to_token, start, end, out_cache_loc, bs):  # Triton kernel stand-in
        pass

    ddtree_info.assign_req_to_token_pool_func = assign
    dflash_info.assign_req_to_token_pool_func = assign
    ddtree_info.get_tp_group = lambda: types.SimpleNamespace(world_size=1)  # one rank, no process group
    depth, budget, topk = 4, 8, 3
    bs = len(batch.reqs)
    vocab = table.shape[1]
    roots = torch.tensor([r.output_ids[-1] for r in batch.reqs])
    chain = [roots]
    logp = []
    for _ in range(depth):
        dist = table[chain[-1]] + torch.randn(bs, vocab, generator=gen) * 1.5
        logp.append(torch.log_softmax(dist, dim=-1))
        chain.append(dist.argmax(dim=-1))
    return verify_drafts(mode, batch, table, roots, logp, chain, budget, topk)


def verify_drafts(
    mode: str, batch, table: torch.Tensor, roots, logp: list, chain: list, budget: int, topk: int
):
    """The verify of one step's drafts on the Markov target (also draft_penalties_probe's): DDTREE's tree of
    `budget` from the per-depth log-probs, or DFLASH's chain; returns the requests' correct drafts."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import ddtree_info, dflash_info
    from sglang.srt.speculative.ddtree_utils import build_ddtree, verify_input_ids

    bs = len(batch.reqs)
    if mode == "ddtree":
        tree = build_ddtree(torch.stack(logp, dim=1), budget, topk)
        size = budget + 1
        spec = ddtree_info.DDTreeVerifyInput(
            draft_token=verify_input_ids(tree, roots).reshape(-1),
            positions=torch.zeros(bs * size, dtype=torch.long),
            draft_token_num=size,
            tree=tree,
        )
    else:
        size = len(chain)
        spec = dflash_info.DFlashVerifyInput(
            draft_token=torch.stack(chain, dim=1).reshape(-1),
            positions=torch.zeros(bs * size, dtype=torch.long),
            draft_token_num=size,
        )
    seq_lens = torch.full((bs,), 10, dtype=torch.int64)
    batch.forward_mode = ForwardMode.TARGET_VERIFY
    batch.batch_size = lambda n=bs: n
    batch.out_cache_loc = torch.arange(bs * size, dtype=torch.int64)
    batch.token_to_kv_pool_allocator = types.SimpleNamespace(free=lambda x: None)
    batch.req_pool_indices = torch.arange(bs)
    batch.req_to_token_pool = types.SimpleNamespace(req_to_token=torch.zeros((bs, 64), dtype=torch.int64))
    batch.seq_lens, batch.seq_lens_cpu, batch.seq_lens_sum = (
        seq_lens.clone(),
        seq_lens.clone(),
        int(seq_lens.sum()),
    )
    logits = table[spec.draft_token].clone()
    output = types.SimpleNamespace(next_token_logits=logits, hidden_states=torch.zeros(bs * size, 2))
    _, _, _, correct = spec.verify(batch=batch, logits_output=output, page_size=1)
    return correct


def speculative_greedy(mode: str, firsts: list[int], table: torch.Tensor, seed: int) -> dict:
    """The whole batch decoded by DDTreeVerifyInput.verify (trees) or DFlashVerifyInput.verify (chains);
    finished requests leave the batch through SamplingBatchInfo.filter_batch, as the scheduler does."""
    gen = torch.Generator().manual_seed(seed)
    accepted = 0

    def step(batch) -> None:
        nonlocal accepted
        accepted += sum(_verify_once(mode, batch, table, gen))

    outputs, steps, _ = decode_batch(firsts, step, lambda steps, verifies: steps > 4 * MAX_NEW)
    return {"outputs": outputs, "steps": steps, "accepted": accepted}


def decode_batch(firsts: list[int], step, stalled) -> tuple[list[list[int]], int, int]:
    """(outputs, steps, request verifies) of DECODE_SETTINGS' requests decoded by `step(batch)` until every
    one finished; finished requests leave the batch through SamplingBatchInfo.filter_batch, as the scheduler
    does. `stalled(steps, verifies)` true stops it with an error (also draft_penalties_probe's loop)."""
    reqs = [_DecodeReq(s, f) for s, f in zip(DECODE_SETTINGS, firsts, strict=True)]
    batch = _batch(reqs)
    done: dict[int, list[int]] = {}
    alive = list(range(len(reqs)))
    steps = verifies = 0
    while alive:
        bs = len(batch.reqs)
        step(batch)
        steps += 1
        verifies += bs
        keep = [i for i, r in enumerate(batch.reqs) if not r.finished()]
        for i, r in enumerate(batch.reqs):
            if r.finished():
                done[alive[i]] = r.output_ids
        if len(keep) < bs:
            alive = [alive[i] for i in keep]
            batch.reqs = [batch.reqs[i] for i in keep]
            if keep:
                batch.sampling_info.filter_batch(keep, torch.tensor(keep))
        if stalled(steps, verifies):
            raise RuntimeError(f"no progress after {steps} steps ({verifies} request verifies)")
    return [done[i] for i in range(len(reqs))], steps, verifies


CHI_SETTINGS = {
    "temperature": 1.0,
    "repetition_penalty": 1.5,
    "frequency_penalty": 0.7,
    "presence_penalty": 0.3,
    "min_new_tokens": 2,
    "logit_bias": {"4": 1.0},
}


def chi_square_case(trials: int = 20000, vocab: int = 10, root: int = 7) -> dict:
    """Temperature 1 with every option: the first two tokens after the prefill's (DDTREE sampling verify,
    two steps through verify(), the penalizers advanced between them) against plain decoding's exact
    distribution; and against the distribution without the path (the per-request adjustment verify did
    before), which must be rejected (the test can see a missing path)."""
    import ddtree_sglang_probe as base

    gen = torch.Generator().manual_seed(40)
    table = torch.randn(vocab, vocab, generator=gen) * 1.2
    table[:, EOS] += 1.0
    for t in range(vocab):
        table[t, t] += 2.0  # repeating is likely: the penalties matter
    reqs = []
    for _ in range(trials):
        req = _DecodeReq({k: v for k, v in CHI_SETTINGS.items() if k != "temperature"}, root)
        req.sampling_params = _request(**CHI_SETTINGS).sampling_params
        reqs.append(req)
    batch = _batch(reqs, vocab=vocab)
    torch.manual_seed(41)
    _verify_once("ddtree", batch, table, gen)
    _verify_once("ddtree", batch, table, gen)
    counts: dict = {}
    for r in reqs:
        pair = (r.output_ids[1], r.output_ids[2])
        counts[pair] = counts.get(pair, 0) + 1
    settings = {k: v for k, v in CHI_SETTINGS.items() if k != "temperature"}

    def probs(fed: list[int]) -> list[float]:
        return torch.softmax(reference_row(settings, fed, table[fed[-1]]), dim=-1).tolist()

    q1 = probs([root])
    expected = {(a, b): trials * q1[a] * probs([root, a])[b] for a in range(vocab) for b in range(vocab)}
    without_path = {
        (a, b): trials * q1[a] * torch.softmax(reference_row(settings, [root], table[a]), dim=-1)[b].item()
        for a in range(vocab)
        for b in range(vocab)
    }
    stat, df = base._chi_square(counts, expected)
    wrong, wrong_df = base._chi_square(counts, without_path)
    return {
        "stat": stat,
        "critical": base._chi_square_critical(df),
        "without_path_stat": wrong,
        "without_path_critical": base._chi_square_critical(wrong_df),
        "first_is_eos": counts_first(counts, EOS),
    }


def counts_first(counts: dict, token: int) -> int:
    return sum(n for (a, _), n in counts.items() if a == token)


def decode_case(seed: int) -> dict:
    """Greedy decoding of a batch with different options: DDTREE and DFLASH verify vs plain decoding."""
    table = markov_table(seed)
    firsts = [7, 9, 11, 7, 7, 7]  # 11: EOS is next, unless min_new_tokens bans it
    plain = [plain_greedy(s, f, table) for s, f in zip(DECODE_SETTINGS, firsts, strict=True)]
    unpenalised = [plain_greedy({}, f, table) for f in firsts]
    out: dict = {"plain": plain}
    for mode in ("ddtree", "dflash"):
        got = speculative_greedy(mode, firsts, table, seed)
        out[mode] = {
            "equal": [a == b for a, b in zip(got["outputs"], plain, strict=True)],
            "outputs": got["outputs"],
            "steps": got["steps"],
            "accepted": got["accepted"],
        }
    out["options_change_output"] = [a != b for a, b in zip(plain, unpenalised, strict=True)]
    return out


def no_tokenizer_case() -> dict:
    """min_new_tokens on a server started with --skip-tokenizer-init (req.tokenizer None, the model's EOS ids
    in req.eos_token_ids): the ids held back before and after min_new_tokens outputs, per request. Unpatched,
    building the batch raises AttributeError (the scheduler's crash on the H200, 2026-12-02)."""
    reqs = []
    for settings in ({"min_new_tokens": 3, "stop_token_ids": [STOP]}, {"min_new_tokens": 2}, {}):
        req = _request(**settings)
        req.tokenizer = None
        req.eos_token_ids = {EOS, 9}
        reqs.append(req)
    batch = _batch(reqs)

    def held_back() -> list[list[int]]:
        out = torch.zeros(len(reqs), VOCAB)
        batch.sampling_info.copy_for_forward().apply_logits_bias(out)
        return [torch.isinf(row).nonzero().flatten().tolist() for row in out]

    before = held_back()
    _feed(batch, [[11, 11, 11]] * 3)
    return {"before": before, "after_3": held_back()}


def main() -> dict:
    facts: dict = {}
    facts["no_tokenizer"] = no_tokenizer_case()
    facts["tree_n9"] = tree_case(seed=1, size=9, history_len=4, chain=False)
    facts["tree_n17"] = tree_case(seed=2, size=17, history_len=2, chain=False)
    facts["tree_fresh"] = tree_case(seed=3, size=9, history_len=0, chain=False)
    facts["chain_b8"] = tree_case(seed=4, size=8, history_len=3, chain=True)
    facts["advance"] = advance_case(seed=5, steps=3, size=5)
    facts["decode"] = decode_case(seed=6)
    facts["chi_square"] = chi_square_case()
    return facts


if __name__ == "__main__":
    try:
        out = main()
    except Exception:
        out = {"probe_error": traceback.format_exc()}
    print("REQUEST-OPTIONS-PROBE " + json.dumps(out))
