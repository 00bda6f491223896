"""benchmarks.pair.options_offline: penalised greedy, the three drafter adjustments and the best-first tree,
each against a reference written differently (plain Python counting, full recomputation, brute force)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from benchmarks.pair import evaluate
from benchmarks.pair import options_offline as oo
from benchmarks.pair.modeling import Drafter, Target, save_model
from tests.unit.test_pair_rig import TINY, TINY_DRAFT  # the rig's tiny pair shapes

PENALTIES = {
    "frequency": oo.Options(frequency_penalty=0.7),
    "presence": oo.Options(presence_penalty=0.9),
    "repetition": oo.Options(repetition_penalty=1.6),
}


def _reference_row(row: list[float], history: list[int], produced: int, opts: oo.Options) -> list[float]:
    """One row's options, token by token in plain Python (SGLang's penalizers' rules)."""
    seen = Counter(history)
    out = []
    for token, x in enumerate(row):
        if opts.frequency_penalty or opts.presence_penalty:
            x = x + ((0.0 - opts.frequency_penalty * seen[token]) - opts.presence_penalty * (seen[token] > 0))
        if produced < opts.min_new_tokens and token in opts.stop_ids:
            x = float("-inf")
        if opts.repetition_penalty != 1 and seen[token]:
            x = x * opts.repetition_penalty if x < 0 else x / opts.repetition_penalty
        out.append(x + opts.logit_bias.get(token, 0.0))
    return out


def _argmax(row: list[float]) -> int:
    return max(range(len(row)), key=lambda t: (row[t], -t))


def _reference_greedy(target: Target, prompt: list[int], new: int, opts: oo.Options) -> list[int]:
    """Recompute the whole sequence every step (no cache) and adjust the last row from the output list."""
    output: list[int] = []
    with torch.no_grad():
        for _ in range(new):
            logits, _ = target(torch.tensor([prompt + output]))
            output.append(_argmax(_reference_row(logits[0, -1].tolist(), output, len(output), opts)))
    return output


def test_penalised_greedy_equals_a_token_by_token_reference_and_each_option_changes_the_output() -> None:
    torch.manual_seed(0)
    target = Target(TINY).eval()
    prompts = torch.randint(3, TINY.vocab_size, (2, 7))
    new = 16
    plain = oo.penalised_greedy(target, prompts, new, oo.Options())
    cases = {
        **PENALTIES,
        "min_new_tokens": oo.Options(min_new_tokens=6, stop_ids=(int(plain[0, 0]),)),
        "logit_bias": oo.Options(logit_bias={int(plain[1, 0]): -50.0, 5: 0.25}),
    }
    for name, opts in cases.items():
        got = oo.penalised_greedy(target, prompts, new, opts)
        for b in range(2):
            assert got[b].tolist() == _reference_greedy(target, prompts[b].tolist(), new, opts), (name, b)
        assert not torch.equal(got, plain), (
            f"{name} left the greedy output as it was: the test proves nothing"
        )
    assert plain[0].tolist() == _reference_greedy(target, prompts[0].tolist(), new, oo.Options())
    # min_new_tokens' boundary: blocking the token plain decoding first emits at step i with min_new_tokens
    # i + 1 changes step i (the output is i tokens long there, too short) and nothing before it
    row = plain[0].tolist()
    i = max(j for j, token in enumerate(row) if token not in row[:j])
    got = oo.penalised_greedy(target, prompts[:1], new, oo.Options(min_new_tokens=i + 1, stop_ids=(row[i],)))
    assert got[0, :i].tolist() == row[:i] and int(got[0, i]) != row[i], i


