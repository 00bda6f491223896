"""Probe (run in the CPU SGLang environment by tests/unit/test_spec_v2_result_fast_path.py and
benchmarks/spec_v2_result_bench.py): the host time of the scheduler's result processing for one spec-v2
step (SGLANG_DFLASH_OVERLAP=1), with 0024's token-by-token finish check (`SPEC_V2_RESULT_FAST_PATH` off) and
with patch spec-v2-result-fast-path's fast path, side by side in one process; and the two paths' outputs on
random blocks.

`bench` prints `SPEC-V2-RESULT-BENCH {json}`: microseconds per step (median of interleaved repeats) at batch
sizes 1, 8, 32 and accepted lengths 1..8, for the finish check alone (`output_ids.extend` +
`update_finish_state`, every request of the batch), spec v1's verify append (`v1`: patch 0032's
append_accepted_tokens, loop against fast path) and for the whole `process_batch_result_decode` (the real
SchedulerBatchResultProcessor and SchedulerOutputStreamer; the metrics reporter, allocator and detokenizer
socket are stand-ins: the socket pickles the payload as zmq's send_pyobj would).
`check SEED N` prints `SPEC-V2-RESULT-CHECK {json}`: N random cases (hypothesis) run through both paths.
`check-v1 SEED N` prints the same marker: spec v1's verify append (patch 0032, the same fast-path test)
against the token-by-token loop it replaces, on the same random cases plus aborts and grammars."""

from __future__ import annotations

import functools
import json
import pickle
import random
import statistics
import sys
import time
import traceback
import types
from array import array

from finish_state_probe import append_steps  # run as a script: tests/unit is on sys.path

EOS = 0  # the tokenizer's
MODEL_EOS = 2  # the model config's (Req.eos_token_ids)
EXTRA_STOP = 4  # the tokenizer's additional stop ids
STOP_ID = 5
LETTERS = [ord(c) for c in "abcdefgh"]
VOCAB = 256


def tokenizer():
    """A byte-level stand-in: one token per byte, so a stop string's tokens are its letters."""
    return types.SimpleNamespace(
        eos_token_id=EOS,
        additional_stop_token_ids={EXTRA_STOP},
        decode=lambda ids: bytes(int(i) for i in ids).decode("latin-1"),
        encode=lambda text, add_special_tokens=False: list(text.encode("latin-1")),
    )


def make_request(settings: dict, rid: str = "probe"):
    """A real Req on CPU with the byte tokenizer and a three-token prompt."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(**settings)
    params.normalize(tokenizer())
    req = Req(rid, "", array("q", [1, 2, 3]), params, vocab_size=VOCAB, eos_token_ids={MODEL_EOS})
    req.tokenizer = tokenizer()
    return req


def set_fast_path(on: bool) -> None:
    from sglang.srt.managers import schedule_batch

    schedule_batch.SPEC_V2_RESULT_FAST_PATH = on


def outcome(req) -> dict:
    reason = req.finished_reason
    return {
        "reason": None if reason is None else type(reason).__name__,
        "matched": None if reason is None else getattr(reason, "matched", None),
        "finished_len": req.finished_len,
        "output_ids": [int(t) for t in req.output_ids],
        "returned": [int(t) for t in req.output_ids_through_stop],
    }


def run_steps(settings: dict, tokens: list[int], steps: list[int], fast: bool) -> dict:
    """The spec-v2 result path of one request: each step's block appended, then one update_finish_state."""
    set_fast_path(fast)
    req = make_request(settings)
    append_steps(req, tokens, steps)
    return outcome(req)


# ---------------------------------------------------------------- the benchmark


SCENARIOS = {
    # name: (sampling settings, block maker); every block has exactly n tokens
    "plain": {"max_new_tokens": 1 << 20},
    "stop_ids": {"max_new_tokens": 1 << 20, "stop_token_ids": [STOP_ID, 6, 7]},
    "max_new_near": {"max_new_tokens": 4},
    "stop_str": {"max_new_tokens": 1 << 20, "stop": ["zz", "qqq"]},
}
PRIOR = 40  # tokens already generated before the timed step (max_new_near: reset to 0)


