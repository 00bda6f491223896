"""Run inside the CPU SGLang environment (tests/unit/test_dflash_overlap.py): the switch and the spec-v2
inputs of DFLASH/DDTREE (patches dflash-overlap-switch, dflash-overlap-inputs) in the real patched sglang
0.5.13.post1. Prints one line `DFLASH-OVERLAP-PROBE {json}`. SGLANG_DFLASH_OVERLAP is read once per process,
so the test runs this probe once with the switch off and once on.

usage: python dflash_overlap_probe.py TARGET_DIR DRAFTER_DIR

Stand-ins, where the real part needs a GPU or a model:
- get_draft_kv_pool and the worker's start get stand-in workers (a DFlashWorker loads a drafter on a GPU);
- the host simulation drives the real ServerArgs, Req, ScheduleBatch (prepare_for_extend, prepare_for_decode,
  filter_batch, merge_batch, copy), ReqToTokenPool, TokenToKVPoolAllocator, ChunkCache, Scheduler.run_batch's
  overlap branch (FutureMap relay, _forward_isolation) and SchedulerBatchResultProcessor (spec-v2 token
  resolution, finish checks, KV release), lagging one step like event_loop_overlap. Stand-ins there: the
  scheduler object carries only the attributes run_batch reads, its batch selection mirrors
  get_next_batch_to_run's order (stash the chunked request, merge the last prefill without it, filter
  finished, prefill first, check_decode_mem / retract_decode); admission is a simple budget, or with chunked
  prefill the real PrefillAdder (get_new_batch_prefill's order, no priority, LoRA, hicache or mixed chunk);
  aborts call the real Scheduler.abort_request on a view holding the queues and batches (the tokenizer
  channel and the grammar manager no-ops); metrics and output streaming are no-ops; the model is a script
  (each request's target output is a fixed token stream, acceptance lengths come from a seeded RNG); the
  Triton req_to_token writes are SGLang's own torch fallback (support_triton False) and a torch loop for
  assign_req_to_token_pool (Triton kernels need a GPU);
- the real DFlashWorker's steps (patch dflash-overlap-step) run on a worker made without __init__ (it loads
  a drafter on a GPU) whose target, drafter, embedding/LM head and fused draft KV write are scripts
  (_DFlashV2Models); the compact-row rewrite runs its torch path (its Triton kernel needs a GPU);
- the real DDTreeWorker's steps (patch ddtree-overlap-step) the same way, with tree-shaped scripts
  (_DDTreeV2Models); the top-k, tree building and sampling walk run their torch paths (Triton needs a GPU).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
import sys
import traceback
import types
from array import array

OVERLAP_ENV = "SGLANG_DFLASH_OVERLAP"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _args_case(argv: list[str]) -> dict:
    """ServerArgs for argv: the overlap decision, the warnings about overlap, or the error."""
    from sglang.srt.server_args import prepare_server_args

    records = _Records()
    root = logging.getLogger("sglang")  # prepare_server_args reconfigures the root logger's handlers
    root.addHandler(records)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            a = prepare_server_args(argv)
    except SystemExit as e:
        return {"error": "SystemExit", "code": e.code}
    except Exception as e:  # the message is what the test checks
        return {"error": type(e).__name__, "message": str(e)}
    finally:
        root.removeHandler(records)
    return {
        "overlap_disabled": a.disable_overlap_schedule,
        "page_size": a.page_size,
        "num_draft_tokens": a.speculative_num_draft_tokens,
        "overlap_warnings": [m for m in records.messages if "Overlap scheduler" in m or OVERLAP_ENV in m],
    }


def _algo_facts(argv: list[str]) -> dict:
    """With these arguments as the process's global ones: spec v2 or not, the worker class (or the refusal),
    the draft KV pool picked for a DFlash-shaped worker, the FutureMap type, and the worker's start."""
    import torch
    from sglang.srt.mem_cache import kv_cache_builder
    from sglang.srt.server_args import prepare_server_args, set_global_server_args_for_scheduler
    from sglang.srt.speculative.dflash_worker import DFlashWorker
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    args = prepare_server_args(argv)
    set_global_server_args_for_scheduler(args)
    algo = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    from sglang.srt.mem_cache.common import get_req_to_token_extra_context_len

    out: dict = {
        "spec_v2": algo.supports_spec_v2(),
        "overlap_disabled": args.disable_overlap_schedule,
        "row_headroom": get_req_to_token_extra_context_len(args),
        "verify_tokens": int(args.speculative_num_draft_tokens),
    }
    worker_class = DFlashWorker
    try:
        worker_class = algo.create_worker(args)
        out["worker"] = worker_class.__name__
    except ValueError as e:
        out["worker_error"] = str(e)
    # DFlashWorker's shape: the drafter's runner is `.model_runner` (EAGLE v2 nests
    # `.draft_worker.draft_runner`).
    dflash_shaped = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(token_to_kv_pool="dflash-draft-pool"),
        model_config="drafter-config",
    )
    try:
        pool, config = kv_cache_builder.get_draft_kv_pool(
            draft_worker=dflash_shaped, spec_algorithm=algo, server_args=args
        )
        out["draft_kv_pool"] = [pool, config]
    except AttributeError as e:
        out["draft_kv_pool_error"] = str(e)
    req_to_token_pool = types.SimpleNamespace(req_to_token=torch.zeros((4, 8), dtype=torch.int32))
    out["future_map"] = type(algo.create_future_map(torch.device("cpu"), req_to_token_pool, True)).__name__
    try:  # the worker's start with no target worker: the switch's refusal comes first, if any
        worker_class(args, 0, 0, None, 0, 0, 0, 0, target_worker=None)
        out["worker_start"] = "started"
    except RuntimeError as e:
        out["worker_start"] = f"RuntimeError: {e}"
    except AttributeError:
        out["worker_start"] = "past the switch"  # it went on to read the (absent) target worker
    return out


def _refusal_reasons() -> dict:
    """overlap_refusal for each setting the switch cannot serve (some are refused earlier by the DFLASH rules
    in a real parse, so they are asked directly)."""
    from sglang.srt.speculative.dflash_overlap import overlap_refusal

    base = dict(
        page_size=1, enable_dp_attention=False, pp_size=1, disaggregation_mode="null", enable_pdmux=False
    )
    cases = {
        "ok": {},
        "page64": {"page_size": 64},
        "dp_attention": {"enable_dp_attention": True},
        "pp2": {"pp_size": 2},
        "disagg": {"disaggregation_mode": "decode"},
        "pdmux": {"enable_pdmux": True},
    }
    return {
        name: overlap_refusal(types.SimpleNamespace(**{**base, **extra})) for name, extra in cases.items()
    }


# ---------------------------------------------------------------------------------------------------------
# Host simulation of the overlap loop (switch on)


def _assign_reference(req_pool_indices, req_to_token, start, end, out_cache_loc, bs) -> None:
    with _uncounted():  # stands for a Triton kernel launch (no host sync)
        _assign_loop(req_pool_indices, req_to_token, start, end, out_cache_loc, bs)


def _assign_loop(req_pool_indices, req_to_token, start, end, out_cache_loc, bs) -> None:
    """Torch stand-in for SGLang's Triton assign_req_to_token_pool kernel (Triton needs a GPU)."""
    offset = 0
    for i in range(bs):
        s, e = int(start[i]), int(end[i])
        req_to_token[int(req_pool_indices[i]), s:e] = out_cache_loc[offset : offset + e - s].to(
            req_to_token.dtype
        )
        offset += e - s


class _NoOp:
    def __getattr__(self, name):
        return lambda *a, **k: None


class _Metrics(_NoOp):
    """The counters the result processor adds to; every report is a no-op."""

    num_generated_tokens = 0
    forward_ct_decode = 0


class _ScriptedWorker:
    """The model as a script: request `rid` outputs `streams[rid]` (plain greedy decoding's tokens); a verify
    step accepts a seeded-random number of drafts. Checks, at each forward (the GPU's view), that the slots it
    writes are reserved, owned by nobody else and not free, and that the FutureMap relayed the right bonus
    token and length."""

    def __init__(self, streams: dict, prompt_lens: dict, n: int, seed: int, allocator, errors: list):
        self.streams, self.prompt_lens, self.n = streams, prompt_lens, n
        self.rng = random.Random(seed)
        self.allocator = allocator
        self.errors = errors
        self.steps = 0
        self.slot_owner: dict[int, tuple] = {}  # slot -> (rid, position) of the KV written there last
        self.penalizer_seen: list[tuple[list[str], bool]] = []  # per forward: its requests, penalties seen
        # rid -> tokens committed per verify (the last one repeats)
        self.commit_scripts: dict[str, list[int]] = {}
        self.verify_windows = 0  # decode forwards whose slots came from prepare_for_verify(reserved=True)

    def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size: int = 0) -> None:
        pass

    def _free_slots(self) -> set:
        import torch

        free = [self.allocator.free_pages]
        if getattr(self.allocator, "release_pages", None) is not None:
            free.append(self.allocator.release_pages)
        return set(torch.cat(free).tolist())

    def _check_rows(self, batch, seq_lens: list[int]) -> None:
        rows = batch.req_to_token_pool.req_to_token
        free = self._free_slots()
        width = rows.shape[1]
        held: dict[int, str] = {}
        shared: set[int] = set()  # slots of radix-cached prefixes, which requests may share
        for req in batch.reqs:
            if req.prefix_indices is not None:
                shared.update(int(s) for s in req.prefix_indices.tolist())
        for i, req in enumerate(batch.reqs):
            row = int(batch.req_pool_indices[i])
            end = seq_lens[i] + (self.n if batch.forward_mode.is_decode() else 0)
            if end > width:
                self.errors.append(f"{req.rid}: write window ends at {end} past the row width {width}")
                continue
            if end > req.kv_allocated_len:
                self.errors.append(
                    f"{req.rid}: write window ends at {end} past its reservation {req.kv_allocated_len}"
                )
            slots = rows[row, :end].tolist()
            if len(set(slots)) != len(slots):
                self.errors.append(f"{req.rid}: a slot appears twice in its row {slots}")
            for s in slots:
                if s in free:
                    self.errors.append(f"{req.rid}: slot {s} is used but free in the allocator")
                if s in held and held[s] != req.rid and s not in shared:
                    self.errors.append(f"slot {s} used by {held[s]} and {req.rid}")
                held[s] = req.rid

    def _verify_window(self, batch, seq_lens: list[int]) -> list[list[int]]:
        """The verify's KV slots from the real prepare_for_verify(reserved=True) (patch dflash-overlap-step):
        each request's reserved req_to_token entries after its length, nothing allocated."""
        import torch
        from sglang.srt.speculative.dflash_info import DFlashVerifyInput

        rows = batch.req_to_token_pool.req_to_token
        bs = len(batch.reqs)
        if any(length + self.n > rows.shape[1] for length in seq_lens):
            return [[] for _ in range(bs)]  # past the row: reported by _check_rows
        verify = DFlashVerifyInput(
            draft_token=torch.zeros(bs * self.n, dtype=torch.int64),
            positions=torch.zeros(bs * self.n, dtype=torch.int64),
            draft_token_num=self.n,
        )
        before = self.allocator.available_size()
        verify.prepare_for_verify(batch, 1, build_custom_mask=True, reserved=True)
        if self.allocator.available_size() != before:
            self.errors.append("prepare_for_verify(reserved=True) allocated KV slots")
        window = batch.out_cache_loc.view(bs, self.n).tolist()
        for i in range(bs):
            row = rows[int(batch.req_pool_indices[i]), seq_lens[i] : seq_lens[i] + self.n].tolist()
            if window[i] != row:
                self.errors.append(f"{batch.reqs[i].rid}: verify slots {window[i]}, reserved row {row}")
        # patch 0023: the host sizes the mask from the reserved row ends (a bound), the layout follows the
        # device lengths: the exact chain mask (v1's host loop) must be its head
        bound = batch.spec_info.reserved_end_cpu.tolist()
        for i, length in enumerate(seq_lens):
            if length + self.n > bound[i]:
                self.errors.append(
                    f"{batch.reqs[i].rid}: length {length} + {self.n} past the bound {bound[i]}"
                )
        exact = torch.cat(
            [
                (
                    torch.arange(length + self.n).view(1, -1) <= length + torch.arange(self.n).view(-1, 1)
                ).flatten()
                for length in seq_lens
            ]
        )
        mask = verify.custom_mask
        if mask.numel() < exact.numel() or not torch.equal(mask[: exact.numel()], exact):
            self.errors.append(f"verify mask of {mask.numel()} entries, not the chain over {seq_lens}")
        self.verify_windows += 1
        return window

    def forward_batch_generation(self, batch, on_publish=None):
        import torch
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.utils import GenerationBatchResult
        from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2

        orchestrator = batch.sampling_info.penalizer_orchestrator
        self.penalizer_seen.append(
            (sorted(r.rid for r in batch.reqs), orchestrator is not None and orchestrator.is_required)
        )
        seq_lens = batch.seq_lens.tolist()
        self._check_rows(batch, seq_lens)
        rows = batch.req_to_token_pool.req_to_token
        if batch.forward_mode.is_extend():
            tokens = []
            for i, req in enumerate(batch.reqs):
                row = int(batch.req_pool_indices[i])
                for pos in range(seq_lens[i]):
                    self.slot_owner[int(rows[row, pos])] = (req.rid, pos)
                out = seq_lens[i] - self.prompt_lens[req.rid]  # > 0 for a retracted request's new prefill
                tokens.append(self.streams[req.rid][out] if out < len(self.streams[req.rid]) else 0)
            on_publish(batch.seq_lens)
            next_ids = torch.tensor(tokens, dtype=torch.int64)
            return GenerationBatchResult(
                logits_output=LogitsProcessorOutput(next_token_logits=None),
                next_token_ids=next_ids,
                next_draft_input=DFlashDraftInputV2(bonus_tokens=next_ids),
                can_run_cuda_graph=False,
            )
        self.steps += 1
        bonus = batch.spec_info.bonus_tokens.tolist()
        window = self._verify_window(batch, seq_lens)
        out = torch.zeros((len(batch.reqs), self.n), dtype=torch.int64)
        commits = []
        for i, req in enumerate(batch.reqs):
            row = int(batch.req_pool_indices[i])
            stream = self.streams[req.rid]
            # seq_len counts the KV written: the prompt and every emitted token but the last (the bonus, this
            # verify's root), so the bonus is stream[done] and this step emits what follows it.
            done = seq_lens[i] - self.prompt_lens[req.rid]
            expected = stream[done] if done < len(stream) else 0  # 0: past its stream (see below)
            if bonus[i] != expected:
                self.errors.append(f"{req.rid}: bonus {bonus[i]} from the FutureMap, expected {expected}")
            # The verify writes the root's and every draft's KV; the root and the accepted drafts stay.
            for d, slot in enumerate(window[i]):
                self.slot_owner[slot] = (req.rid, seq_lens[i] + d)
            script = self.commit_scripts.get(req.rid)
            if script:
                commit = min(script.pop(0) if len(script) > 1 else script[0], self.n)
            else:
                commit = 1 + self.rng.randrange(self.n)
            following = stream[done + 1 : done + 1 + commit]
            following += [0] * (commit - len(following))  # past its stream: a finished request's wasted step
            out[i, :commit] = torch.tensor(following)
            commits.append(commit)
        commit_lens = torch.tensor(commits, dtype=torch.int32)
        new_seq_lens = batch.seq_lens + commit_lens.to(batch.seq_lens.dtype)
        on_publish(new_seq_lens)
        return GenerationBatchResult(
            logits_output=LogitsProcessorOutput(next_token_logits=None),
            next_token_ids=out.view(-1),
            accept_lens=commit_lens,
            new_seq_lens=new_seq_lens,
            next_draft_input=DFlashDraftInputV2(
                bonus_tokens=out[torch.arange(len(commits)), commit_lens.long() - 1]
            ),
            can_run_cuda_graph=False,
            speculative_num_draft_tokens=self.n,
        )


