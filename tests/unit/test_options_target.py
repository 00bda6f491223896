"""tests/gpu/options_target.py: the stress's crafted request-options target and its exact reference.

Real here: the table, the reference walk and distribution, the checkpoint the stress serves (smoke's real
writer, then the table's LM head) read back by transformers' Qwen3ForCausalLM on CPU (an independent
implementation of the architecture), and the reference against SGLang's own penalizers in the CPU SGLang
environment (options_target_probe.py). On the device the stress judges plain decoding's outputs against the
same reference ("options: plain decoding's N/N outputs are the crafted table's exact greedy walk")."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from ddtree.smoke import dims as smoke_dims
from ddtree.smoke import models as smoke_models

from tests.gpu import options_target as ot
from tests.gpu import stress_ddtree as stress
from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

SEED = smoke_models.SmokeSettings().seed
TABLE = ot.options_table(SEED)
PROBE = Path(__file__).with_name("options_target_probe.py")


@pytest.mark.parametrize("case", ot.OPTION_CASES, ids=[c[0] for c in ot.OPTION_CASES])
def test_each_option_changes_the_greedy_output_at_wide_margins(case) -> None:
    """The option under test changes plain decoding's output; no step of either walk is nearer a tie than
    the stress's noise gap (a divergence there would pass as bf16 noise)."""
    name, entry, options, base = case
    with_option, margin = ot.greedy(TABLE, entry, options, ot.OPTIONS_NEW)
    without, base_margin = ot.greedy(TABLE, entry, base, ot.OPTIONS_NEW)
    assert with_option != without, name
    assert min(margin, base_margin) > stress.NOISE_GAP, (name, margin, base_margin)


def test_the_gadgets_do_what_their_docstring_says() -> None:
    loop, _ = ot.greedy(TABLE, ot.A, {}, 12)
    assert loop == [ot.B, ot.A] * 6, "A <-> B loops without penalties"
    early, _ = ot.greedy(TABLE, ot.W, {}, 96)
    assert early == [ot.V1, ot.V2, ot.M, smoke_dims.EOS_ID], "EOS after 4 tokens"
    late, _ = ot.greedy(TABLE, ot.W, {"min_new_tokens": 20}, 96)
    assert late[-1] == smoke_dims.EOS_ID and len(late) == 22, late
    back, _ = ot.greedy(TABLE, ot.G0, {"frequency_penalty": -1.5}, 96)
    assert len(back) == 96 and back[2] == ot.G1, "a negative frequency penalty loops back to G1"


def test_adjusted_row_applies_plain_decodings_order() -> None:
    """Additive penalties first, repetition scaling of the result (x / p above 0, x * p below), logit_bias
    last; -inf on EOS and the stop ids while the output is short; the prompt never counts."""
    row = [0.0] * smoke_dims.VOCAB
    row[5], row[6] = 4.0, 1.0
    params = {"frequency_penalty": 1.0, "presence_penalty": 0.5, "repetition_penalty": 2.0,
              "min_new_tokens": 3, "stop_token_ids": [9], "logit_bias": {"6": 0.25}}  # fmt: skip
    got = ot.adjusted_row(row, [5, 5, 6], params)
    assert got[5] == (4.0 - 2.0 - 0.5) / 2.0
    assert got[6] == (1.0 - 1.0 - 0.5) * 2.0 + 0.25
    assert got[7] == 0.0
    assert ot.adjusted_row(row, [5, 6], params)[9] == -math.inf
    assert ot.adjusted_row(row, [5, 6], params)[smoke_dims.EOS_ID] == -math.inf
    assert ot.adjusted_row(row, [5, 6, 7], params)[9] == 0.0


def test_chi_distribution_is_a_distribution_and_bans_eos_early() -> None:
    seqs = ot.sequence_probabilities(TABLE, ot.P, ot.CHI_OPTIONS, ot.CHI_NEW, 1e-7)
    assert 0.999 < sum(seqs.values()) <= 1.0 + 1e-9
    assert all(len(s) == ot.CHI_NEW for s in seqs), "min_new_tokens 2: EOS only as the third token"
    assert sum(p for s, p in seqs.items() if s[-1] == smoke_dims.EOS_ID) > 0.05
    without = ot.sequence_probabilities(TABLE, ot.P, {"temperature": 1.0}, ot.CHI_NEW, 1e-7)
    assert max(abs(seqs.get(s, 0.0) - p) for s, p in without.items()) > 0.05, "the options must matter"


def test_same_output_and_with_stop_token() -> None:
    eos = smoke_dims.EOS_ID
    assert ot.same_output([1, 2], [1, 2, eos], {}) and ot.same_output([1, 2, eos], [1, 2, eos], {})
    assert not ot.same_output([1, 2], [1, 2, 3], {})
    assert ot.with_stop_token([1, 2], "stop") == [1, 2, eos]
    assert ot.with_stop_token([1, 2], "length") == [1, 2]


def test_the_served_checkpoint_computes_the_table_exactly(tmp_path: Path) -> None:
    """smoke's writer, then stress.write_logit_table: transformers' Qwen3ForCausalLM in bf16 (the served
    dtype) gives the table's row for the current token at every position, bit for bit."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    target, _ = smoke_models.write_models(tmp_path, smoke_models.SmokeSettings())
    stress.write_logit_table(target, TABLE)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.bfloat16).eval()
    prompt = [*ot.PREFIX, ot.A, ot.B, ot.X, ot.M, ot.Y, ot.W2, ot.M2, ot.S, ot.L, ot.P, *ot.Q, 200]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float()
    want = torch.tensor([TABLE[t] for t in prompt])
    assert torch.equal(logits, want), float((logits - want).abs().max())


def test_write_logit_table_of_the_ladder_is_smokes_own_head(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    target, _ = smoke_models.write_models(tmp_path, smoke_models.SmokeSettings())
    before = safetensors.load_file(str(target / "model.safetensors"))
    stress.write_logit_table(target, smoke_models.logit_table(smoke_models.successor_cycle(SEED)))
    after = safetensors.load_file(str(target / "model.safetensors"))
    assert before.keys() == after.keys()
    assert all(bool((before[k] == after[k]).all()) for k in before)


def test_the_reference_is_sglangs_own_penalizers(sglang_cpu_path: str) -> None:  # noqa: F811
    """In the CPU SGLang environment: SGLang's penalizers, fed as plain decoding feeds them, give the same
    greedy walk for every case (and its base), and the same logits (within 1e-5, -inf alike) on every step of
    the walks and every prefix the chi-square phase counts."""
    repo = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([sglang_cpu_path, str(repo / "entrypoint"), str(repo)])
    facts = run_probe(PROBE, "OPTIONS-TARGET-PROBE", sglang_cpu_path, env={"PYTHONPATH": path})
    for label, case in facts["cases"].items():
        assert case["equal"] and case["max_row_difference"] < 1e-5, (label, case)
    assert facts["chi_max_row_difference"] < 1e-5 and facts["chi_prefixes"] > 10, facts