def batch_requests(scenario: str, bs: int) -> list:
    reqs = []
    for i in range(bs):
        req = make_request(dict(SCENARIOS[scenario]), rid=f"r{i}")
        if scenario != "max_new_near":
            req.output_ids.extend(LETTERS[j % len(LETTERS)] for j in range(PRIOR))
        reqs.append(req)
    return reqs


def reset(req, prior_len: int) -> None:
    """Back to the state before the timed step (outside the timing)."""
    del req.output_ids[prior_len:]
    req.finished_reason = None
    req.finished_len = None
    req.to_finish = None


def finish_check(req, block: list[int]) -> None:
    """The spec-v2 result path of one request's step: its block appended, then one update_finish_state."""
    req.output_ids.extend(block)
    req.update_finish_state(len(block))


def time_step(one_request, reqs: list, blocks: list[list[int]], fast: bool) -> float:
    """Microseconds for one step's `one_request(req, block)` over the batch (the finish check above, or spec
    v1's verify append: patch 0032's append_accepted_tokens, the token-by-token loop with the fast path
    off); the requests are reset outside the timing."""
    set_fast_path(fast)
    priors = [len(r.output_ids) for r in reqs]
    begin = time.perf_counter_ns()
    for req, block in zip(reqs, blocks, strict=True):
        one_request(req, block)
    elapsed = (time.perf_counter_ns() - begin) / 1000.0
    for req, prior in zip(reqs, priors, strict=True):
        reset(req, prior)
    return elapsed


class _Sink:
    """The detokenizer socket: pickles what send_pyobj would send."""

    def __init__(self) -> None:
        self.sent = 0

    def send_output(self, payload) -> None:
        self.sent += len(pickle.dumps(payload))