class _TargetAttnBackend:
    """Stands for the target's attention backend; DFLASH's verify-mask policy reads only its class name."""


_TargetAttnBackend.__name__ = "FlashInferAttnBackend"  # a backend whose chain verify needs no custom mask


class _DFlashV2Models(_ScriptedWorker):
    """The real DFlashWorker's steps (prefill: v1's code plus the v2 result; decode: _forward_decode_v2,
    patch dflash-overlap-step) on a worker made without __init__, whose target and drafter are scripts:

    - the target predicts each request's true next token (prompt + stream) at every verify row, and returns
      hidden rows that encode (req_to_token row, position, token);
    - the drafter proposes the true tokens for the first `commit - 1` drafts and a wrong one after, so each
      verify commits what the seeded script says; its block must take the reserved slots, and the draft KV
      it sees (written by the prefill's and the previous steps' appends, compact window or not) must hold
      every committed position's hidden row;
    - the fused KV write records slot -> hidden row (the drafter's KV pool).
    TP 1 (get_tp_group is a stand-in); the LM head is the identity over a 512-token vocabulary.
    """

    def __init__(
        self, *a, window: int | None, req_pool, allocator, block: int | None = None, worker_class=None, **k
    ):
        import torch
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.speculative import dflash_worker
        from sglang.srt.speculative.dflash_worker import DFlashWorker

        super().__init__(*a, allocator=allocator, **k)
        self.block = block or self.n  # the drafter's block (DFLASH: the verify width)
        dflash_worker.get_tp_group = lambda: types.SimpleNamespace(world_size=1)
        self.req_pool = req_pool
        self.draft_kv: dict[int, tuple] = {}
        self.target_kv: dict[int, tuple] = {}  # slot -> (position, token) the target's KV there holds
        self.full: dict[str, list[int]] = {}
        self.current: dict[int, object] = {}  # req_to_token row -> Req, for this forward
        self.appended_rows = 0
        self.check_reserved = True  # the v2 step's block and verify slots are the reserved row entries
        self.available_at_entry = 0
        draft_pool = req_pool
        if window is not None:
            draft_pool = ReqToTokenPool(
                size=req_pool.size,
                max_context_len=req_pool.req_to_token.shape[1],
                device="cpu",
                enable_memory_saver=False,
            )
        self.draft_pool = draft_pool
        eye = torch.eye(512)
        lm_head = types.SimpleNamespace(
            weight=eye,
            shard_indices=types.SimpleNamespace(
                num_org_elements=512,
                num_org_elements_padded=512,
                num_added_elements=0,
                org_vocab_start_index=0,
                added_vocab_start_index=512,
            ),
        )
        embedding = torch.nn.Embedding(512, 4)
        target_model = types.SimpleNamespace(get_input_embeddings=lambda: embedding, lm_head=lm_head)
        target_runner = types.SimpleNamespace(
            device=torch.device("cpu"),
            attn_backend=_TargetAttnBackend(),
            model=target_model,
            req_to_token_pool=req_pool,
        )
        target_runner.model_config = types.SimpleNamespace(vocab_size=512)
        worker = object.__new__(worker_class or DFlashWorker)
        worker.__dict__.update(
            device=torch.device("cpu"),
            block_size=self.block,
            _block_pos_offsets=torch.arange(self.block, dtype=torch.int64),
            draft_window_size=window,
            use_compact_draft_cache=window is not None,
            page_size=1,
            fast_step=True,
            _use_fused_kv_materialize=True,
            _fused_kv_helper=object(),
            _warned_sampling_fallback=False,
            _logged_first_verify=True,
            _kv_append_graphs=None,
            _kv_append_v2_graphs=None,
            _block_stage_v2_graphs=None,
            _chain_stage_graphs=None,
            _mask_token_id=511,
            _draft_block_ids_buf=None,
            _draft_block_spec_info=None,
            tp_rank=0,
            model_runner=target_runner,
            target_worker=types.SimpleNamespace(
                model_runner=target_runner,
                forward_batch_generation=self._target_forward,
            ),
            draft_model_runner=types.SimpleNamespace(
                req_to_token_pool=draft_pool,
                token_to_kv_pool_allocator=allocator,
                forward=self._drafter_forward,
            ),
            draft_model=types.SimpleNamespace(project_target_hidden=lambda h: h),
            _append_target_hidden_fused=self._record_kv,
        )
        self.worker = worker

    def true_token(self, req, position: int) -> int:
        full = self.full.setdefault(req.rid, list(req.origin_input_ids) + self.streams[req.rid])
        return full[position] if position < len(full) else 0

    def _record_kv(self, hidden, positions, cache_loc, max_position=None) -> None:
        with _uncounted():
            self._record_kv_rows(hidden, positions, cache_loc)

    def _record_kv_rows(self, hidden, positions, cache_loc) -> None:
        for row, position, slot in zip(hidden.tolist(), positions.tolist(), cache_loc.tolist(), strict=True):
            if slot == 0:
                continue  # the padding slot of the padded append
            if int(row[1]) != position:
                self.errors.append(f"draft KV: row for position {int(row[1])} written at position {position}")
            self.draft_kv[slot] = (int(row[0]), int(row[1]), int(row[2]))
            self.appended_rows += 1

    def _hidden(self, rows: list[tuple[int, int, int]]):
        import torch

        return torch.tensor(rows, dtype=torch.float32)

    def _target_forward(self, batch, is_verify: bool = False, **kwargs):
        with _uncounted():
            return self._target_script(batch, is_verify)

    def _target_script(self, batch, is_verify: bool):
        import torch
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.utils import GenerationBatchResult

        table = self.req_pool.req_to_token
        if not is_verify:  # prefill: every extended token's hidden row, the next token sampled
            rows, tokens = [], []
            for i, req in enumerate(batch.reqs):
                row = int(batch.req_pool_indices[i])
                start, end = batch.prefix_lens[i], int(batch.seq_lens[i])
                self._check_target_kv(req, row, start)  # a cached prefix must hold this request's tokens
                rows += [(row, p, self.true_token(req, p)) for p in range(start, end)]
                tokens.append(self.true_token(req, end))
                for p in range(start, end):
                    self.target_kv[int(table[row, p])] = (p, self.true_token(req, p))
            return GenerationBatchResult(
                logits_output=LogitsProcessorOutput(next_token_logits=None, hidden_states=self._hidden(rows)),
                next_token_ids=torch.tensor(tokens, dtype=torch.int64),
                can_run_cuda_graph=False,
            )
        bs, n = len(batch.reqs), self.n
        drafts = batch.input_ids.view(bs, n).tolist()
        logits = torch.zeros((bs * n, 512))
        rows = []
        window = batch.out_cache_loc.view(bs, n).tolist()
        reserved = True
        for i, req in enumerate(batch.reqs):
            row, seq = int(batch.req_pool_indices[i]), int(batch.seq_lens[i])
            if self.check_reserved and window[i] != self.req_pool.req_to_token[row, seq : seq + n].tolist():
                self.errors.append(f"{req.rid}: verify slots {window[i]} are not the reserved row entries")
                reserved = False
            self._check_target_kv(req, row, seq)
            for d in range(n):  # the verify writes each fed token's KV at its position
                self.target_kv[window[i][d]] = (seq + d, drafts[i][d])
            # a model fed a wrong root (a lost bonus) continues from it: the script then predicts other tokens
            shift = 0 if drafts[i][0] == self.true_token(req, seq) else 1
            for d in range(n):
                logits[i * n + d, (self.true_token(req, seq + d + 1) + shift) % 511] = 10.0
                rows.append((row, seq + d, drafts[i][d]))
        if self.check_reserved and self.allocator.available_size() != self.available_at_entry:
            self.errors.append("the v2 step allocated or freed KV slots")
            reserved = False
        self.verify_windows += int(reserved)
        return GenerationBatchResult(
            logits_output=LogitsProcessorOutput(next_token_logits=logits, hidden_states=self._hidden(rows)),
            can_run_cuda_graph=False,
        )

    def _drafter_forward(self, forward_batch):
        with _uncounted():
            return self._drafter_script(forward_batch)

    def _drafter_script(self, forward_batch):
        import torch

        bs, n = forward_batch.batch_size, self.block
        ids = forward_batch.input_ids.view(bs, n).tolist()
        slots = forward_batch.out_cache_loc.view(bs, n).tolist()
        target_rows = self.req_pool.req_to_token
        draft_rows = self.draft_pool.req_to_token
        hidden = torch.zeros((bs * n, 512))
        for i in range(bs):
            row = int(forward_batch.req_pool_indices[i])
            req = self.current[row]
            seq = int(forward_batch.positions[i * n])
            draft_len = int(forward_batch.seq_lens[i])
            if ids[i][0] != self.true_token(req, seq):
                self.errors.append(
                    f"{req.rid}: drafter root {ids[i][0]}, expected {self.true_token(req, seq)}"
                )
            if self.check_reserved and slots[i] != target_rows[row, seq : seq + n].tolist():
                self.errors.append(f"{req.rid}: drafter block slots are not the reserved ones")
            if draft_rows[row, draft_len : draft_len + n].tolist() != slots[i]:
                self.errors.append(f"{req.rid}: the draft row does not map the block after its {draft_len}")
            for j in range(draft_len):  # the draft KV the block attends to
                position = seq - draft_len + j
                got = self.draft_kv.get(int(draft_rows[row, j]))
                # (position, token): with the radix cache the row that wrote a shared prefix is another's
                if got is None or got[1:] != (position, self.true_token(req, position)):
                    self.errors.append(f"{req.rid}: draft KV at position {position} holds {got}")
                    break
            commit = self._commit_for(req)
            for d in range(1, n):
                for token, value in self._draft_row(self.true_token(req, seq + d), d, commit).items():
                    hidden[i * n + d, token] = value
        return types.SimpleNamespace(logits_output=types.SimpleNamespace(hidden_states=hidden))

    def _draft_row(self, token: int, d: int, commit: int) -> dict[int, float]:
        """The drafter's output at block position d (the LM head is the identity): the true token while
        d < commit, a wrong one after."""
        return {token if d < commit else (token + 1) % 511: 1.0}

    def _check_target_kv(self, req, row: int, length: int) -> None:
        """The target attends to the KV of positions 0 .. length - 1 through the request's row: each slot must
        hold that position's token of this request (a prefix from the radix cache included)."""
        table = self.req_pool.req_to_token
        for p in range(length):
            got = self.target_kv.get(int(table[row, p]))
            if got != (p, self.true_token(req, p)):
                self.errors.append(f"{req.rid}: target KV at position {p} holds {got}")
                return

    def _commit_for(self, req) -> int:
        script = self.commit_scripts.get(req.rid)
        if script:
            return min(script.pop(0) if len(script) > 1 else script[0], self.n)
        return 1 + self.rng.randrange(self.n)

    def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size: int = 0) -> None:
        self.worker.on_verify_complete_cpu(num_correct_drafts_per_req, batch_size)

    def forward_batch_generation(self, batch, on_publish=None):
        orchestrator = batch.sampling_info.penalizer_orchestrator
        self.penalizer_seen.append(
            (sorted(r.rid for r in batch.reqs), orchestrator is not None and orchestrator.is_required)
        )
        self.current = {int(batch.req_pool_indices[i]): req for i, req in enumerate(batch.reqs)}
        self._check_rows(batch, batch.seq_lens.tolist())
        if batch.forward_mode.is_decode():
            self.steps += 1
            # patch 0023: the FutureMap (told needs_cpu_seq_lens False) leaves the host lengths None, and a
            # read of them from the step's files raises
            if batch.seq_lens_cpu is not None or batch.seq_lens_sum is not None:
                self.errors.append(f"decode step {self.steps}: the batch carries host lengths")
            _hide_host_lengths(batch, self.errors, keep=True)
        self.available_at_entry = self.allocator.available_size()
        return self.worker.forward_batch_generation(batch, on_publish=on_publish)


