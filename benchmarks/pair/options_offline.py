"""Offline acceptance with request penalties on: what a path-aware drafter adjustment would recover (CPU ok).

    python -m benchmarks.pair.options_offline --pair DIR [--prompts N] [--new-tokens T] [--out FILE.json]

Issue 28: served on the H200 (2026-12-03), frequency_penalty 0.5 takes DDTREE-16's acceptance to 0.70x of the
plain run's with patch 0031 (the drafter's logits get the running state at the step's root, the same for every
depth) and 0.66x without. This asks, offline and exactly, what a drafter adjustment could still recover.

For each option set of options_acceptance.OPTION_SETS: the target's greedy continuation with the options
applied at every step as SGLang's sampler applies them to plain decoding (state = the output so far, prompt
excluded; frequency/presence subtract, min_new_tokens puts -inf on the stop ids while the output is too
short, repetition divides positive logits / multiplies negative ones of tokens seen, then logit_bias;
float32), then the drafter's raw logits at every anchor (evaluate's block forward) adjusted three ways
before DFLASH's chain argmax and DDTREE's per-node top-k:
- none: the drafter's logits as they are (SGLANG_DDTREE_DRAFT_PENALTIES=0);
- root: patch 0031, the running state at the verify root (root token counted) on every depth
  (min_new_tokens' too-short test per depth);
- path: each row adjusted exactly as the target's verify row for that node: the root state plus the node's
  own root-to-node path tokens (the chain: each depth after the chain's earlier argmaxes; the tree:
  `best_first_tree`, whose children of a node are scored under that node's path).
Greedy acceptance is evaluate's rule: the longest drafted path equal to the target's (penalised)
continuation, replayed as SGLang counts spec_accept_length. The tree's none/root figures come from the
series' own ddtree_utils.build_ddtree; `best_first_tree` gives the same acceptance there (checked on every
anchor and reported).
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.pair import evaluate
from benchmarks.pair.modeling import Drafter, KVCache, Target

ADJUSTMENTS = ("none", "root", "path")
BUDGET = 16  # DDTREE-16, the budget issue 28's served figures use
STOP_IDS = (0,)  # the pair's EOS (<|endoftext|>): min_new_tokens' held-back ids under --skip-tokenizer-init
_FIXED_ONE = float(2**40)  # ddtree_utils' fixed-point scale: the same order, ties included
_LOGPROB_FLOOR = -1.0e4


@dataclass(frozen=True)
class Options:
    """One request's logit options, SGLang's sampling-parameter names; defaults change nothing."""

    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    logit_bias: dict[int, float] = field(default_factory=dict)
    stop_ids: tuple[int, ...] = STOP_IDS

    @classmethod
    def of(cls, params: dict[str, Any], stop_ids: tuple[int, ...] = STOP_IDS) -> Options:
        """From an OPTION_SETS entry; an unknown key is refused (it would be silently ignored here)."""
        known = {
            "frequency_penalty",
            "presence_penalty",
            "repetition_penalty",
            "min_new_tokens",
            "logit_bias",
        }
        unknown = set(params) - known
        if unknown:
            raise ValueError(
                f"options_offline: cannot model option(s) {sorted(unknown)} (known: {sorted(known)})"
            )
        values = dict(params)
        if "logit_bias" in values:
            values["logit_bias"] = {int(token): float(bias) for token, bias in values["logit_bias"].items()}
        return cls(**values, stop_ids=stop_ids)

    @property
    def path_dependent(self) -> bool:
        """Whether a row's adjustment depends on the tokens seen (not just on how many)."""
        return self.frequency_penalty != 0 or self.presence_penalty != 0 or self.repetition_penalty != 1