def _synthetic(n: int = 12, depth: int = 3, vocab: int = 16, seed: int = 1):
    """Draft logits that favour a few tokens (so penalties move the argmax) and a looping continuation."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn((n, depth, vocab), generator=gen) * 0.6
    logits[:, :, :4] += 2.0  # tokens 0..3 compete at every depth
    output = torch.tensor([i % 4 for i in range(n)])
    ahead = torch.cat([output, output.new_full((depth,), -1)])
    future = torch.stack([ahead[torch.arange(n) + d] for d in range(1, depth + 1)], dim=1)
    counts = oo.root_counts(output, vocab)
    first = torch.arange(1, n + 1)
    return logits, output, counts, first, future


def test_without_options_every_adjustment_drafts_and_accepts_the_same() -> None:
    logits, _, counts, first, future = _synthetic()
    opts = oo.Options()
    chains = [oo.chain_drafts(logits, counts, first, opts, how) for how in oo.ADJUSTMENTS]
    assert all(torch.equal(chains[0], c) for c in chains[1:])
    trees = [oo.tree_accepts(logits, counts, first, future, opts, how, topk=4) for how in oo.ADJUSTMENTS]
    assert all(torch.equal(trees[0], t) for t in trees[1:]), trees
    assert trees[0].sum() > 0, "nothing accepted: the comparison is vacuous"
    assert torch.equal(trees[0], evaluate.tree_accepts(torch.log_softmax(logits, -1), future, oo.BUDGET, 4))


@pytest.mark.parametrize("name", sorted(PENALTIES))
def test_path_aware_chain_equals_a_brute_force_chain(name: str) -> None:
    logits, output, _, first, _ = _synthetic()
    opts = PENALTIES[name]
    counts = oo.root_counts(output, logits.shape[-1])
    got = oo.chain_drafts(logits, counts, first, opts, "path")
    root = oo.chain_drafts(logits, counts, first, opts, "root")
    for a in range(logits.shape[0]):
        history = output[: a + 1].tolist()
        for d in range(logits.shape[1]):
            token = _argmax(_reference_row(logits[a, d].tolist(), history, len(history), opts))
            assert int(got[a, d]) == token, (a, d)
            history.append(token)
    assert not torch.equal(got, root), "the chain's own tokens never mattered: the test proves nothing"


def _brute_force_tree(row_logprobs, depth: int, budget: int, topk: int) -> list[tuple[int, ...]]:
    """Every rank sequence up to `depth` scored exactly (each node's own top-k), then the first `budget` by
    (score desc, depth asc, ranks asc)."""
    scored = []
    for length in range(1, depth + 1):
        for ranks in itertools.product(range(topk), repeat=length):
            path: tuple[int, ...] = ()
            score = 0
            for r in ranks:
                row = row_logprobs(path)
                order = sorted(range(row.shape[0]), key=lambda t, row=row: (-float(row[t]), t))[:topk]
                score += int(float(row[order[r]].clamp(min=-1e4, max=0.0)) * 2**40)
                path = (*path, order[r])
            scored.append((-score, length, ranks, path))
    return [path for *_, path in sorted(scored)[:budget]]


@pytest.mark.parametrize("name", sorted(PENALTIES))
def test_best_first_tree_with_path_rows_equals_brute_force(name: str) -> None:
    logits, output, *_ = _synthetic(n=4)
    opts = PENALTIES[name]
    changed = 0
    for a in range(logits.shape[0]):

        def row(path: tuple[int, ...], a: int = a) -> torch.Tensor:
            history = output[: a + 1].tolist() + list(path)
            values = _reference_row(logits[a, len(path)].tolist(), history, len(history), opts)
            return torch.log_softmax(torch.tensor(values), dim=-1)

        def root_row(
            path: tuple[int, ...], a: int = a
        ) -> torch.Tensor:  # 0031: the root's state at every depth
            history = output[: a + 1].tolist()
            values = _reference_row(logits[a, len(path)].tolist(), history, len(history), opts)
            return torch.log_softmax(torch.tensor(values), dim=-1)

        got = oo.best_first_tree(row, depth=3, budget=10, topk=3)
        assert got == _brute_force_tree(row, depth=3, budget=10, topk=3), a
        changed += got != oo.best_first_tree(root_row, depth=3, budget=10, topk=3)
    assert changed, "the path never changed a tree: the test proves nothing"


def test_best_first_tree_keeps_build_ddtrees_tree() -> None:
    gen = torch.Generator().manual_seed(3)
    logprobs = torch.log_softmax(torch.randn((20, 5, 32), generator=gen) * 2, dim=-1)
    logprobs[0, 1] = logprobs[0, 0]  # equal rows: ties between depths go by the tie rule
    tree = evaluate.ddtree_utils().build_ddtree(logprobs, 16, 4)
    for a in range(logprobs.shape[0]):
        kept = oo.best_first_tree(lambda p, a=a: logprobs[a, len(p)], 5, 16, 4)
        tokens, parents = tree.tokens[a].tolist(), tree.parents[a].tolist()
        paths = []
        for i in range(16):
            path, j = [], i
            while j >= 0:
                path.insert(0, tokens[j])
                j = parents[j]
            paths.append(tuple(path))
        assert kept == paths, a


def test_unknown_options_are_refused_and_the_pair_runs_end_to_end(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot model"):
        oo.Options.of({"top_k": 3})
    torch.manual_seed(4)
    target, drafter = Target(TINY), Drafter(TINY, TINY_DRAFT)
    save_model(target, TINY.hf_config(), tmp_path / "target", prefix="model.")
    save_model(drafter, TINY_DRAFT.hf_config(TINY), tmp_path / "drafter", prefix="")
    prompts = torch.randint(3, TINY.vocab_size, (2, 9)).tolist()
    (tmp_path / "eval_prompts.json").write_text(
        json.dumps({"prompts": prompts, "continuations": [[0] * 12] * 2})
    )
    out = tmp_path / "out.json"
    assert oo.main(["--pair", str(tmp_path), "--prompts", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {(r["options"], r["adjustment"]) for r in result["rows"]} == {
        (name, how) for name in result["settings"]["option_sets"] for how in oo.ADJUSTMENTS
    }
    assert all(c["differ"] == 0 and c["anchors"] > 0 for c in result["reference_check"].values())
    assert oo.main(["--pair", str(tmp_path), "--options", "frequency_penalty"]) == 2, "plain is required"