class _DDTreeV2Models(_DFlashV2Models):
    """The real DDTreeWorker's steps (prefill: DFlash's; decode: DFlashWorker._forward_decode_v2 with DDTREE's
    tree verify input and _accept_v2, patch ddtree-overlap-step) on a worker made without __init__ (it loads
    a drafter and captures graphs on a GPU); the models are _DFlashV2Models' scripts, made tree-shaped:

    - the drafter's block row d (LM head: the identity) puts the true token first while d < commit; at
      d == commit a wrong token first (logit 10) and the true one second (logit 9); past it the true token is
      pushed out of the top-k. So the best-first tree holds the true chain, the wrong chain below it, and the
      true token at depth `commit` as a sibling popped after the whole wrong chain: the accepted path ends on
      a node whose verify row is not its path position (the slot permutation and row_index are exercised).
      A request commits min(commit + 1, B) tokens (B: all of the depth-(B - 1) chain).
    - the target predicts, at each verify row whose path from the root holds only true tokens, the true next
      token; at any other row the mask token 511 (never drafted: its drafter logit is -20). Logit 10 over
      zeros; 3 for a sampled request, so its sampling walk rejects and draws a bonus token. Each row's hidden
      state encodes (req_to_token row, position seq_len + depth, token): the draft KV append must take the
      committed path's rows at their path positions. The target KV written at a node's slot records
      (seq_len + depth, token), and the KV pool's move_kv_cache moves those records, so a later step attending
      to a position whose KV was not moved (or moved wrong) sees it.
    Top-k and tree building run their torch paths (Triton needs a GPU); TP 1 (get_tp_group stand-ins).
    """

    def __init__(self, *a, block: int, budget: int, topk: int, **k):
        from sglang.srt.speculative import ddtree_info, ddtree_worker
        from sglang.srt.speculative.ddtree_utils import prepare_ddtree_plan
        from sglang.srt.speculative.ddtree_worker import DDTreeWorker

        super().__init__(*a, block=block, worker_class=DDTreeWorker, **k)
        tp = types.SimpleNamespace(world_size=1)
        ddtree_worker.get_tp_group = lambda: tp
        ddtree_info.get_tp_group = lambda: tp
        self.worker.__dict__.update(
            ddtree_budget=budget,
            ddtree_topk=topk,
            num_verify_tokens=budget + 1,
            tree_depth=block - 1,
            tree_stage_graphs=None,
            commit_stage_graphs=None,
            captures_chain_stage=False,
        )
        prepare_ddtree_plan(budget, topk, block - 1, 512, self.worker.device)
        # the target's KV pool: its move_kv_cache (a Triton kernel / an index copy on a GPU) moves the records
        self.worker.target_worker.model_runner.token_to_kv_pool = types.SimpleNamespace(
            move_kv_cache=self._move_kv
        )
        self.kv_moves = 0  # pairs that moved a slot's KV to another slot
        self.graded = False  # a sampled request's target: two runners-up (for the sampling filters)
        # per verify and request: the verify rows on the true stream (a greedy walk's accepted path)
        self.path_rows: list[list[int]] = []

    def _move_kv(self, tgt_loc, src_loc) -> None:
        """The KV pool's move_kv_cache on the scripted target KV: every source read before any target is
        written (the real kernels load before they store)."""
        with _uncounted():
            pairs = list(zip(tgt_loc.tolist(), src_loc.tolist(), strict=True))
            values = [self.target_kv.get(src) for _, src in pairs]
            for (tgt, src), value in zip(pairs, values, strict=True):
                if tgt == src:
                    continue
                self.kv_moves += 1
                if value is None:
                    self.target_kv.pop(tgt, None)
                else:
                    self.target_kv[tgt] = value

    def _draft_row(self, token: int, d: int, commit: int) -> dict[int, float]:
        wrong = (token + 1) % 511
        if d < commit:
            return {token: 10.0, 511: -20.0}
        if d == commit:
            return {wrong: 10.0, token: 9.0, 511: -20.0}
        return {wrong: 10.0, token: -10.0, 511: -20.0}

    def _target_script(self, batch, is_verify: bool):
        import torch
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.utils import GenerationBatchResult

        if not is_verify:
            return super()._target_script(batch, is_verify)
        spec = batch.spec_info
        bs, n = len(batch.reqs), self.n
        drafts = batch.input_ids.view(bs, n).tolist()
        positions = spec.positions.view(bs, n).tolist()
        ancestors = spec.tree.mask.view(bs, n, n).tolist()  # row i: ancestor-or-self columns
        window = batch.out_cache_loc.view(bs, n).tolist()
        logits = torch.zeros((bs * n, 512))
        rows = []
        reserved = True
        for i, req in enumerate(batch.reqs):
            row, seq = int(batch.req_pool_indices[i]), int(batch.seq_lens[i])
            if self.check_reserved and window[i] != self.req_pool.req_to_token[row, seq : seq + n].tolist():
                self.errors.append(f"{req.rid}: verify slots {window[i]} are not the reserved row entries")
                reserved = False
            self._check_target_kv(req, row, seq)
            true_rows = []
            for r in range(n):
                self.target_kv[window[i][r]] = (positions[i][r], drafts[i][r])
                path = [c for c in range(n) if ancestors[i][r][c]]
                on_stream = all(drafts[i][c] == self.true_token(req, positions[i][c]) for c in path)
                predicted = self.true_token(req, positions[i][r] + 1) if on_stream else 511
                # a sampled request sees a flat target (the true token about 4%): its walk rejects and samples
                logits[i * n + r, predicted] = 10.0 if req.sampling_params.temperature == 0 else 3.0
                if self.graded and req.sampling_params.temperature > 0:
                    # runners-up for the top-k / top-p / min-p filters: 2.5 and 2.0 after the predicted token
                    logits[i * n + r, (predicted + 1) % 511] = 2.5
                    logits[i * n + r, (predicted + 2) % 511] = 2.0
                rows.append((row, positions[i][r], drafts[i][r]))
                if on_stream:
                    true_rows.append(r)
            self.path_rows.append(true_rows)
        if self.check_reserved and self.allocator.available_size() != self.available_at_entry:
            self.errors.append("the v2 step allocated or freed KV slots")
            reserved = False
        self.verify_windows += int(reserved)
        return GenerationBatchResult(
            logits_output=LogitsProcessorOutput(next_token_logits=logits, hidden_states=self._hidden(rows)),
            can_run_cuda_graph=False,
        )


def _track_future_map_reads(future_map, errors: list) -> None:
    """What FutureMap does in SGLang's CI (SGLANG_IS_IN_CI: its buffers start at -1, a gather asserts
    non-negative values and writes -1 back), for DFlashFutureMap's bonus tokens and, beyond CI, the
    published lengths: each step must read a bonus stashed and lengths published since the last read of
    that request slot (a stale value, even a right one, shows a missing stash or publish)."""
    future_map.output_tokens_buf.fill_(-1)
    future_map.new_seq_lens_buf.fill_(-1)
    resolve_extras, resolve_lens = future_map._resolve_spec_extras, future_map.resolve_seq_lens_cpu

    def extras(batch) -> None:
        resolve_extras(batch)
        spec = batch.spec_info
        if spec is None:
            return
        if (spec.bonus_tokens < 0).any():
            errors.append(f"FutureMap: bonus read without a stash at slots {spec.future_indices.tolist()}")
        future_map.output_tokens_buf[spec.future_indices] = -1

    def lens(batch) -> None:
        resolve_lens(batch)
        spec = batch.spec_info
        if spec is None or spec.future_indices is None:
            return
        if (batch.seq_lens < 0).any():
            errors.append(f"FutureMap: lengths read without a publish at {spec.future_indices.tolist()}")
        future_map.new_seq_lens_buf[spec.future_indices] = -1

    future_map._resolve_spec_extras, future_map.resolve_seq_lens_cpu = extras, lens


def stand_in_result_processor(args, model_config, allocator, cache, req_pool, worker, overlap: bool):
    """SGLang's real SchedulerBatchResultProcessor (the decode result path under test) with the metrics,
    logprob and streaming parts it also drives replaced by no-ops."""
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    return SchedulerBatchResultProcessor(
        is_generation=True,
        disaggregation_mode=None,
        enable_overlap=overlap,
        enable_overlap_mlx=False,
        server_args=args,
        model_config=model_config,
        token_to_kv_pool_allocator=allocator,
        tree_cache=cache,
        hisparse_coordinator=None,
        req_to_token_pool=req_pool,
        decode_offload_manager=None,
        metrics_collector=_NoOp(),
        metrics_reporter=_Metrics(),
        draft_worker=None,
        model_worker=worker,
        logprob_result_processor=_NoOp(),
        output_streamer=_NoOp(),
        abort_request=lambda *a, **k: None,
    )