def apply_options(
    logits: torch.Tensor, counts: torch.Tensor, produced: torch.Tensor, opts: Options
) -> torch.Tensor:
    """Logits [..., V] adjusted (a new float32 tensor) in SGLang's order for rows whose output so far has
    per-token `counts` [..., V] and `produced` [...] tokens: additive penalties, min_new_tokens, repetition,
    logit_bias (tree_penalties' order; each option set here has one option, so the order is moot)."""
    x = logits.float()
    if opts.frequency_penalty or opts.presence_penalty:
        additive = (0.0 - opts.frequency_penalty * counts) - opts.presence_penalty * (counts > 0).float()
        x = x + additive
    if opts.min_new_tokens:
        stop = torch.zeros(x.shape[-1], dtype=torch.bool, device=x.device)
        stop[list(opts.stop_ids)] = True
        too_short = (produced < opts.min_new_tokens).unsqueeze(-1)
        x = x.masked_fill(too_short & stop, float("-inf"))
    if opts.repetition_penalty != 1:
        r = opts.repetition_penalty
        x = torch.where(counts > 0, torch.where(x < 0, x * r, x / r), x)
    if opts.logit_bias:
        bias = torch.zeros(x.shape[-1], dtype=torch.float32, device=x.device)
        for token, value in opts.logit_bias.items():
            bias[token] = value
        x = x + bias
    return x


@torch.no_grad()
def penalised_greedy(target: Target, prompts: torch.Tensor, new_tokens: int, opts: Options) -> torch.Tensor:
    """Plain greedy decoding [b, new_tokens] of equal-length prompts [b, p] with the options applied at every
    step from the output so far (float32, KV cache; modeling.greedy_generate when no option is set)."""
    b, vocab = prompts.shape[0], target.cfg.vocab_size
    cache = KVCache(target.cfg, b, prompts.shape[1] + new_tokens, prompts.device, torch.float32)
    counts = torch.zeros((b, vocab), dtype=torch.float32, device=prompts.device)
    logits, _ = target(prompts, cache=cache)
    out: list[torch.Tensor] = []
    for step in range(new_tokens):
        produced = torch.full((b,), step, device=prompts.device)
        token = apply_options(logits[:, -1], counts, produced, opts).argmax(-1)
        out.append(token)
        counts[torch.arange(b), token] += 1
        if step + 1 < new_tokens:
            logits, _ = target(token.unsqueeze(1), cache=cache)
    return torch.stack(out, dim=1)


@torch.no_grad()
def draft_logits(target: Target, drafter: Drafter, ids: torch.Tensor, anchors: torch.Tensor, block: int):
    """The drafter's raw float32 logits [n, block-1, V] at `anchors` of ids [T] (what 0031 adjusts before the
    top-k / argmax; evaluate.draft_logprobs is their log-softmax)."""
    seq = ids.unsqueeze(0)
    _, features = target.features(seq, drafter.cfg.target_layer_ids)
    hidden = drafter(target.embed_tokens, features, seq, anchors, block)[0, :, 1:]
    return target.lm_head(hidden).float()


def root_counts(output: torch.Tensor, vocab: int) -> torch.Tensor:
    """[n, V]: row i counts output tokens 0..i (the state at root i with the root fed, as 0031 has it)."""
    one_hot = torch.zeros((output.shape[0], vocab), dtype=torch.float32)
    one_hot[torch.arange(output.shape[0]), output] = 1.0
    return one_hot.cumsum(dim=0)


def adjusted_rows(logits: torch.Tensor, counts: torch.Tensor, first: torch.Tensor, opts: Options, how: str):
    """The drafter's logits [n, D, V] under adjustment `how` in ("none", "root"): root state on every depth.

    first [n]: tokens produced when depth 1 is scored (root index + 1); depth d's row has first + d - 1."""
    if how == "none":
        return logits
    depth = logits.shape[1]
    produced = first.view(-1, 1) + torch.arange(depth).view(1, depth)
    return apply_options(logits, counts.unsqueeze(1), produced, opts)


