"""Probe (run in the CPU SGLang environment by tests/unit/test_options_target.py): SGLang's own penalizers,
fed one token at a time as plain decoding feeds them (request_options_probe.reference_row: SamplingParams,
the batch's penalizer orchestrator, the scheduler's forward copy, logit_bias), against the stress's reference
tests/gpu/options_target.adjusted_row, on the crafted options target. Prints one line
`OPTIONS-TARGET-PROBE {json}`. The request is a stand-in namespace (tokenizer: EOS 254, no extra stop ids)."""

from __future__ import annotations

import json
import math
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from tests.gpu import options_target as ot
from tests.unit import request_options_probe as probe


def sglang_greedy(table: list[list[float]], last: int, params: dict, max_new: int) -> list[int]:
    """Plain greedy decoding with SGLang's penalizers applied to the table's rows."""
    output: list[int] = []
    while len(output) < max_new:
        row = torch.tensor(table[output[-1] if output else last], dtype=torch.float32)
        token = int(probe.reference_row(params, output, row).argmax())
        output.append(token)
        if token in {ot.EOS_ID, *(params.get("stop_token_ids") or ())}:
            break
    return output


def row_difference(table: list[list[float]], last: int, output: list[int], params: dict) -> float:
    """Largest |SGLang - reference| over the finite entries of one row; inf where -inf entries differ."""
    row = torch.tensor(table[output[-1] if output else last], dtype=torch.float32)
    want = probe.reference_row({k: v for k, v in params.items() if k != "temperature"}, output, row)
    got = torch.tensor(ot.adjusted_row(table[output[-1] if output else last], output, params))
    if not torch.equal(torch.isneginf(want), torch.isneginf(got)):
        return math.inf
    finite = torch.isfinite(want)
    return float((want[finite] - got[finite].float()).abs().max())


def main() -> dict:
    probe.EOS = ot.EOS_ID  # the stand-in tokenizer's EOS: the smoke vocabulary's
    table = ot.options_table(1234)
    cases = {}
    for name, entry, options, base in ot.OPTION_CASES:
        for label, params in ((name, options), (f"{name}-base", base)):
            want, _ = ot.greedy(table, entry, params, ot.OPTIONS_NEW)
            got = sglang_greedy(table, entry, params, ot.OPTIONS_NEW)
            worst = max(row_difference(table, entry, want[:i], params) for i in range(len(want)))
            cases[label] = {"equal": got == want, "max_row_difference": worst, "len": len(want)}
    seqs = ot.sequence_probabilities(table, ot.P, ot.CHI_OPTIONS, ot.CHI_NEW, 1e-4)
    prefixes = {s[:i] for s in seqs for i in range(len(s))}
    chi = max(row_difference(table, ot.P, list(p), ot.CHI_OPTIONS) for p in prefixes)
    return {"cases": cases, "chi_max_row_difference": chi, "chi_prefixes": len(prefixes)}


if __name__ == "__main__":
    try:
        out = main()
    except Exception:
        out = {"probe_error": traceback.format_exc()}
    print("OPTIONS-TARGET-PROBE " + json.dumps(out))