def _simulation(
    args,
    scenario: dict,
    worker_kind: str = "script",
    window: int | None = None,
    radix: bool = False,
    graphs: bool = False,
) -> dict:
    """Requests arrive, decode and finish under the overlap loop; returns what the test asserts. `graphs`:
    the real worker's v2 step graphs through their CPU stand-in (_install_cpu_step_graphs), every batch size
    up to 8 captured: each step replays them over static buffers and outputs that the next replay rewrites."""
    import torch
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers import scheduler as scheduler_module
    from sglang.srt.managers.io_struct import AbortReq
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
    from sglang.srt.mem_cache import common as mem_common
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.common import maybe_cache_unfinished_req
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.radix_cache import RadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import set_global_server_args_for_scheduler
    from sglang.srt.speculative import dflash_info_v2
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    set_global_server_args_for_scheduler(args)
    mem_common.support_triton = lambda backend: False  # SGLang's own torch path for req_to_token writes
    dflash_info_v2.assign_req_to_token_pool_func = _assign_reference
    algo = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    n = int(args.speculative_num_draft_tokens)
    context = scenario["context"]
    req_pool = ReqToTokenPool(
        size=16,
        max_context_len=context + mem_common.get_req_to_token_extra_context_len(args),
        device="cpu",
        enable_memory_saver=False,
    )
    pool_size = scenario["kv_slots"]
    allocator = TokenToKVPoolAllocator(pool_size, torch.bfloat16, "cpu", None, False)
    if radix:
        cache = RadixCache(
            CacheInitParams(
                disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator, page_size=1
            )
        )
    else:
        cache = ChunkCache(
            CacheInitParams(
                disable=True, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator, page_size=1
            )
        )
    start_available = allocator.available_size()
    prefix_hits: dict[str, int] = {}
    start_req_slots = req_pool.available_size()
    model_config = types.SimpleNamespace(
        vocab_size=512, is_encoder_decoder=False, context_len=context, think_end_id=None
    )
    errors: list[str] = []
    streams = {r["rid"]: r["stream"] for r in scenario["requests"]}
    prompt_lens = {r["rid"]: len(r["prompt"]) for r in scenario["requests"]}
    if worker_kind == "dflash_v2":
        worker = _DFlashV2Models(
            streams,
            prompt_lens,
            n,
            scenario["seed"],
            window=window,
            req_pool=req_pool,
            allocator=allocator,
            errors=errors,
        )
    elif worker_kind == "ddtree_v2":
        worker = _DDTreeV2Models(
            streams,
            prompt_lens,
            n,
            scenario["seed"],
            window=window,
            req_pool=req_pool,
            allocator=allocator,
            errors=errors,
            block=int(args.speculative_dflash_block_size),
            budget=int(args.speculative_ddtree_budget),
            topk=int(args.speculative_ddtree_topk),
        )
    else:
        worker = _ScriptedWorker(streams, prompt_lens, n, scenario["seed"], allocator, errors)
    worker.commit_scripts = {r["rid"]: list(r["commits"]) for r in scenario["requests"] if r.get("commits")}
    graph_record: list = []
    if graphs:
        _install_cpu_step_graphs(worker.worker, graph_record, range(1, 9), worker_kind == "ddtree_v2")

    sched = types.SimpleNamespace(
        forward_ct=0,
        scripted_scheduler_hook=None,
        profiler_manager=_NoOp(),
        forward_sleep_time=None,
        is_generation=True,
        enable_overlap=True,
        # False: what the scheduler decides for a Triton target (decide_needs_cpu_seq_lens)
        future_map=algo.create_future_map(torch.device("cpu"), req_pool, False),
        forward_stream_ctx=contextlib.nullcontext(),
        forward_stream=_NoOp(),
        schedule_stream=_NoOp(),
        model_worker=worker,
        batch_record_buf=[None, None],
        batch_record_ct=0,
        device_module=torch.get_device_module("cpu"),
        server_args=args,
        spec_algorithm=algo,
    )
    for name in ("run_batch", "_forward_isolation", "record_batch_in_overlap", "_maybe_report_active_ranks"):
        setattr(sched, name, getattr(scheduler_module.Scheduler, name).__get__(sched))
    _track_future_map_reads(sched.future_map, errors)
    processor = stand_in_result_processor(
        args, model_config, allocator, cache, req_pool, worker, overlap=True
    )

    def make_req(spec: dict) -> Req:
        params = SamplingParams(max_new_tokens=spec["max_new"], temperature=0, **spec.get("sampling", {}))
        params.normalize(None)
        params.verify(512)
        return Req(
            spec["rid"],
            "",
            array("q", spec["prompt"]),
            params,
            vocab_size=512,
            eos_token_ids={scenario["eos"]},
        )

    def admit(waiting: list) -> list:
        """A stand-in for PrefillAdder: admit in order while the prompt plus one reservation of every
        admitted and running request fits in the free KV slots; no chunking."""
        free = allocator.available_size() - (len(running.reqs) if running is not None else 0) * 2 * n
        admitted = []
        for req in list(waiting):
            req.init_next_round_input(cache)
            req.fill_len = len(req.full_untruncated_fill_ids)  # what PrefillAdder.add_one_req sets
            need = req.extend_input_len + 2 * n
            if need > free:
                break
            free -= need
            if radix:  # what PrefillAdder does for an admitted request: lock its cached prefix
                cache.inc_lock_ref(req.last_node)
                prefix_hits[req.rid] = prefix_hits.get(req.rid, 0) + len(req.prefix_indices)
            admitted.append(req)
            waiting.remove(req)
        return admitted

    def admit_chunked(waiting: list) -> list:
        """get_new_batch_prefill's admission with the real PrefillAdder and chunked prefill (scenario
        "chunk" = chunked_prefill_size): the chunked request first, then waiting requests while they fit;
        the adder truncates the one that overflows the chunk and it becomes the chunked request."""
        nonlocal chunked_req
        adder = PrefillAdder(
            1,
            cache,
            allocator,
            running,
            0.7,  # the scheduler's initial new_token_ratio
            16384,  # max_prefill_tokens
            scenario["chunk"],
            max_running_requests=req_pool.size,
            waiting_queue_len=len(waiting),
        )
        if chunked_req is not None:
            chunked_req.init_next_round_input()
            chunked_req = adder.add_chunked_req(chunked_req)
        for req in list(waiting):
            running_bs = len(running.reqs) if running is not None else 0
            if len(adder.can_run_list) >= min(req_pool.size - running_bs, req_pool.available_size()):
                break
            req.init_next_round_input(cache)
            has_chunked = chunked_req is not None
            added = adder.add_one_req(req, has_chunked_req=has_chunked, truncation_align_size=None)
            if added != AddReqResult.CONTINUE:
                break
        admitted = list(adder.can_run_list)
        waiting[:] = [r for r in waiting if r not in admitted]
        if radix:  # the cached prefix each newly admitted request starts from (the adder locked it)
            for req in admitted:
                if req is not chunked_req:
                    prefix_hits[req.rid] = prefix_hits.get(req.rid, 0) + len(req.prefix_indices)
        if adder.new_chunked_req is not None:
            assert chunked_req is None
            chunked_req = adder.new_chunked_req
        if chunked_req is not None:
            chunked_req.inflight_middle_chunks += 1
            chunk_sizes.append((chunked_req.rid, chunked_req.extend_input_len))
        return admitted

    def abort(rid: str) -> None:
        """The real Scheduler.abort_request, as process_input_requests calls it at the top of an iteration
        (cur_batch: the batch launched in the previous iteration, still in flight)."""
        req = next(r for r in all_reqs if r.rid == rid)
        state = (
            "finished"
            if req.finished()
            else "chunked"
            if req is chunked_req
            else "prefill in flight"
            if last_batch is not None and last_batch.forward_mode.is_extend() and req in last_batch.reqs
            else "decode in flight"
            if last_batch is not None and last_batch.forward_mode.is_decode() and req in last_batch.reqs
            else "running"
            if running is not None and req in running.reqs
            else "waiting"
            if req in waiting
            else "elsewhere"
        )
        abort_states[rid] = [state, len(req.output_ids), req.kv_committed_len, req.kv_allocated_len]
        view = types.SimpleNamespace(
            waiting_queue=waiting,
            enable_hicache_storage=False,
            ipc_channels=types.SimpleNamespace(send_to_tokenizer=_NoOp()),
            disaggregation_mode=DisaggregationMode.NULL,
            grammar_manager=_NoOp(),
            cur_batch=last_batch,
            running_batch=running if running is not None else types.SimpleNamespace(reqs=[]),
        )
        scheduler_module.Scheduler.abort_request(view, AbortReq(rid=rid))

    pending = sorted(scenario["requests"], key=lambda r: r["arrive"])
    waiting: list = []
    running = None
    last_batch = None
    queue: list = []
    all_reqs: list = []
    estimates: list[tuple[int, int]] = []
    retracted: list[str] = []
    widest = 0
    iteration = 0
    chunked_req = None  # the scheduler's chunked_req (scenario "chunk")
    chunk_sizes: list[tuple[str, int]] = []  # (rid, tokens) of each middle chunk scheduled
    aborts: dict[str, int] = scenario.get("aborts", {})  # rid -> iteration its AbortReq arrives
    abort_states: dict[str, list] = {}  # rid -> [where it was, tokens out] when aborted
    while iteration < 400:
        for rid, when in aborts.items():  # process_input_requests: an AbortReq arrives
            if when == iteration:
                abort(rid)
        # get_next_batch_to_run's order: the chunked request kept out of the merge (its chunk cached),
        # merge the last prefill (finished ones filtered), prefill first, else filter the running batch's
        # finished requests, check memory (retract), prepare the decode step.
        if chunked_req is not None and chunked_req.fill_len > len(chunked_req.prefix_indices):
            maybe_cache_unfinished_req(chunked_req, cache, chunked=True)  # stash_chunked_request
        if last_batch is not None and last_batch.forward_mode.is_extend():
            last_batch.filter_batch(chunked_req_to_exclude=[chunked_req] if chunked_req is not None else [])
            if not last_batch.is_empty():
                if running is None or running.is_empty():
                    running = last_batch
                else:
                    running.merge_batch(last_batch)
        arrived = [r for r in pending if r["arrive"] <= iteration]
        pending = [r for r in pending if r["arrive"] > iteration]
        for spec in arrived:
            req = make_req(spec)
            all_reqs.append(req)
            waiting.append(req)
        batch = None
        if scenario.get("chunk"):
            admitted = admit_chunked(waiting) if waiting or chunked_req is not None else []
        else:
            admitted = admit(waiting) if waiting else []
        if admitted:
            batch = ScheduleBatch.init_new(
                admitted, req_pool, allocator, cache, model_config, True, algo, chunked_req=chunked_req
            )
            batch.prepare_for_extend()
        elif running is not None:
            running.filter_batch()
            if not running.is_empty() and not running.check_decode_mem():
                out, _, aborted = running.retract_decode(args)
                if aborted:
                    errors.append(f"iteration {iteration}: aborted {[r.rid for r in aborted]}")
                retracted.extend(r.rid for r in out)
                waiting[:0] = out
            if not running.is_empty():
                needed = running.new_tokens_required_next_decode()
                before = allocator.available_size()
                running.prepare_for_decode()
                estimates.append((needed, before - allocator.available_size()))
                widest = max(widest, max(r.kv_allocated_len for r in running.reqs))
                batch = running
        if batch is not None:
            result = sched.run_batch(batch)
            queue.append((batch.copy(), result))
        if last_batch is not None and queue and (batch is None or len(queue) > 1):
            done_batch, done_result = queue.pop(0)
            if done_batch.forward_mode.is_extend():
                processor.process_batch_result_prefill(done_batch, done_result)
            else:
                processor.process_batch_result_decode(done_batch, done_result)
        last_batch = batch
        iteration += 1
        if not pending and not waiting and not queue and batch is None:
            break

    if iteration >= 400:
        errors.append("the requests did not finish within 400 iterations")
    cached_tokens = 0
    if radix:  # the tree holds the finished requests' KV: evict it all, then nothing may be missing
        cached_tokens = cache.evictable_size()
        if cache.protected_size() != 0:
            errors.append(f"radix cache: {cache.protected_size()} tokens still locked")
        cache.evict(EvictParams(num_tokens=pool_size))
    finished = {r.rid: r.finished() for r in all_reqs}
    outputs = {r.rid: list(r.output_ids_through_stop) for r in all_reqs}
    return {
        "iterations": iteration,
        "verify_steps": worker.steps,
        "errors": errors[:20],
        "finished": finished,
        "outputs": outputs,
        "kv_available": [start_available, allocator.available_size()],
        "req_slots_available": [start_req_slots, req_pool.available_size()],
        "estimate_vs_allocated": estimates,
        "widest_reservation": widest,
        "row_width": int(req_pool.req_to_token.shape[1]),
        "penalizer_seen": worker.penalizer_seen,
        "future_map": type(sched.future_map).__name__,
        "retracted": retracted,
        "verify_windows": worker.verify_windows,
        "draft_kv_rows": getattr(worker, "appended_rows", None),
        "prefix_hits": prefix_hits,
        "radix_cached_tokens": cached_tokens,
        "path_rows": getattr(worker, "path_rows", None),
        "kv_moves": getattr(worker, "kv_moves", None),
        "chunk_sizes": chunk_sizes,
        "abort_states": abort_states,
        "finish_reasons": {r.rid: type(r.finished_reason).__name__ for r in all_reqs},
        "graph_replays": _graph_replays(graph_record),
    }


def _commits_to(tokens: int, n: int) -> list[int]:
    """Tokens committed per verify so that `tokens` are out (the prefill's included), then N every step."""
    full, rest = divmod(tokens - 1, n)
    return [n] * full + ([rest] if rest else []) + [n]


def _scenario(n: int) -> dict:
    """Requests with different prompts, lengths and stops, arriving at different iterations; one runs to the
    context limit, one finishes at prefill, one stops at an EOS inside a verify chain, one has penalties."""
    eos = 2
    rng = random.Random(7)
    context = 96

    def stream(length: int, eos_at: int | None = None) -> list[int]:
        tokens = [rng.randrange(10, 500) for _ in range(length)]
        if eos_at is not None:
            tokens[eos_at] = eos
        return tokens

    requests = [
        {"rid": "a", "prompt": [5, 6, 7, 8], "stream": stream(40), "max_new": 40, "arrive": 0},
        {"rid": "b", "prompt": [9] * 11, "stream": stream(60, eos_at=23), "max_new": 60, "arrive": 0},
        {"rid": "c", "prompt": [3, 4], "stream": stream(5), "max_new": 1, "arrive": 2},
        {
            "rid": "d",
            "prompt": [11, 12, 13],
            "stream": stream(30),
            "max_new": 30,
            "arrive": 3,
            "sampling": {"frequency_penalty": 0.5},
        },
        # prompt + max_new = the context length; scripted to have max_new - 1 tokens out when a step
        # commits all N: that step and the wasted one after it (run before the host sees the finish)
        # write furthest into the req_to_token row
        {
            "rid": "e",
            "prompt": list(range(20, 56)),
            "stream": stream(60),
            "max_new": context - 36,
            "arrive": 5,
            "commits": _commits_to(context - 36 - 1, n),
        },
        {"rid": "f", "prompt": [7] * 5, "stream": stream(3), "max_new": 3, "arrive": 9},
        {"rid": "g", "prompt": [8] * 6, "stream": stream(25, eos_at=0), "max_new": 25, "arrive": 12},
    ]
    return {"requests": requests, "eos": eos, "context": context, "kv_slots": 2048, "seed": 11}


def _radix_scenario(n: int) -> dict:
    """_scenario plus requests whose prompts start with an earlier request's prompt (while it runs) or with
    its prompt and output (after it finished): the radix cache hands them those KV slots."""
    scenario = _scenario(n)
    by_rid = {r["rid"]: r for r in scenario["requests"]}
    rng = random.Random(17)
    a, b, d = by_rid["a"], by_rid["b"], by_rid["d"]
    extra = [
        {"rid": "h", "prompt": a["prompt"] + a["stream"][:12] + [77, 78], "arrive": 30},
        {"rid": "i", "prompt": b["prompt"] + [5, 6, 7], "arrive": 4},
        {"rid": "j", "prompt": d["prompt"] + [14], "arrive": 6},
        {"rid": "k", "prompt": a["prompt"] + a["stream"][:40], "arrive": 40},
    ]
    for r in extra:
        r.update(stream=[rng.randrange(10, 500) for _ in range(20)], max_new=20)
    scenario["requests"] = scenario["requests"] + extra
    return scenario


def _chunked(scenario: dict, chunk: int = 16) -> dict:
    """`scenario` under chunked prefill (the real PrefillAdder, chunked_prefill_size `chunk`): two long
    prompts arrive while others decode (L: 60 tokens, four chunks; M: 45 tokens, waiting behind L's chunks,
    then chunked itself, an EOS inside its output); e's 36-token prompt is chunked too."""
    rng = random.Random(23)
    eos = scenario["eos"]
    m_stream = [rng.randrange(10, 500) for _ in range(20)]
    m_stream[9] = eos
    extra = [
        {"rid": "L", "prompt": [rng.randrange(10, 500) for _ in range(60)], "max_new": 30, "arrive": 4},
        {"rid": "M", "prompt": [rng.randrange(10, 500) for _ in range(45)], "max_new": 20, "arrive": 4},
    ]
    extra[0]["stream"] = [rng.randrange(10, 500) for _ in range(30)]
    extra[1]["stream"] = m_stream
    return {**scenario, "requests": scenario["requests"] + extra, "chunk": chunk}