def chain_drafts(
    logits: torch.Tensor, counts: torch.Tensor, first: torch.Tensor, opts: Options, how: str
) -> torch.Tensor:
    """DFLASH's drafted chain [n, D] per anchor under adjustment `how`; path: depth d's argmax after the
    chain's own tokens at depths 1..d-1 are counted too."""
    if how != "path":
        return adjusted_rows(logits, counts, first, opts, how).argmax(dim=-1)
    n, depth, _ = logits.shape
    counts = counts.clone()
    drafts = []
    for d in range(depth):
        token = apply_options(logits[:, d], counts, first + d, opts).argmax(-1)
        drafts.append(token)
        counts[torch.arange(n), token] += 1
    return torch.stack(drafts, dim=1)


def chain_accepts(
    logits: torch.Tensor,
    counts: torch.Tensor,
    first: torch.Tensor,
    future: torch.Tensor,
    opts: Options,
    how: str,
) -> torch.Tensor:
    """DFLASH's accepted drafts per anchor [n]: the leading run of chain_drafts equal to `future` [n, D]."""
    hit = chain_drafts(logits, counts, first, opts, how) == future
    return hit.int().cumprod(dim=1).sum(dim=1)


def best_first_tree(
    row_logprobs: Callable[[tuple[int, ...]], torch.Tensor], depth: int, budget: int, topk: int
) -> list[tuple[int, ...]]:
    """The `budget` best draft paths (token tuples) by best-first search, each node's children its own top-k.

    row_logprobs(path): log-probs [V] of the token after `path` (the root's children: path ()). The order is
    ddtree_utils' (score desc, depth asc, rank sequence asc; scores summed in its 2**-40 fixed point), so with
    row_logprobs depending only on len(path) it keeps build_ddtree's tree."""
    kept: list[tuple[int, ...]] = []
    heap: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []

    def push_children(score: int, ranks: tuple[int, ...], path: tuple[int, ...]) -> None:
        row = row_logprobs(path)
        values, ids = torch.topk(row, min(topk, budget, row.shape[0]))
        values, ids = evaluate.ddtree_utils().merge_topk(values, ids)
        fixed = (values.float().clamp(min=_LOGPROB_FLOOR, max=0.0) * _FIXED_ONE).to(torch.int64)
        for rank, (value, token) in enumerate(zip(fixed.tolist(), ids.tolist(), strict=True)):
            heapq.heappush(heap, (-(score + value), len(path) + 1, (*ranks, rank), (*path, token)))

    push_children(0, (), ())
    while heap and len(kept) < budget:
        negative, level, ranks, path = heapq.heappop(heap)
        kept.append(path)
        if level < depth:
            push_children(-negative, ranks, path)
    return kept


def tree_accept(kept: Sequence[tuple[int, ...]], future: Sequence[int]) -> int:
    """Greedy walk: the deepest kept path equal to the start of the target's continuation (kept is
    prefix-closed, so this is the walk's accept length)."""
    return max((len(p) for p in kept if list(p) == list(future[: len(p)])), default=0)


def tree_accepts(
    logits: torch.Tensor,
    counts: torch.Tensor,
    first: torch.Tensor,
    future: torch.Tensor,
    opts: Options,
    how: str,
    topk: int,
    budget: int = BUDGET,
) -> torch.Tensor:
    """DDTREE's accepted drafts per anchor [n]: none/root through build_ddtree (what the server runs), path
    through best_first_tree with each node's children scored under its own path."""
    if how != "path":
        logprobs = torch.log_softmax(adjusted_rows(logits, counts, first, opts, how), dim=-1)
        return evaluate.tree_accepts(logprobs, future, budget, topk)
    depth = logits.shape[1]
    out = []
    for a in range(logits.shape[0]):

        def row(path: tuple[int, ...], a: int = a) -> torch.Tensor:
            seen = counts[a].clone()
            if path:
                seen.index_put_((torch.tensor(path),), torch.ones(len(path)), accumulate=True)
            produced = first[a] + len(path)
            return torch.log_softmax(apply_options(logits[a, len(path)], seen, produced, opts), dim=-1)

        out.append(tree_accept(best_first_tree(row, depth, budget, topk), future[a].tolist()))
    return torch.tensor(out)