def make_processor():
    """The real SchedulerBatchResultProcessor and SchedulerOutputStreamer; stand-ins for what does I/O or
    keeps metrics."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.scheduler_components.batch_result_processor import (
        SchedulerBatchResultProcessor,
    )
    from sglang.srt.managers.scheduler_components.output_streamer import SchedulerOutputStreamer
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    noop = lambda *a, **k: None  # noqa: E731
    server_args = types.SimpleNamespace(
        enable_metrics=False,
        disaggregation_decode_enable_offload_kvcache=False,
        enable_hisparse=False,
        stream_interval=1,
        enable_cache_report=False,
    )
    streamer = SchedulerOutputStreamer(
        send_to_detokenizer=_Sink(),
        tree_cache=None,
        ps=types.SimpleNamespace(dp_rank=0),
        server_args=server_args,
        is_generation=True,
        spec_algorithm=SpeculativeAlgorithm.DFLASH,
        disaggregation_mode=DisaggregationMode.NULL,
        enable_hicache_storage=lambda: False,
        load_inquirer_get_loads=noop,
    )
    return SchedulerBatchResultProcessor(
        is_generation=True,
        disaggregation_mode=DisaggregationMode.NULL,
        enable_overlap=True,
        enable_overlap_mlx=False,
        server_args=server_args,
        model_config=types.SimpleNamespace(think_end_id=None),
        token_to_kv_pool_allocator=types.SimpleNamespace(free_group_begin=noop, free_group_end=noop),
        tree_cache=None,
        hisparse_coordinator=None,
        req_to_token_pool=None,
        decode_offload_manager=None,
        metrics_collector=None,
        metrics_reporter=types.SimpleNamespace(
            num_generated_tokens=0, forward_ct_decode=0, update_spec_metrics=noop, report_decode_stats=noop
        ),
        draft_worker=None,
        model_worker=types.SimpleNamespace(on_verify_complete_cpu=noop),
        logprob_result_processor=None,
        output_streamer=streamer,
        abort_request=noop,
    )


def time_decode_result(processor, reqs: list, blocks: list[list[int]], fast: bool) -> float:
    """Microseconds for process_batch_result_decode of one v2 step (CPU tensors, stride 8 + 1)."""
    import torch
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    set_fast_path(fast)
    stride = 9
    ids = torch.zeros(len(reqs) * stride, dtype=torch.int64)
    for i, block in enumerate(blocks):
        ids[i * stride : i * stride + len(block)] = torch.tensor(block)
    result = types.SimpleNamespace(
        copy_done=None,
        routed_experts_output=None,
        indexer_topk_output=None,
        logits_output=types.SimpleNamespace(hidden_states=None, customized_info=None),
        next_token_ids=ids,
        accept_lens=torch.tensor([len(b) for b in blocks], dtype=torch.int32),
        can_run_cuda_graph=True,
        speculative_num_draft_tokens=stride,
        num_correct_drafts=0,
        num_correct_drafts_per_req_cpu=None,
    )
    batch = types.SimpleNamespace(
        reqs=reqs,
        spec_algorithm=SpeculativeAlgorithm.DFLASH,
        is_spec_v2=True,
        return_logprob=False,
        batch_size=lambda: len(reqs),
    )
    priors = [len(r.output_ids) for r in reqs]
    begin = time.perf_counter_ns()
    processor.process_batch_result_decode(batch, result)
    elapsed = (time.perf_counter_ns() - begin) / 1000.0
    for req, prior in zip(reqs, priors, strict=True):
        reset(req, prior)
    return elapsed


def bench(repeats: int = 200) -> dict:
    """Median microseconds per step, old (token by token) and new (fast path), interleaved A/B."""
    from sglang.srt.speculative.dflash_step_host import append_accepted_tokens

    rows = []
    processor = make_processor()
    for scenario in SCENARIOS:
        for bs in (1, 8, 32):
            reqs = batch_requests(scenario, bs)
            for n in range(1, 9):
                blocks = [[LETTERS[(i + j) % len(LETTERS)] for j in range(n)] for i in range(bs)]
                row = {"scenario": scenario, "bs": bs, "n": n}
                timers = {
                    "finish": functools.partial(time_step, finish_check, reqs, blocks),
                    "decode": functools.partial(time_decode_result, processor, reqs, blocks),
                    "v1": functools.partial(time_step, append_accepted_tokens, reqs, blocks),
                }
                for level, timer in timers.items():
                    if scenario == "max_new_near" and level == "decode":
                        continue  # a finishing request releases its KV: needs the real tree cache
                    old, new = [], []
                    for _ in range(repeats):
                        old.append(timer(False))
                        new.append(timer(True))
                    row[f"{level}_old_us"] = round(statistics.median(old), 2)
                    row[f"{level}_new_us"] = round(statistics.median(new), 2)
                rows.append(row)
    return {"repeats": repeats, "rows": rows}


# ---------------------------------------------------------------- the equivalence check


def random_case(rng: random.Random) -> tuple[dict, list[int], list[int]]:
    """One request: up to 48 tokens with EOS, stop and out-of-vocab ids at random positions (so at every
    position of a block), its settings, and its accepted block sizes (1..8)."""
    length = rng.randint(1, 48)
    tokens = [rng.choice(LETTERS) for _ in range(length)]
    for _ in range(rng.randint(0, 3)):
        tokens[rng.randrange(length)] = rng.choice([EOS, MODEL_EOS, EXTRA_STOP, STOP_ID, 6, VOCAB + 3])
    settings: dict = {"max_new_tokens": rng.randint(1, 56)}
    if rng.random() < 0.5:
        settings["stop_token_ids"] = rng.sample([STOP_ID, 6, 7], rng.randint(1, 2))
    if rng.random() < 0.25:
        settings["stop"] = [
            "".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 3))) for _ in range(2)
        ]
    if rng.random() < 0.15:
        settings["ignore_eos"] = True
    steps = [rng.randint(1, 8) for _ in range(48)]
    return settings, tokens, steps


def run_cases(seed: int, cases: int, body) -> None:
    """body(case_seed) for `cases` case seeds that Hypothesis draws, reproducible from `seed` (no example
    database, no deadline)."""
    from hypothesis import HealthCheck, given
    from hypothesis import seed as hseed
    from hypothesis import settings as hsettings
    from hypothesis import strategies as st

    @hseed(seed)
    @hsettings(max_examples=cases, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.integers(0, 2**63))
    def drawn(case_seed: int) -> None:
        body(case_seed)

    drawn()


def check(seed: int, cases: int) -> dict:
    """Random cases through both paths: output_ids, finished_reason, finished_len and the returned tokens must
    be equal. Counts how often each kind of finish fell inside a block (not its last token)."""
    tallies = {"cases": 0, "differ": 0, "first": [], "finished": {}, "inside_block": {}, "fast_taken": 0}
    case = random_case

    def one(case_seed: int) -> None:
        settings, tokens, steps = case(random.Random(case_seed))
        old = run_steps(settings, tokens, steps, fast=False)
        new = run_steps(settings, tokens, steps, fast=True)
        tallies["cases"] += 1
        if old != new:
            tallies["differ"] += 1
            if len(tallies["first"]) < 3:
                tallies["first"].append(
                    {"settings": settings, "tokens": tokens, "steps": steps, "old": old, "new": new}
                )
        reason = "NaN happened" if old["matched"] == "NaN happened" else old["reason"]
        if reason is not None:
            tallies["finished"][reason] = tallies["finished"].get(reason, 0) + 1
            ends, total = set(), 0
            for size in steps:
                total += size
                ends.add(total)
            if old["finished_len"] not in ends:
                tallies["inside_block"][reason] = tallies["inside_block"].get(reason, 0) + 1

    run_cases(seed, cases, one)
    tallies["fast_taken"] = fast_path_share(seed)
    tallies["stop_ids_follow_a_new_tokenizer"] = stop_ids_follow_a_new_tokenizer()
    return tallies


def stop_ids_follow_a_new_tokenizer() -> dict:
    """The fast path's per-request stop-id set is rebuilt when a source is replaced: a request whose tokenizer
    is swapped after a step (its EOS now 9) still stops at 9 inside a block, as the replay does."""
    got = {}
    for fast in (False, True):
        set_fast_path(fast)
        req = make_request({"max_new_tokens": 100})
        req.output_ids.extend([97, 98, 99])
        req.update_finish_state(3)  # builds the cache with the first tokenizer
        req.tokenizer = types.SimpleNamespace(**{**vars(tokenizer()), "eos_token_id": 9})
        req.output_ids.extend([97, 9, 98])
        req.update_finish_state(3)
        got["fast" if fast else "replay"] = outcome(req)
    return got


def fast_path_share(seed: int) -> float:
    """Share of multi-token steps of a long plain request that the fast path answers (no replay)."""
    from sglang.srt.managers.schedule_batch import Req

    set_fast_path(True)
    req = make_request({"max_new_tokens": 1000, "stop_token_ids": [STOP_ID]})
    taken = steps = 0
    original = Req._update_finish_state_token_by_token
    replays = []
    Req._update_finish_state_token_by_token = lambda self, n: (replays.append(n), original(self, n))[1]
    try:
        for s in range(100):
            block = [LETTERS[(s + j) % len(LETTERS)] for j in range(1 + s % 8)]
            req.output_ids.extend(block)
            before = len(replays)
            req.update_finish_state(len(block))
            if len(block) > 1:
                steps += 1
                taken += len(replays) == before
    finally:
        Req._update_finish_state_token_by_token = original
    return taken / steps


# ---------------------------------------------------------------- spec v1's verify append (patch 0032)


class _Grammar:
    """A grammar stand-in: records the tokens it is told, terminates after `limit` of them."""

    def __init__(self, limit: int) -> None:
        self.limit, self.seen = limit, []

    def accept_token(self, token: int) -> None:
        self.seen.append(int(token))

    def is_terminated(self) -> bool:
        return len(self.seen) >= self.limit


def run_v1_steps(settings: dict, tokens: list[int], steps: list[int], fast: bool, abort_at: int | None,
                 grammar_limit: int | None) -> dict:  # fmt: skip
    """Spec v1's verify of one request over its steps: each step's block through append_accepted_tokens (what
    DFLASH's and DDTREE's verify call), until the request finishes (it then leaves the batch); an abort
    (to_finish) before step `abort_at`. Returns the outcome, the count appended per step and the grammar's
    tokens."""
    from sglang.srt.managers.schedule_batch import FINISH_ABORT
    from sglang.srt.speculative.dflash_step_host import append_accepted_tokens

    set_fast_path(fast)
    req = make_request(settings)
    if grammar_limit is not None:
        req.grammar = _Grammar(grammar_limit)
    appended, start = [], 0
    for index, size in enumerate(steps):
        if start >= len(tokens) or req.finished():
            break
        if index == abort_at:
            req.to_finish = FINISH_ABORT("probe abort")
        appended.append(append_accepted_tokens(req, tokens[start : start + size]))
        start += appended[-1]
    grammar = None if req.grammar is None else req.grammar.seen
    return {**outcome(req), "appended": appended, "grammar": grammar}


def check_v1(seed: int, cases: int) -> dict:
    """Random cases through append_accepted_tokens with the fast path off (the token-by-token loop of
    0.5.13.post1's verify) and on: outcome, appended counts and grammar tokens must be equal. Counts how
    often each kind of finish came inside a block, and the share of blocks the fast path took."""
    from sglang.srt.managers.schedule_batch import Req

    tallies = {"cases": 0, "differ": 0, "first": [], "inside_block": {}, "blocks": 0, "fast_blocks": 0}
    original = Req._spec_v2_block_cannot_finish

    def counted(self, n: int) -> bool:
        answer = original(self, n)
        tallies["fast_blocks"] += answer
        return answer

    def one(case_seed: int) -> None:
        rng = random.Random(case_seed)
        settings, tokens, steps = random_case(rng)
        abort_at = rng.randrange(6) if rng.random() < 0.1 else None
        grammar_limit = rng.randint(1, 30) if rng.random() < 0.1 else None
        old = run_v1_steps(settings, tokens, steps, False, abort_at, grammar_limit)
        Req._spec_v2_block_cannot_finish = counted
        try:
            new = run_v1_steps(settings, tokens, steps, True, abort_at, grammar_limit)
        finally:
            Req._spec_v2_block_cannot_finish = original
        tallies["cases"] += 1
        tallies["blocks"] += len(new["appended"])
        if old != new:
            tallies["differ"] += 1
            if len(tallies["first"]) < 3:
                tallies["first"].append({"settings": settings, "tokens": tokens, "old": old, "new": new})
        reason = "NaN happened" if old["matched"] == "NaN happened" else old["reason"]
        if reason is not None:
            cut = old["appended"][-1] < min(
                steps[len(old["appended"]) - 1], len(tokens) - sum(old["appended"][:-1])
            )
            if cut:
                tallies["inside_block"][reason] = tallies["inside_block"].get(reason, 0) + 1

    run_cases(seed, cases, one)
    return tallies


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "bench"
    marker = "SPEC-V2-RESULT-BENCH" if mode == "bench" else "SPEC-V2-RESULT-CHECK"
    try:
        if mode == "bench":
            out = bench(int(sys.argv[2]) if len(sys.argv) > 2 else 200)
        elif mode == "check":
            out = check(int(sys.argv[2]), int(sys.argv[3]))
        elif mode == "check-v1":
            out = check_v1(int(sys.argv[2]), int(sys.argv[3]))
        else:
            raise SystemExit(f"unknown mode {mode!r}: bench [REPEATS] | check SEED N | check-v1 SEED N")
    except Exception:
        out = {"probe_error": traceback.format_exc()}
    print(f"{marker} " + json.dumps(out))