def _aborted(scenario: dict) -> dict:
    """`scenario` (chunked) plus requests aborted through the real Scheduler.abort_request while a step for
    them is in flight: x while its prefill runs, y while its decode step runs (at iteration 9 the chunked
    prefills still starve its decode), z (a 70-token prompt) between two of its chunks; their AbortReq
    arrives at the top of the iteration, as process_input_requests handles it."""
    rng = random.Random(29)
    extra = [
        {"rid": "x", "prompt": [4] * 6, "max_new": 40, "arrive": 20},
        {"rid": "y", "prompt": [6] * 7, "max_new": 60, "arrive": 1},
        {"rid": "z", "prompt": [rng.randrange(10, 500) for _ in range(70)], "max_new": 20, "arrive": 24},
    ]
    for r in extra:
        r["stream"] = [rng.randrange(10, 500) for _ in range(r["max_new"])]
    return {**scenario, "requests": scenario["requests"] + extra, "aborts": {"x": 21, "y": 18, "z": 26}}


def _expected_outputs(scenario: dict) -> dict:
    """Plain decoding's outputs of the script: the stream up to the first EOS (included) or max_new tokens."""
    out = {}
    for r in scenario["requests"]:
        tokens = r["stream"][: r["max_new"]]
        if scenario["eos"] in tokens:
            tokens = tokens[: tokens.index(scenario["eos"]) + 1]
        out[r["rid"]] = tokens
    return out


def _isolation_facts(args) -> dict:
    """The forward copy of a real SamplingBatchInfo (a request with a frequency penalty, prepared by the real
    prepare_for_extend) inside the real Scheduler._forward_isolation: DFLASH and DDTREE keep the penalizer
    orchestrator; EAGLE's copy drops it (its penalties go through accumulated buffers)."""
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
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    set_global_server_args_for_scheduler(args)
    mem_common.support_triton = lambda backend: False
    req_pool = ReqToTokenPool(size=4, max_context_len=64, device="cpu", enable_memory_saver=False)
    allocator = TokenToKVPoolAllocator(128, torch.bfloat16, "cpu", None, False)
    cache = ChunkCache(
        CacheInitParams(
            disable=True, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator, page_size=1
        )
    )
    params = SamplingParams(max_new_tokens=8, temperature=0, frequency_penalty=0.5)
    params.normalize(None)
    params.verify(512)
    req = Req("p", "", array("q", [5, 6, 7]), params, vocab_size=512, eos_token_ids={2})
    req.init_next_round_input(cache)
    req.fill_len = len(req.full_untruncated_fill_ids)
    model_config = types.SimpleNamespace(vocab_size=512, is_encoder_decoder=False, context_len=64)
    out = {}
    for name in ("DFLASH", "DDTREE", "EAGLE"):
        algo = SpeculativeAlgorithm.from_string(name)
        batch = ScheduleBatch.init_new([req], req_pool, allocator, cache, model_config, False, algo)
        batch.prepare_for_extend()
        info = batch.sampling_info
        with scheduler_module.Scheduler._forward_isolation(types.SimpleNamespace(), batch, overlap=False):
            inside = batch.sampling_info
        out[name] = {
            "penalties_required": bool(info.penalizer_orchestrator.is_required),
            "copied": inside is not info,
            "orchestrator_kept": inside.penalizer_orchestrator is info.penalizer_orchestrator,
            "accumulated": inside.acc_additive_penalties is not None,
            "restored": batch.sampling_info is info,
        }
        allocator.free(req_pool.req_to_token[batch.req_pool_indices[0], : len(req.origin_input_ids)])
        req_pool.free(req)
    return out


class _SyncCounter:
    """Counts the Tensor methods that copy device data to the host (a sync on a GPU) while it is entered."""

    METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__index__")

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.saved: dict = {}

    def __enter__(self):
        import torch

        for name in self.METHODS:
            original = getattr(torch.Tensor, name)
            self.saved[name] = original

            def counted(tensor, *a, _name=name, _original=original, **k):
                self.calls.append(_name)
                return _original(tensor, *a, **k)

            setattr(torch.Tensor, name, counted)
        return self

    def __exit__(self, *exc) -> None:
        import torch

        for name, original in self.saved.items():
            setattr(torch.Tensor, name, original)


_ACTIVE_COUNTERS: list = []


def _verify_mask_facts(verify, seq_lens: list[int]) -> dict:
    """The v2 verify's flat custom mask (patch 0023: sized on the host from the reserved row ends, laid out
    on the device from the exact lengths) against the exact one: the chain's causal block (v1's host loop)
    or the tree's ancestor mask, over the lengths the step started from. None where no mask is built."""
    import torch
    from sglang.srt.speculative.ddtree_utils import flatten_verify_mask

    mask = verify.custom_mask
    if mask is None:
        return {"built": False}
    size, bs = int(verify.draft_token_num), len(seq_lens)
    tree = getattr(verify, "tree", None)
    pattern = (
        tree.mask
        if tree is not None
        else torch.ones((size, size), dtype=torch.bool).tril().expand(bs, size, size)
    )
    exact = flatten_verify_mask(pattern, torch.tensor(seq_lens), sum(seq_lens))
    return {
        "built": True,
        "head_equal": mask.numel() >= exact.numel() and torch.equal(mask[: exact.numel()].cpu(), exact),
        "slack": mask.numel() - exact.numel(),
    }


# the files of the v2 decode step (patches 0021-0023): none may read the batch's host lengths
_V2_STEP_FILES = (
    "dflash_worker.py",
    "dflash_info.py",
    "dflash_info_v2.py",
    "ddtree_info.py",
    "ddtree_worker.py",
)


def _hide_host_lengths(batch, host_reads: list[str], keep: bool = False) -> None:
    """Leave batch.seq_lens_cpu / seq_lens_sum None, as DFlashFutureMap does for a Triton target (patch 0023),
    and make a read of either from the v2 step's files raise (recorded in host_reads): a step that reads them
    would size something from the previous step's lengths, which the host no longer waits for. Reads from
    SGLang's own code (the ModelWorkerBatch, ForwardBatch.init_new) get None, as on the server. `keep`: keep
    the values the batch holds (the simulation's scheduler batches, whose class stays swapped afterwards)."""
    if getattr(type(batch), "_hides_host_lengths", False):
        return
    held = {name: batch.__dict__.get(name) for name in ("seq_lens_cpu", "seq_lens_sum")}

    def hidden(name: str) -> property:
        def get(self):
            caller = sys._getframe(1).f_code
            if os.path.basename(caller.co_filename) in _V2_STEP_FILES:
                where = f"{name} read at {os.path.basename(caller.co_filename)}:{sys._getframe(1).f_lineno}"
                host_reads.append(f"{where} {caller.co_name}")
                raise AttributeError(f"the v2 step must not read batch.{where}")
            return self.__dict__.get("_hidden_" + name)

        def put(self, value) -> None:
            self.__dict__["_hidden_" + name] = value

        return property(get, put)

    batch.__class__ = type(
        "NoHostLengths",
        (type(batch),),
        # recorded as well as raised: a getattr(batch, "seq_lens_cpu", None) would swallow the AttributeError
        {
            "seq_lens_cpu": hidden("seq_lens_cpu"),
            "seq_lens_sum": hidden("seq_lens_sum"),
            "_hides_host_lengths": True,
        },
    )
    batch.seq_lens_cpu = held["seq_lens_cpu"] if keep else None
    batch.seq_lens_sum = held["seq_lens_sum"] if keep else None


@contextlib.contextmanager
def _uncounted():
    """The scripted models stand for GPU kernels: their host reads are the script's, not the step's."""
    saved = [c.paused for c in _ACTIVE_COUNTERS]
    for c in _ACTIVE_COUNTERS:
        c.paused = True
    try:
        yield
    finally:
        for c, was in zip(_ACTIVE_COUNTERS, saved, strict=True):
            c.paused = was


def _device_sync_counter():
    """A TorchFunctionMode that counts what would copy device data to the host on a GPU, in one step of
    the worker (the scripted models are not counted, see _uncounted).

    On CPU every tensor is a host tensor, so the host ones are tagged (_HostTensor; the tag follows every
    op): what the caller marks (batch.seq_lens_cpu, the worker's host buffer) and what a D2H copy returns.
    Every other tensor stands for a device tensor (conservative: a host tensor made inside the step counts as
    one). Counted on those:
    item/tolist/numpy/cpu, bool/int/float/index conversions, .to("cpu"), a host tensor's copy_ from a device
    one, and the ops whose output size depends on the data (nonzero, masked_select, unique,
    repeat_interleave without output_size, one-argument where, boolean-mask indexing)."""
    import torch
    from torch.overrides import TorchFunctionMode

    class _HostTensor(torch.Tensor):
        pass

    d2h = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__"}
    data_sized = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"}

    def is_device(x) -> bool:
        return isinstance(x, torch.Tensor) and not isinstance(x, _HostTensor)

    def to_host(out):
        return out.as_subclass(_HostTensor) if isinstance(out, torch.Tensor) else out

    def bool_index(index) -> bool:
        parts = index if isinstance(index, tuple) else (index,)
        return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)

    class Counter(TorchFunctionMode):
        HostTensor = _HostTensor

        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []
            self.paused = False

        def __enter__(self):
            _ACTIVE_COUNTERS.append(self)
            return super().__enter__()

        def __exit__(self, *exc):
            _ACTIVE_COUNTERS.remove(self)
            return super().__exit__(*exc)

        def host(self, tensor):
            """Mark a tensor as a host tensor (what the step reads from the host: seq_lens_cpu...)."""
            return to_host(tensor)

        def _reason(self, name: str, args, kwargs) -> str | None:
            first = args[0] if args else None
            if name in d2h and is_device(first):
                return name
            if name == "to" and is_device(first):
                target = kwargs.get("device", args[1] if len(args) > 1 else None)
                if isinstance(target, str) and target.startswith("cpu"):
                    return 'to("cpu")'
            if name == "copy_" and isinstance(first, _HostTensor) and len(args) > 1 and is_device(args[1]):
                return "copy_ into a host tensor"
            if name in data_sized and is_device(first):
                return name
            if name == "repeat_interleave" and is_device(first) and kwargs.get("output_size") is None:
                return "repeat_interleave without output_size"
            if name == "where" and len(args) == 1 and is_device(first):
                return "where(condition)"
            if name in ("__getitem__", "__setitem__", "index_put_") and is_device(first):
                index = args[1] if len(args) > 1 else None
                if bool_index(index):
                    return f"{name} with a boolean mask"
            return None

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            reason = self._reason(name, args, kwargs)
            if reason is not None and not self.paused:
                self.calls.append(f"{reason} at {_caller()}")
            out = func(*args, **kwargs)
            if name in ("cpu", "numpy") or reason == 'to("cpu")':  # a device-to-host copy's result
                return to_host(out)
            return out

    return Counter()


def _caller() -> str:
    """The innermost sglang frame: where the counted call is."""
    frame = sys._getframe(2)
    while frame is not None:
        if "/sglang/" in frame.f_code.co_filename:
            path = frame.f_code.co_filename.split("/sglang/", 1)[1]
            return f"{path}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


def _chain_verify_facts() -> dict:
    """verify_chain_v2 against v1's DFlashVerifyInput.verify on the same drafts and logits (greedy): the same
    accepted tokens, commit lengths, bonus and new lengths for requests that do not finish; no host sync,
    no write to the batch or its requests. Random cases: 6 requests, block 8, every accept length."""
    import torch
    from ddtree_sglang_probe import _Req  # the Req attributes v1's verify touches, finishing after max_new
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import dflash_info
    from sglang.srt.speculative.dflash_step_v2 import verify_chain_v2

    dflash_info.assign_req_to_token_pool_func = _assign_reference
    gen = torch.Generator().manual_seed(5)
    bs, width, vocab = 8, 8, 64
    cases = []
    for case in range(6):
        accept = torch.tensor([(case + i) % width for i in range(bs)])  # 0..7 accepted drafts
        candidates = torch.randint(3, vocab, (bs, width), generator=gen)
        argmax = torch.randint(3, vocab, (bs, width), generator=gen)
        for i in range(bs):
            k = int(accept[i])
            argmax[i, :k] = candidates[i, 1 : k + 1]
            if k + 1 < width:  # the first rejected draft differs from the target's token
                argmax[i, k] = (candidates[i, k + 1] + 1 - 3) % (vocab - 3) + 3
        logits = torch.nn.functional.one_hot(argmax.view(-1), vocab).float() * 10
        seq_lens = torch.randint(4, 40, (bs,), generator=gen)
        freed: list[int] = []

        def batch_for(reqs, _seq=seq_lens, _freed=freed):
            return types.SimpleNamespace(
                forward_mode=ForwardMode.TARGET_VERIFY,
                reqs=reqs,
                batch_size=lambda: bs,
                sampling_info=None,
                out_cache_loc=torch.arange(1000, 1000 + bs * width, dtype=torch.int64),
                token_to_kv_pool_allocator=types.SimpleNamespace(free=lambda x: _freed.extend(x.tolist())),
                req_pool_indices=torch.arange(bs),
                req_to_token_pool=types.SimpleNamespace(
                    req_to_token=torch.zeros((bs, 64), dtype=torch.int64)
                ),
                seq_lens=_seq.clone(),
                seq_lens_cpu=_seq.clone(),
                seq_lens_sum=int(_seq.sum()),
                device="cpu",
            )

        def spec(_candidates=candidates):
            return dflash_info.DFlashVerifyInput(
                draft_token=_candidates.reshape(-1),
                positions=torch.zeros(bs * width, dtype=torch.long),
                draft_token_num=width,
            )

        # v1: request 3 finishes after 2 tokens (v1 cuts there, v2 does not: the scheduler trims)
        v1_reqs = [_Req(2 if i == 3 else 100) for i in range(bs)]
        v1_batch = batch_for(v1_reqs)
        out = types.SimpleNamespace(
            next_token_logits=logits.clone(), hidden_states=torch.zeros(bs * width, 2)
        )
        with _SyncCounter() as v1_syncs:  # the control: v1 copies to the host, the counter must see it
            v1_bonus, v1_commit, _, _ = spec().verify(batch=v1_batch, logits_output=out, page_size=1)
        v2_reqs = [_Req(2 if i == 3 else 100) for i in range(bs)]
        v2_batch = batch_for(v2_reqs)
        seq_before = v2_batch.seq_lens
        out = types.SimpleNamespace(next_token_logits=logits.clone(), hidden_states=None)
        with _SyncCounter() as syncs:
            got = verify_chain_v2(spec(), v2_batch, out)
        commit = got.commit_lens.tolist()
        cases.append(
            {
                "accept": accept.tolist(),
                "v1_tokens": [list(r.output_ids) for r in v1_reqs],
                "v2_tokens": [got.out_tokens[i, : commit[i]].tolist() for i in range(bs)],
                "v2_padding": [got.out_tokens[i, commit[i] :].tolist() for i in range(bs)],
                "v1_commit": v1_commit.tolist(),
                "v2_commit": commit,
                "v1_bonus": v1_bonus.tolist(),
                "v2_bonus": got.bonus_tokens.tolist(),
                "v1_seq_lens": v1_batch.seq_lens.tolist(),
                "v2_new_seq_lens": got.new_seq_lens.tolist(),
                "syncs": syncs.calls,
                "v1_syncs": sorted(set(v1_syncs.calls)),
                "batch_untouched": v2_batch.seq_lens is seq_before
                and v2_batch.seq_lens.tolist() == seq_lens.tolist()
                and all(len(r.output_ids) == 0 and r.kv_committed_len == 0 for r in v2_reqs),
                "shapes": [list(got.out_tokens.shape), str(got.out_tokens.dtype), str(got.commit_lens.dtype)],
            }
        )
    return {"cases": cases}