def reference_tree_accepts(logprobs: torch.Tensor, future: torch.Tensor, topk: int, budget: int = BUDGET):
    """best_first_tree with path-independent rows (each depth's log-probs): must equal build_ddtree's walk."""
    depth = logprobs.shape[1]
    return torch.tensor(
        [
            tree_accept(
                best_first_tree(lambda p, a=a: logprobs[a, len(p)], depth, budget, topk), future[a].tolist()
            )
            for a in range(logprobs.shape[0])
        ]
    )


@dataclass
class Tally:
    per_request: list[float] = field(default_factory=list)
    tokens: int = 0
    steps: int = 0

    def add(self, accepts: torch.Tensor, prompt_len: int, new: int) -> None:
        tokens, steps = evaluate.replay(accepts, prompt_len, new)
        self.per_request.append(tokens / steps)
        self.tokens += tokens
        self.steps += steps

    def summary(self) -> dict[str, float]:
        return {
            "accept_length": round(sum(self.per_request) / len(self.per_request), 4),
            "tokens_per_step": round(self.tokens / self.steps, 4),
        }


def option_acceptance(
    target: Target,
    drafter: Drafter,
    prompts: Sequence[list[int]],
    continuations: torch.Tensor,
    opts: Options,
    block: int,
    topk: int,
) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, int]]:
    """Per method (dflash, ddtree-16) and adjustment: acceptance over the prompts; and the reference check
    (anchors where best_first_tree's acceptance differs from build_ddtree's, none and root rows)."""
    vocab = target.cfg.vocab_size
    depth = block - 1
    tallies = {m: {how: Tally() for how in ADJUSTMENTS} for m in (evaluate.CHAIN, f"ddtree-{BUDGET}")}
    check = {"anchors": 0, "differ": 0}
    for prompt, continuation in zip(prompts, continuations, strict=True):
        p, new = len(prompt), continuation.shape[0]
        ids = torch.cat([torch.tensor(prompt), continuation])
        anchors = torch.arange(p, p + new)
        logits = draft_logits(target, drafter, ids, anchors, block)
        ahead = torch.cat([ids, ids.new_full((depth,), -1)])
        future = torch.stack([ahead[anchors + d] for d in range(1, depth + 1)], dim=1)
        counts = root_counts(continuation, vocab)
        first = torch.arange(1, new + 1)  # anchor i's root is output token i: depth 1 is output token i + 1
        accepts: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for how in ADJUSTMENTS:
            if how == "path" and not opts.path_dependent and opts != Options():
                # min_new_tokens and logit_bias depend on the path's length only: root's rows are path's
                accepts[how] = accepts["root"]
            else:
                accepts[how] = (
                    chain_accepts(logits, counts, first, future, opts, how),
                    tree_accepts(logits, counts, first, future, opts, how, topk),
                )
            if how != "path":
                logprobs = torch.log_softmax(adjusted_rows(logits, counts, first, opts, how), dim=-1)
                reference = reference_tree_accepts(logprobs, future, topk)
                check["anchors"] += new
                check["differ"] += int((reference != accepts[how][1]).sum())
            tallies[evaluate.CHAIN][how].add(accepts[how][0], p, new)
            tallies[f"ddtree-{BUDGET}"][how].add(accepts[how][1], p, new)
    return {m: {how: t.summary() for how, t in by.items()} for m, by in tallies.items()}, check


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as markdown: accept length, its ratio to the method's plain run, continuations changed."""
    header = "| option set | method | adjustment | accept length | ratio to plain | outputs not plain's |"
    lines = [header, "|" + "---|" * 6]
    for r in rows:
        length, ratio = f"{r['accept_length']:.3f}", f"{r['ratio_to_plain']:.3f}"
        cells = [r["options"], r["method"], r["adjustment"], length, ratio, r["differ_from_plain"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from benchmarks.pair import near_tie, options_acceptance, serve_bench

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, required=True, help="the trained pair (benchmarks.pair.train --out)")
    ap.add_argument("--prompts", type=int, default=16, help="the first N of the pair's eval prompts")
    ap.add_argument("--new-tokens", type=int, default=0, help="continuation length (0: the rig's, 256)")
    ap.add_argument(
        "--options", default=",".join(options_acceptance.OPTION_SETS), help="option sets, comma list"
    )
    ap.add_argument("--out", type=Path, help="JSON file for the rows, settings and the reference check")
    args = ap.parse_args(argv)
    names = args.options.split(",")
    known = list(options_acceptance.OPTION_SETS)
    if any(n not in known for n in names) or "plain" not in names:
        print(f"options_offline: --options must include plain and name only {known}")
        return 2
    if not (args.pair / "eval_prompts.json").is_file():
        print(f"options_offline: {args.pair} has no eval_prompts.json (a trained pair's folder?)")
        return 2
    all_prompts, rig_new = serve_bench.eval_prompts(args.pair)
    if not 1 <= args.prompts <= len(all_prompts) or args.new_tokens < 0:
        print(f"options_offline: --prompts 1..{len(all_prompts)}, --new-tokens >= 0")
        return 2
    prompts = all_prompts[: args.prompts]
    new_tokens = args.new_tokens or rig_new
    if len({len(p) for p in prompts}) != 1:
        print("options_offline: the eval prompts differ in length (the batched greedy needs equal lengths)")
        return 2
    torch.manual_seed(0)
    target, drafter = near_tie.load_pair(args.pair, "cpu")
    block, topk = serve_bench.BLOCK, serve_bench.TOPK
    start = time.monotonic()
    results: dict[str, Any] = {}
    outputs: dict[str, torch.Tensor] = {}
    for name in names:
        opts = Options.of(options_acceptance.OPTION_SETS[name])
        outputs[name] = penalised_greedy(target, torch.tensor(prompts), new_tokens, opts)
        by_method, check = option_acceptance(target, drafter, prompts, outputs[name], opts, block, topk)
        results[name] = {"acceptance": by_method, "reference_check": check}
        print(f"[{time.monotonic() - start:.0f} s] {name}: {json.dumps(by_method)} check {check}", flush=True)
    rows = []
    for name in names:
        differ = int((outputs[name] != outputs["plain"]).any(dim=1).sum())
        for method, by_how in results[name]["acceptance"].items():
            plain = results["plain"]["acceptance"][method]["none"]["accept_length"]
            for how, figures in by_how.items():
                rows.append({
                    "options": name, "method": method, "adjustment": how, **figures,
                    "ratio_to_plain": round(figures["accept_length"] / plain, 4),
                    "differ_from_plain": f"{differ}/{len(prompts)}",
                })  # fmt: skip
    print(table(rows), flush=True)
    checks = {name: r["reference_check"] for name, r in results.items()}
    failed = sum(c["differ"] for c in checks.values())
    print(f"best_first_tree against build_ddtree (none and root rows): {failed} anchors differ", flush=True)
    if args.out:
        settings = {
            "pair": str(args.pair), "prompts": len(prompts), "prompt_tokens": len(prompts[0]),
            "new_tokens": new_tokens, "block": block, "topk": topk, "budget": BUDGET, "dtype": "float32",
            "device": "cpu", "stop_ids": list(STOP_IDS),
            "option_sets": {n: options_acceptance.OPTION_SETS[n] for n in names},
            "seconds": round(time.monotonic() - start, 1),
        }  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        outs = {n: o.tolist() for n, o in outputs.items()}
        record = {"settings": settings, "rows": rows, "reference_check": checks, "outputs": outs}
        args.out.write_text(json.dumps(record) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