# b's filters in the sampled DDTREE pairs (target logits 3, 2.5, 2, the rest 0): the tight ones leave the
# predicted token alone (b's walk then emits the greedy tokens), the loose ones a random choice among few
SAMPLING_FILTERS = {
    "none": {},
    "top_p_tight": {"top_p": 0.02},
    "top_p": {"top_p": 0.1},
    "top_k": {"top_k": 2},
    "min_p_tight": {"min_p": 0.7},
    "min_p": {"min_p": 0.3},
    "together": {"top_k": 3, "top_p": 0.1, "min_p": 0.3},
}

PAIR_COMMITS = {"a": 3, "b": 8, "c": 1}  # tokens committed by the compared step (N = 8: every draft for b)


class _CpuGraph:
    """Stands for a captured torch.cuda.CUDAGraph (CUDA graphs need a GPU): replay() runs the captured
    function again on the same static input buffers and writes its result into the output the capture
    returned, which is what a replay does (inputs read only from the buffers, the output rewritten in place).
    Counts its replays."""

    def __init__(self, fn, views: list, output) -> None:
        self.fn, self.views, self.output = fn, views, output
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        result = self.fn(*self.views)
        outputs = self.output if isinstance(self.output, tuple) else (self.output,)
        results = result if isinstance(result, tuple) else (result,)
        for out, res in zip(outputs, results, strict=True):
            out.copy_(res)


def _cpu_capture_for_target(record: list, batch_sizes=(1, 2, 3, 4), run: bool = True):
    """A stand-in for DFlashWorker._capture_for_target (step_graphs.capture_for_target refuses off CUDA): the
    real step_graphs.BatchGraphs with the worker's own inputs and function, each batch size "captured" as a
    _CpuGraph (a first call on the zeroed buffers, as the capture's warm-up and capture calls do). The
    stretch's own checks are skipped (they pin the RoPE cache on a GPU). Records (name, function, inputs);
    `run` False: nothing is captured (the record only)."""
    import torch
    from sglang.srt.speculative.step_graphs import BatchGraphs, _Captured

    def capture(name, fn, inputs, *, checks=None):
        specs = list(inputs())
        graphs = BatchGraphs(
            name, fn, batch_sizes=list(batch_sizes), inputs=specs, device=torch.device("cpu")
        )
        for bs in graphs.batch_sizes if run else ():
            views = graphs._views(bs)
            with _uncounted():  # the capture happens at start, not in a step
                output = fn(*views)
            graphs.graphs[bs] = _Captured(graph=_CpuGraph(fn, views, output), output=output)
        record.append(
            {
                "name": name,
                "function": getattr(fn, "__name__", "?"),
                "inputs": [[spec.rows_per_request, list(spec.width), str(spec.dtype)] for spec in specs],
                "graphs": graphs,
            }
        )
        return graphs, None

    return capture


def _install_cpu_step_graphs(worker, record: list, batch_sizes, tree: bool) -> None:
    """The v2 step's graphs as the worker's own capture methods make them (patches
    dflash-overlap-step-graphs, ddtree-overlap-commit-graph), "captured" through _cpu_capture_for_target,
    on a worker of _DFlashV2Models / _DDTreeV2Models (its scripted drafter gets the fc width the append's
    graph input reads, and a RoPE cache that never moves). Before those patches: v1's append graphs only."""
    import torch

    rope = torch.zeros(1, 1)
    worker.__dict__.update(
        draft_model=types.SimpleNamespace(
            project_target_hidden=lambda h: h,
            fc=types.SimpleNamespace(in_features=3, weight=torch.zeros(1, dtype=torch.float32)),
        ),
        _fused_kv_helper=types.SimpleNamespace(rotary_emb=types.SimpleNamespace(cos_sin_cache=rope)),
        _append_rope_ptr=rope.data_ptr(),
    )
    worker._capture_for_target = _cpu_capture_for_target(record, batch_sizes=tuple(batch_sizes))
    if hasattr(type(worker), "_capture_kv_appends"):
        worker._capture_kv_appends()
    else:  # without the patch: v1's append graphs only (the v2 step never replays them)
        worker._kv_append_graphs = worker._capture_kv_append()
    if tree and hasattr(type(worker), "_capture_commit_stage"):  # patch ddtree-overlap-commit-graph
        worker.commit_stage_graphs = worker._capture_commit_stage()
    if hasattr(type(worker), "_capture_block_stage_v2"):  # patch dflash-overlap-block-graph
        worker._block_stage_v2_graphs = worker._capture_block_stage_v2()
    if hasattr(type(worker), "_capture_chain_tail_v2"):  # patch dflash-overlap-host-trim (DFLASH only)
        worker.__dict__["_chain_tail_v2_graphs"] = worker._capture_chain_tail_v2()


def _graph_replays(record: list) -> dict[str, int]:
    return {entry["name"]: sum(c.graph.replays for c in entry["graphs"].graphs.values()) for entry in record}


def _kv_append_capture_facts(argv: list[str], tree: bool) -> dict:
    """Which drafter KV append DFlashWorker._capture_kv_appends captures (patch dflash-overlap-step-graphs),
    and with which inputs, on a worker made without __init__ (DFLASH block 8; DDTREE budget 8, N 9): v1's
    (compact rows) with the switch off, the v2 step's (row index) with it on; for DDTREE also whether
    _capture_commit_stage captures the v2 commit stage (patch ddtree-overlap-commit-graph: switch on only).
    The capture itself is _cpu_capture_for_target's stand-in (nothing runs)."""
    import torch
    from sglang.srt.server_args import prepare_server_args, set_global_server_args_for_scheduler
    from sglang.srt.speculative.ddtree_worker import DDTreeWorker
    from sglang.srt.speculative.dflash_worker import DFlashWorker

    set_global_server_args_for_scheduler(prepare_server_args(argv))  # the overlap decision is read from it
    worker = object.__new__(DDTreeWorker if tree else DFlashWorker)
    worker.__dict__.update(
        block_size=8,
        draft_model=types.SimpleNamespace(
            fc=types.SimpleNamespace(in_features=24, weight=torch.zeros(1, dtype=torch.bfloat16))
        ),
    )
    if tree:
        worker.__dict__.update(num_verify_tokens=9, ddtree_budget=8, tree_depth=7)
    record: list = []
    worker._capture_for_target = _cpu_capture_for_target(record, batch_sizes=(1,), run=False)
    if not hasattr(type(worker), "_capture_kv_appends"):
        return {"error": "DFlashWorker has no _capture_kv_appends"}
    worker._capture_kv_appends()
    if tree and hasattr(type(worker), "_capture_commit_stage"):  # patch ddtree-overlap-commit-graph
        worker.__dict__["commit_stage_graphs"] = worker._capture_commit_stage()
    if hasattr(type(worker), "_capture_block_stage_v2"):  # patch dflash-overlap-block-graph
        worker.__dict__["_block_stage_v2_graphs"] = worker._capture_block_stage_v2()
    if hasattr(type(worker), "_capture_chain_tail_v2"):  # patch dflash-overlap-host-trim
        worker.__dict__["_chain_tail_v2_graphs"] = worker._capture_chain_tail_v2()
    return {
        "captured": [{k: v for k, v in entry.items() if k != "graphs"} for entry in record],
        "v1_graphs": worker.__dict__.get("_kv_append_graphs") is not None,
        "v2_graphs": worker.__dict__.get("_kv_append_v2_graphs") is not None,
        "commit_graphs": worker.__dict__.get("commit_stage_graphs") is not None,
        "block_graphs": worker.__dict__.get("_block_stage_v2_graphs") is not None,
        "tail_graphs": worker.__dict__.get("_chain_tail_v2_graphs") is not None,
    }


def _pair_commits(args) -> dict[str, int]:
    """Tokens the compared step commits per request: PAIR_COMMITS for DFLASH; for DDTREE the path the
    _DDTreeV2Models drafter scripts (min(commit + 1, B), ending on a sibling row below the wrong chain)."""
    if args.speculative_algorithm != "DDTREE":
        return dict(PAIR_COMMITS)
    block = int(args.speculative_dflash_block_size)
    return {rid: min(c + 1, block) for rid, c in PAIR_COMMITS.items()}


def _pair_rig(
    args,
    window: int | None,
    verify_slots: list[list[int]] | None = None,
    sampled: bool = False,
    filters: dict | None = None,
    graphs: bool = False,
) -> dict:
    """One DFLASH decode step of the real DFlashWorker from the same state, v1 or v2 (which the global server
    arguments decide: spec v2 <=> switch and overlap on): three requests prefilled by the worker's real
    prefill step on the real ScheduleBatch / Req / pools, their first emitted token appended as the result
    processor does, then prepare_for_decode (v2: the real reservation) and one decode step, counted by
    _device_sync_counter. The models are _DFlashV2Models' scripts. For v1, `verify_slots` (the slots the v2
    run reserved for each verify window) are put first in the allocator's free list, so v1's block and verify
    allocations take the very same slots and the two runs can be compared slot for slot."""
    import torch
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
        module.assign_req_to_token_pool_func = _assign_reference
    algo = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    tree = args.speculative_algorithm == "DDTREE"
    v2 = algo.supports_spec_v2()
    n = int(args.speculative_num_draft_tokens)
    rng = random.Random(3)
    prompts = {"a": [5, 6, 7, 8, 9], "b": [9] * 30, "c": [3, 4]}
    streams = {rid: [rng.randrange(10, 500) for _ in range(40)] for rid in prompts}
    req_pool = ReqToTokenPool(
        size=8,
        max_context_len=96 + mem_common.get_req_to_token_extra_context_len(args),
        device="cpu",
        enable_memory_saver=False,
    )
    allocator = TokenToKVPoolAllocator(512, torch.bfloat16, "cpu", None, False)
    cache = ChunkCache(
        CacheInitParams(
            disable=True, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator, page_size=1
        )
    )
    model_config = types.SimpleNamespace(vocab_size=512, is_encoder_decoder=False, context_len=96)
    errors: list[str] = []
    tree_kwargs = (
        {
            "block": int(args.speculative_dflash_block_size),
            "budget": int(args.speculative_ddtree_budget),
            "topk": int(args.speculative_ddtree_topk),
        }
        if tree
        else {}
    )
    models = (_DDTreeV2Models if tree else _DFlashV2Models)(
        streams,
        {rid: len(p) for rid, p in prompts.items()},
        n,
        0,
        window=window,
        req_pool=req_pool,
        allocator=allocator,
        errors=errors,
        **tree_kwargs,
    )
    models.commit_scripts = {rid: [c] for rid, c in PAIR_COMMITS.items()}
    models.check_reserved = v2
    models.graded = bool(filters)
    reqs = []
    for rid, prompt in prompts.items():
        penalty = {"frequency_penalty": 0.5} if rid == "a" else {}  # the verify adjusts and feeds penalties
        if (
            sampled and rid == "a"
        ):  # a bias that moves a's greedy argmax off its 3rd token: the walk must see it
            penalty["logit_bias"] = {str(streams[rid][3]): -100.0}
        # `sampled`: b samples at temperature 1 (the tree's sampling walk; the same seed for v1 and v2)
        temperature = 1.0 if sampled and rid == "b" else 0
        if sampled and rid == "b" and filters:  # top_p / top_k / min_p on b's sampling walk
            penalty.update(filters)
        params = SamplingParams(max_new_tokens=40, temperature=temperature, **penalty)
        params.normalize(None)
        params.verify(512)
        req = Req(rid, "", array("q", prompt), params, vocab_size=512, eos_token_ids={2})
        req.init_next_round_input(cache)
        req.fill_len = len(req.full_untruncated_fill_ids)
        reqs.append(req)
    batch = ScheduleBatch.init_new(reqs, req_pool, allocator, cache, model_config, v2, algo)
    batch.prepare_for_extend()
    models.current = {int(batch.req_pool_indices[i]): req for i, req in enumerate(reqs)}
    published: list = []
    prefill = models.worker.forward_batch_generation(batch, on_publish=published.append)
    for req, token in zip(reqs, prefill.next_token_ids.tolist(), strict=True):
        req.output_ids.append(int(token))  # what the result processor appends after a prefill
    if v2:  # what run_batch and the FutureMap hand the next step
        batch.spec_info = prefill.next_draft_input
        batch.spec_info.future_indices = batch.req_pool_indices
    batch.input_ids = None
    batch.prepare_for_decode()
    bs, rows = len(reqs), [int(r) for r in batch.req_pool_indices]
    seq = batch.seq_lens.tolist()
    if verify_slots is not None:
        wanted = [slot for slots in verify_slots for slot in slots]
        rest = [slot for slot in allocator.free_pages.tolist() if slot not in set(wanted)]
        allocator.free_pages = torch.tensor(wanted + rest, dtype=allocator.free_pages.dtype)
    reserved = [req_pool.req_to_token[rows[i], seq[i] : seq[i] + n].tolist() for i in range(bs)]
    draft_kv_before = dict(models.draft_kv)
    # the compact-row rewrite's torch path stands for its Triton kernel (dflash_step_host picks the kernel on
    # a GPU); uncounted like the scripted models
    torch_rewrite = dflash_step_host._rewrite_compact_rows_torch

    def rewrite_as_kernel(*a, **k):
        with _uncounted():
            return torch_rewrite(*a, **k)

    dflash_step_host._rewrite_compact_rows_torch = rewrite_as_kernel
    counter = _device_sync_counter()
    host_reads: list[str] = []
    # patch 0023: the host bound the step sizes from; the lengths as a Triton target's FutureMap leaves them
    if v2:
        batch.spec_info.reserved_end_cpu = counter.host(batch.spec_info.reserved_end_cpu)
        _hide_host_lengths(batch, host_reads)
    else:
        batch.seq_lens_cpu = counter.host(batch.seq_lens_cpu)
    models.worker._ensure_draft_block_buffers(bs)
    models.worker._draft_seq_lens_cpu_buf = counter.host(models.worker._draft_seq_lens_cpu_buf)
    captured: list = []
    if graphs:  # v2's step graphs (patches dflash-overlap-step-graphs, ddtree-overlap-commit-graph)
        _install_cpu_step_graphs(models.worker, captured, (bs,), tree)
    models.available_at_entry = allocator.available_size()
    step_published: list = []
    torch.manual_seed(11)
    try:
        with counter:
            result = models.worker.forward_batch_generation(batch, on_publish=step_published.append)
    finally:
        dflash_step_host._rewrite_compact_rows_torch = torch_rewrite
    if v2:
        commit = result.accept_lens.tolist()
        out = result.next_token_ids.view(bs, -1)
        tokens = [out[i, : commit[i]].tolist() for i in range(bs)]
        new_lens = result.new_seq_lens.tolist()
        bonus = result.next_draft_input.bonus_tokens.tolist()
    else:
        tokens = [list(req.output_ids[1:]) for req in reqs]
        new_lens = batch.seq_lens.tolist()
        bonus = result.next_token_ids.tolist()
    penalizers = batch.sampling_info.penalizer_orchestrator.penalizers.values()
    (frequency,) = [p for p in penalizers if type(p).__name__ == "BatchedFrequencyPenalizer"]
    cumulated = frequency.cumulated_frequency_penalties if frequency.is_prepared() else None
    draft_rows = models.draft_pool.req_to_token
    draft_lens = [min(length, window) if window else length for length in new_lens]
    return {
        "v2": v2,
        "errors": errors,
        "host_reads": host_reads,
        "verify_mask": _verify_mask_facts(result.extra_keep_alive_refs[0], seq) if v2 else None,
        "published_prefill": [t.tolist() for t in published],
        "published_step": [t.tolist() for t in step_published],
        "tokens": tokens,
        "expected_tokens": [streams[rid][1 : 1 + _pair_commits(args)[rid]] for rid in prompts],
        "path_rows": getattr(models, "path_rows", None),
        "stride": int(result.speculative_num_draft_tokens or 0) if v2 else None,
        "kv_moves": getattr(models, "kv_moves", None),
        # what the target and the drafter attend to through each request's rows, position by position
        "target_kv_rows": [
            [models.target_kv.get(int(s)) for s in req_pool.req_to_token[rows[i], : new_lens[i]].tolist()]
            for i in range(bs)
        ],
        "draft_kv_rows": [
            [models.draft_kv.get(int(s)) for s in draft_rows[rows[i], : draft_lens[i]].tolist()]
            for i in range(bs)
        ],
        "new_lens": new_lens,
        "bonus": bonus,
        "reserved_before": reserved,
        "kv_slots": [req_pool.req_to_token[rows[i], : new_lens[i]].tolist() for i in range(bs)],
        "draft_rows": [draft_rows[rows[i], : draft_lens[i]].tolist() for i in range(bs)],
        "draft_kv_written": {
            str(slot): list(content)
            for slot, content in models.draft_kv.items()
            if draft_kv_before.get(slot) != content
        },
        "frequency_fed": None
        if cumulated is None
        else [
            {str(t): round(float(cumulated[i, t]), 4) for t in torch.nonzero(cumulated[i]).view(-1).tolist()}
            for i in range(bs)
        ],
        "requests_untouched": [list(req.output_ids) for req in reqs] == [[streams[r][0]] for r in prompts],
        "syncs": counter.calls,
        "kv_available": allocator.available_size(),
        "graph_replays": _graph_replays(captured),
    }


def _step_pair_facts(
    v2_args,
    v1_args,
    window: int | None,
    sampled: bool = False,
    filters: dict | None = None,
    graphs: bool = False,
) -> dict:
    """The same decode step, v2 then v1 on the v2 run's verify slots (see _pair_rig); and the counter's own
    control: it must count a device tensor's .item() and not a host-marked one's. `graphs`: v2's drafter KV
    append through its step graphs (the CPU stand-in), v1's eager, to compare the two."""
    import torch

    v2 = _pair_rig(v2_args, window, sampled=sampled, filters=filters, graphs=graphs)
    v1 = _pair_rig(v1_args, window, verify_slots=v2["reserved_before"], sampled=sampled, filters=filters)
    control = _device_sync_counter()
    with control:
        torch.arange(3).sum().item()
        int(control.host(torch.arange(3)).sum())
    return {"v2": v2, "v1": v1, "counter_control": len(control.calls)}


def _append_v2_facts() -> dict:
    """The padded KV append by row index (patch dflash-overlap-step: the committed rows picked from the whole
    verify output with chain_row_index) against v1's eager append of the same rows compacted, on the same
    decode batches: the same (slot -> projected row, position) writes, the same draft rows and lengths.
    The worker is dflash_step_probe's stand-in (no __init__, the fused write recorded)."""
    import torch
    from dflash_step_probe import _append_worker
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.dflash_step_v2 import chain_row_index

    cases = {
        "three_requests_window": ([1, 4, 2], [9, 70, 33], [2, 0, 1], 4, 16),
        "full_blocks_no_window": ([4, 4], [4, 12], [0, 2], 4, None),
        "block8_window": ([8, 1, 5, 3], [20, 3, 90, 41], [3, 1, 0, 2], 8, 32),
    }
    out = {}
    gen = torch.Generator().manual_seed(9)
    for name, (commit, old_seq, pools, block, window) in cases.items():
        bs = len(commit)
        target_r2t = torch.randint(1, 10**5, (4, 160), generator=gen, dtype=torch.int32)
        full = torch.randn(bs * block, 6, generator=gen)  # the verify's hidden rows, B per request
        compact = torch.cat([full[b * block : b * block + commit[b]] for b in range(bs)])
        new_seq = torch.tensor([s + c for s, c in zip(old_seq, commit, strict=True)], dtype=torch.int64)
        results = {}
        for path in ("v1_eager", "v2_row_index"):
            draft_r2t = torch.zeros_like(target_r2t)
            worker, writes = _append_worker(block, window, target_r2t, draft_r2t)
            if path == "v1_eager":
                batch = types.SimpleNamespace(
                    forward_mode=ForwardMode.DECODE,
                    is_extend_in_batch=False,
                    batch_size=lambda bs=bs: bs,
                    req_pool_indices=torch.tensor(pools),
                    req_to_token_pool=types.SimpleNamespace(req_to_token=target_r2t),
                    seq_lens=new_seq.clone(),
                    seq_lens_cpu=new_seq.clone(),
                )
                draft_input = types.SimpleNamespace(
                    target_hidden=compact.clone(),
                    ctx_lens=torch.tensor(commit, dtype=torch.int32),
                    draft_seq_lens=torch.zeros(bs, dtype=torch.int32),
                )
                worker._append_target_hidden_to_draft_kv(batch, draft_input)
                lens = draft_input.draft_seq_lens
            else:
                lens = worker._append_padded(
                    full,
                    torch.tensor(commit, dtype=torch.int32),
                    new_seq,
                    torch.tensor(pools),
                    row_index=chain_row_index(bs, block, torch.device("cpu")),
                )
            ((rows, positions, locs),) = writes
            results[path] = {
                "placed": {
                    int(loc): (rows[i].tolist(), int(positions[i]))
                    for i, loc in enumerate(locs.tolist())
                    if loc
                },
                "lens": lens.tolist(),
                "draft_rows": draft_r2t.tolist(),
            }
        v1, v2 = results["v1_eager"], results["v2_row_index"]
        out[name] = {
            "same_placement": v1["placed"] == v2["placed"],
            "placed": len(v2["placed"]),
            "committed": sum(commit),
            "same_lens": v1["lens"] == v2["lens"],
            "same_draft_rows": v1["draft_rows"] == v2["draft_rows"],
        }
    return out


def _move_path_kv_facts() -> dict:
    """ddtree_info.move_path_kv (patch ddtree-overlap-step) on SGLang's real KV pools on CPU: MHATokenToKVPool
    (its torch path, SGLANG_NATIVE_MOVE_KV_CACHE=1, stands for the Triton copy a GPU runs) and
    MLATokenToKVPool (its index copy). Every slot's KV holds its slot id; three requests whose paths run
    [0, 2, 5] (position 1 reads entry 2, which position 2 writes: the overlap the order must survive),
    [0, 1, 2] (in place) and [0, 8]. Afterwards position d's slot must hold what row r_d's slot held, for
    d < commit; every other slot (padding slot 0 included) its own; req_to_token unchanged."""
    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
    from sglang.srt.speculative.ddtree_info import move_path_kv

    saved = os.environ.get("SGLANG_NATIVE_MOVE_KV_CACHE")
    os.environ["SGLANG_NATIVE_MOVE_KV_CACHE"] = "1"
    out = {}
    try:
        pools = {
            "mha": lambda: MHATokenToKVPool(96, 1, torch.float32, 2, 4, 2, "cpu", False),
            "mla": lambda: MLATokenToKVPool(96, 1, torch.float32, 8, 4, 2, "cpu", False),
        }
        for name, make in pools.items():
            pool = make()
            buffers = [*pool.k_buffer, *pool.v_buffer] if name == "mha" else list(pool.kv_buffer)
            for buffer in buffers:
                buffer.copy_(
                    torch.arange(buffer.shape[0], dtype=buffer.dtype).view(-1, 1, 1).expand_as(buffer)
                )
            req_to_token = torch.zeros((4, 40), dtype=torch.int32)
            req_to_token[1, :30] = torch.arange(1, 31)
            req_to_token[3, :30] = torch.arange(31, 61)
            req_to_token[2, :30] = torch.arange(61, 91)
            seq_lens = torch.tensor([10, 4, 17])
            pools_idx = torch.tensor([1, 3, 2])
            paths = [[0, 2, 5], [0, 1, 2], [0, 8]]
            local_rows = torch.zeros((3, 8), dtype=torch.int64)
            for i, path in enumerate(paths):
                local_rows[i, : len(path)] = torch.tensor(path)
            commit = torch.tensor([len(p) for p in paths], dtype=torch.int32)
            before = req_to_token.clone()
            move_path_kv(pool, req_to_token, pools_idx, seq_lens, local_rows, commit)
            expected = torch.arange(97, dtype=torch.float32)
            for i, path in enumerate(paths):
                row, seq = int(pools_idx[i]), int(seq_lens[i])
                for d, r in enumerate(path):
                    expected[int(before[row, seq + d])] = float(before[row, seq + r])
            out[name] = {
                "every_layer_as_expected": all(
                    torch.equal(buffer[:, 0, 0], expected[: buffer.shape[0]]) for buffer in buffers
                ),
                "moved": int((expected != torch.arange(97, dtype=torch.float32)).sum()),
                "rows_untouched": torch.equal(req_to_token, before),
            }
    finally:
        if saved is None:
            os.environ.pop("SGLANG_NATIVE_MOVE_KV_CACHE", None)
        else:
            os.environ["SGLANG_NATIVE_MOVE_KV_CACHE"] = saved
    return out


def _ddtree_refusal_facts() -> dict:
    """DDTreeWorker._v2_step_refusal on workers made without __init__ (patch ddtree-overlap-step): none for
    block 8 under budget 8 (N 9); a block longer than the verify (budget 4, N 5) is refused, since the block
    takes req_to_token[seq_len : seq_len + B] of a reservation sized for N."""
    from sglang.srt.speculative.ddtree_worker import DDTreeWorker

    out = {}
    for budget in (8, 7, 4):
        worker = object.__new__(DDTreeWorker)
        worker.__dict__.update(
            _fused_kv_helper=object(),
            model_runner=types.SimpleNamespace(attn_backend=_TargetAttnBackend()),
            block_size=8,
            num_verify_tokens=budget + 1,
        )
        out[str(budget)] = worker._v2_step_refusal()
    return out


def _future_map_facts() -> dict:
    """DFlashFutureMap: stash a result's bonus tokens, publish lengths, resolve them for the next step."""
    import torch
    from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algo = SpeculativeAlgorithm.from_string("DFLASH")
    pool = types.SimpleNamespace(req_to_token=torch.zeros((6, 8), dtype=torch.int32))
    fmap = algo.create_future_map(torch.device("cpu"), pool, True)
    slots = torch.tensor([4, 1, 3])
    fmap.stash(slots, DFlashDraftInputV2(bonus_tokens=torch.tensor([40, 10, 30])))
    fmap.publish(slots, torch.tensor([14, 11, 13]))
    # the next step's batch: request order changed by a filter and a merge
    spec = DFlashDraftInputV2(future_indices=torch.tensor([3, 4]))
    batch = types.SimpleNamespace(
        spec_info=spec, req_pool_indices=torch.tensor([3, 4]), req_pool_indices_cpu=torch.tensor([3, 4])
    )
    fmap._resolve_spec_extras(batch)
    fmap.resolve_seq_lens_cpu(batch)
    merged = DFlashDraftInputV2(future_indices=torch.tensor([1]))
    merged.merge_batch(DFlashDraftInputV2(future_indices=torch.tensor([4, 3])))
    merged.filter_batch(torch.tensor([0, 2]))
    try:
        DFlashDraftInputV2(future_indices=torch.tensor([1])).merge_batch(DFlashDraftInputV2())
        merge_error = None
    except RuntimeError as e:
        merge_error = str(e)
    return {
        "bonus": spec.bonus_tokens.tolist(),
        "seq_lens": batch.seq_lens.tolist(),
        "seq_lens_cpu": batch.seq_lens_cpu.tolist(),
        "seq_lens_sum": batch.seq_lens_sum,
        "merged_filtered": merged.future_indices.tolist(),
        "merge_error": merge_error,
        "coefficient": list(spec.get_spec_adjust_token_coefficient()),
        # the scheduler asks for no host lengths when its attention backends need none (Triton)
        "host_lengths_forced": algo.create_future_map(torch.device("cpu"), pool, False).needs_cpu_seq_lens,
        "without_host_lengths": _resolve_without_host_lengths(algo, pool),
    }


def _resolve_without_host_lengths(algo, pool) -> dict:
    """A DFlashFutureMap told needs_cpu_seq_lens False (a Triton target): the next batch gets its lengths on
    the device only (seq_lens_cpu and seq_lens_sum None), so the host never waits for the publish."""
    import torch
    from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2

    fmap = algo.create_future_map(torch.device("cpu"), pool, False)
    slots = torch.tensor([2, 5])
    fmap.publish(slots, torch.tensor([21, 52]))
    batch = types.SimpleNamespace(
        spec_info=DFlashDraftInputV2(future_indices=torch.tensor([5, 2])),
        req_pool_indices=torch.tensor([5, 2]),
        req_pool_indices_cpu=torch.tensor([5, 2]),
        seq_lens_cpu=torch.tensor([1, 1]),
        seq_lens_sum=2,
    )
    fmap.resolve_seq_lens_cpu(batch)
    return {
        "seq_lens": batch.seq_lens.tolist(),
        "seq_lens_cpu": batch.seq_lens_cpu,
        "seq_lens_sum": batch.seq_lens_sum,
    }


def main() -> None:
    target, drafter = sys.argv[1], sys.argv[2]
    switch = os.environ.get(OVERLAP_ENV, "")
    common = [
        "--model-path",
        target,
        "--skip-tokenizer-init",
        "--device",
        "cpu",
        "--attention-backend",
        "triton",
    ]
    dflash = [*common, "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", drafter]
    ddtree = [*common, "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", drafter]
    facts: dict = {"switch": switch}
    try:
        cases = {
            "dflash": dflash,
            "dflash_page64": [*dflash, "--page-size", "64"],
            "dflash_disabled": [*dflash, "--disable-overlap-schedule"],
            "ddtree": ddtree,
            "ddtree_disabled": [*ddtree, "--disable-overlap-schedule"],
        }
        for name, argv in cases.items():
            facts[f"args_{name}"] = _args_case(argv)
        for name in ("dflash", "dflash_page64", "ddtree"):
            facts[f"algo_{name}"] = _algo_facts(cases[name])
        facts["refusals"] = _refusal_reasons()
        # the drafter KV append graphs a worker captures (patch dflash-overlap-step-graphs), switch off or on
        facts["kv_append_capture_dflash"] = _kv_append_capture_facts(cases["dflash"], False)
        facts["kv_append_capture_ddtree"] = _kv_append_capture_facts(cases["ddtree"], True)
        os.environ[OVERLAP_ENV] = "yes"
        facts["args_bad_value"] = _args_case(dflash)
        os.environ[OVERLAP_ENV] = switch
        if switch == "1":
            from sglang.srt.server_args import prepare_server_args

            facts["future_map_round_trip"] = _future_map_facts()
            facts["chain_verify"] = _chain_verify_facts()
            facts["append_v2"] = _append_v2_facts()
            facts["isolation"] = _isolation_facts(prepare_server_args(dflash))
            dflash_args = prepare_server_args(dflash)
            ddtree_args = prepare_server_args([*ddtree, "--speculative-ddtree-budget", "12"])
            scenario = _scenario(int(dflash_args.speculative_num_draft_tokens))
            facts["expected_outputs"] = _expected_outputs(scenario)
            facts["sim_dflash"] = _simulation(dflash_args, scenario)
            tree_scenario = {**_scenario(int(ddtree_args.speculative_num_draft_tokens)), "seed": 5}
            facts["expected_outputs_ddtree"] = _expected_outputs(tree_scenario)
            facts["sim_ddtree"] = _simulation(ddtree_args, tree_scenario)
            # a KV pool too small for everyone: check_decode_mem fails and retract_decode runs
            facts["sim_dflash_tight"] = _simulation(dflash_args, {**scenario, "kv_slots": 200})
            # the real DFlashWorker v2 step (patch dflash-overlap-step) with scripted models, window or not
            facts["sim_dflash_v2"] = _simulation(dflash_args, scenario, worker_kind="dflash_v2")
            facts["sim_dflash_v2_window"] = _simulation(
                dflash_args, scenario, worker_kind="dflash_v2", window=24
            )
            facts["sim_dflash_v2_tight"] = _simulation(
                dflash_args, {**scenario, "kv_slots": 200}, worker_kind="dflash_v2", window=24
            )
            facts["sim_ddtree_tight"] = _simulation(ddtree_args, {**tree_scenario, "kv_slots": 140})
            # the radix cache: prefix hits on running and finished requests' KV (target and draft)
            radix_scenario = _radix_scenario(int(dflash_args.speculative_num_draft_tokens))
            facts["expected_outputs_radix"] = _expected_outputs(radix_scenario)
            facts["sim_dflash_v2_radix"] = _simulation(
                dflash_args, radix_scenario, worker_kind="dflash_v2", radix=True
            )
            facts["sim_dflash_v2_radix_window"] = _simulation(
                dflash_args, radix_scenario, worker_kind="dflash_v2", window=24, radix=True
            )
            # one v2 step against one v1 step of the real DFlashWorker, from the same state
            v1_args = prepare_server_args([*dflash, "--disable-overlap-schedule"])
            facts["step_pair"] = _step_pair_facts(dflash_args, v1_args, None)
            facts["step_pair_window"] = _step_pair_facts(dflash_args, v1_args, 16)
            # patches dflash-overlap-step-graphs / ddtree-overlap-commit-graph: runs replaying the v2 graphs
            facts["sim_dflash_v2_graphs"] = _simulation(
                dflash_args, {**scenario, "kv_slots": 200}, worker_kind="dflash_v2", window=24, graphs=True
            )
            # patch dflash-overlap-step-graphs: the v2 step's drafter KV append replayed from its graphs
            facts["step_pair_graphs"] = _step_pair_facts(dflash_args, v1_args, None, graphs=True)
            facts["step_pair_window_graphs"] = _step_pair_facts(dflash_args, v1_args, 16, graphs=True)
            # DDTREE's v2 step (patch ddtree-overlap-step): the real DDTreeWorker, tree walk on the device
            facts["sim_ddtree_v2"] = _simulation(ddtree_args, tree_scenario, worker_kind="ddtree_v2")
            facts["sim_ddtree_v2_window"] = _simulation(
                ddtree_args, tree_scenario, worker_kind="ddtree_v2", window=24
            )
            facts["sim_ddtree_v2_tight"] = _simulation(
                ddtree_args, {**tree_scenario, "kv_slots": 120}, worker_kind="ddtree_v2", window=24
            )
            facts["sim_ddtree_v2_graphs"] = _simulation(
                ddtree_args,
                {**tree_scenario, "kv_slots": 120},
                worker_kind="ddtree_v2",
                window=24,
                graphs=True,
            )
            tree_radix = _radix_scenario(int(ddtree_args.speculative_num_draft_tokens))
            facts["expected_outputs_radix_ddtree"] = _expected_outputs(tree_radix)
            facts["sim_ddtree_v2_radix"] = _simulation(
                ddtree_args, tree_radix, worker_kind="ddtree_v2", radix=True
            )
            facts["sim_ddtree_v2_radix_window"] = _simulation(
                ddtree_args, tree_radix, worker_kind="ddtree_v2", window=24, radix=True
            )
            ddtree_v1_args = prepare_server_args(
                [*ddtree, "--speculative-ddtree-budget", "12", "--disable-overlap-schedule"]
            )
            facts["step_pair_ddtree"] = _step_pair_facts(ddtree_args, ddtree_v1_args, None)
            facts["step_pair_ddtree_window"] = _step_pair_facts(ddtree_args, ddtree_v1_args, 16)
            facts["step_pair_ddtree_graphs"] = _step_pair_facts(
                ddtree_args, ddtree_v1_args, None, graphs=True
            )
            facts["step_pair_ddtree_window_graphs"] = _step_pair_facts(
                ddtree_args, ddtree_v1_args, 16, graphs=True
            )
            facts["step_pair_ddtree_sampled"] = _step_pair_facts(
                ddtree_args, ddtree_v1_args, 16, sampled=True
            )
            # chunked prefill (the real PrefillAdder) and aborts in flight (the real Scheduler.abort_request)
            for name, sim_args, base, kind, window, radix in (
                ("dflash_v2_chunked", dflash_args, _chunked(scenario), "dflash_v2", 24, False),
                ("ddtree_v2_chunked", ddtree_args, _chunked(tree_scenario), "ddtree_v2", None, False),
                ("ddtree_v2_chunked_radix", ddtree_args, _chunked(tree_radix), "ddtree_v2", 24, True),
                ("dflash_v2_abort", dflash_args, _aborted(_chunked(scenario)), "dflash_v2", 24, False),
                ("ddtree_v2_abort", ddtree_args, _aborted(_chunked(tree_scenario)), "ddtree_v2", None, False),
                # retraction with the radix cache (the real PrefillAdder counts and evicts the cached tokens)
                (
                    "dflash_v2_radix_tight",
                    dflash_args,
                    {**_chunked(radix_scenario), "kv_slots": 160},
                    "dflash_v2",
                    24,
                    True,
                ),
                (
                    "ddtree_v2_radix_tight",
                    ddtree_args,
                    {**_chunked(tree_radix), "kv_slots": 240},
                    "ddtree_v2",
                    None,
                    True,
                ),
                (
                    "ddtree_v2_radix_tight_window",
                    ddtree_args,
                    {**_chunked(tree_radix), "kv_slots": 160},
                    "ddtree_v2",
                    24,
                    True,
                ),
                (
                    "ddtree_v2_abort_tight",
                    ddtree_args,
                    {**_aborted(_chunked(tree_scenario)), "kv_slots": 160},
                    "ddtree_v2",
                    24,
                    False,
                ),
            ):
                sim = _simulation(sim_args, base, worker_kind=kind, window=window, radix=radix)
                sim["expected"] = _expected_outputs(base)
                facts[f"sim_{name}"] = sim
            # the sampling walk's filters, alone and together (b at temperature 1 over a graded target)
            facts["step_pair_ddtree_filters"] = {
                name: _step_pair_facts(ddtree_args, ddtree_v1_args, 16, sampled=True, filters=filters)
                for name, filters in SAMPLING_FILTERS.items()
            }
            # DDTREE at the served budgets: 8 (N 9, the original deployment's) and 16 (ddtree-16, N 17)
            for budget in (8, 16):
                b_args = prepare_server_args([*ddtree, "--speculative-ddtree-budget", str(budget)])
                b_scenario = {**_scenario(int(b_args.speculative_num_draft_tokens)), "seed": 5}
                b_radix = _radix_scenario(int(b_args.speculative_num_draft_tokens))
                for name, base, window, radix in (
                    ("chunk_abort", _aborted(_chunked(b_scenario)), 24, False),
                    # pools that retract: budget 8 at 150 slots (L and h), budget 16 at 160 (eight requests)
                    ("radix_tight", {**_chunked(b_radix), "kv_slots": {8: 150, 16: 160}[budget]}, None, True),
                ):
                    sim = _simulation(b_args, base, worker_kind="ddtree_v2", window=window, radix=radix)
                    sim["expected"] = _expected_outputs(base)
                    facts[f"sim_ddtree_v2_b{budget}_{name}"] = sim
            facts["ddtree_v2_refusals"] = _ddtree_refusal_facts()
            facts["move_path_kv"] = _move_path_kv_facts()
    except Exception:
        facts["probe_error"] = traceback.format_exc()
    print("DFLASH-OVERLAP-PROBE " + json.dumps(facts))


if __name__ == "__main__":
    main()
