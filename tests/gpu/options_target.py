"""The stress's request-options target: the smoke's logit table with gadget rows where each option changes the
greedy output, and plain decoding's exact behaviour on it (issue 28).

The smoke target (ddtree.smoke.models) is a bigram model: logits = Z[last token], exactly, in bf16
(one-hot embeddings, zero attention and MLP, lm_head = Z^T / 16). Its ladder rows walk one 254-token cycle,
so 96 greedy tokens never repeat one: penalties change nothing and EOS is never near (the stress of
2026-12-01 saw 2 of 8 option requests change plain output). Here some rows are replaced by gadgets (token
ids below):

- loop A <-> B with an escape X one logit below: frequency, presence and repetition penalties break it;
- G0 -> G1 -> H, where H prefers a fresh H2 over G1 by one logit: a negative frequency penalty loops back;
- W -> V1 -> V2 -> M, where M says EOS (M <-> Y otherwise): min_new_tokens bans EOS on the rows whose output
  would still be too short, so its boundary falls inside a verify step;
- W2 -> M2, where M2 says stop id S (M2 <-> Y2 otherwise): stop_token_ids, and min_new_tokens banning them;
- L: L1 over L2 by 2: logit_bias swaps them;
- P -> group Q0..Q3 with EOS among them, logits 8..9.2: sampling at temperature 1 (the chi-square phase).

The drafter shares the target's embedding and LM head (it ranks Z[last] at every depth), so it drafts from the
same rows; gadget rows carry a low hint for the token two steps ahead, so trees hold multi-token paths.
`adjusted_row` is plain decoding's per-request logit change in the order of the scheduler's forward copy of
SamplingBatchInfo (additive penalties with min_new_tokens' -inf, then repetition scaling, then logit_bias);
`greedy` and `sequence_probabilities` use it. Pure Python: the stress's CPU tests import it without torch.
"""

from __future__ import annotations

import math
from typing import Any

from ddtree.smoke import models as smoke_models
from ddtree.smoke.dims import EOS_ID, MASK_ID, VOCAB

A, B, X = 65, 66, 67
G0, G1, H, H2 = 70, 71, 72, 73
W, V1, V2, M, Y = 80, 81, 82, 83, 84
W2, M2, Y2, S = 90, 91, 92, 93
L, L1, L2 = 110, 111, 112
P, Q = 120, (121, 122, 123, 124)
PREFIX = [1, 2, 3]  # prompt tokens before the gadget's entry (the model reads the last token only)

OPTIONS_NEW = 96
# name, the gadget's entry token, the options, the options of the run they must change (the comparison keeps
# stop ids where the option under test is min_new_tokens' ban on them)
OPTION_CASES: tuple[tuple[str, int, dict[str, Any], dict[str, Any]], ...] = (
    ("frequency", A, {"frequency_penalty": 0.7}, {}),
    ("presence", A, {"presence_penalty": 1.5}, {}),
    ("repetition", A, {"repetition_penalty": 1.3}, {}),
    ("negative_frequency", G0, {"frequency_penalty": -1.5}, {}),
    ("min_new_tokens", W, {"min_new_tokens": 20}, {}),
    ("stop_token_ids", W2, {"stop_token_ids": [S]}, {}),
    ("min_new_stop_id", W2, {"min_new_tokens": 12, "stop_token_ids": [S]}, {"stop_token_ids": [S]}),
    ("logit_bias", L, {"logit_bias": {str(L2): 3.0, str(L1): -1.0}}, {}),
    ("all", A, {"frequency_penalty": 0.2, "presence_penalty": 0.3, "repetition_penalty": 1.5,
                "min_new_tokens": 8, "logit_bias": {str(X): 2.0}}, {}),
)  # fmt: skip

# The chi-square phase: temperature 1, every option, CHI_NEW tokens per request (the first comes from the
# prefill's sampler, the rest from verify steps; min_new_tokens 2 bans EOS on the first two only).
CHI_NEW = 3
CHI_OPTIONS: dict[str, Any] = {
    "temperature": 1.0,
    "frequency_penalty": 0.7,
    "presence_penalty": 0.3,
    "repetition_penalty": 1.5,
    "min_new_tokens": 2,
    "logit_bias": {str(Q[1]): 1.0},
}


def _row(entries: dict[int, float]) -> list[float]:
    row = [0.0] * VOCAB
    row[EOS_ID] = row[MASK_ID] = smoke_models.BLOCKED_LOGIT
    for token, value in entries.items():
        row[token] = value
    return row


def gadget_rows() -> dict[int, list[float]]:
    """The replaced rows of the smoke's logit table (every value a multiple of 1/8: exact in bf16 / 16)."""
    rows = {
        A: {B: 10.0, X: 9.0, A: 6.0},
        B: {A: 10.0, X: 9.0, B: 6.0},
        X: {EOS_ID: 10.0, A: 7.0},
        G0: {G1: 10.0, H: 6.0},
        G1: {H: 10.0, H2: 6.0},
        H: {H2: 10.0, G1: 9.0},
        H2: {EOS_ID: 10.0, G0: 7.0},
        W: {V1: 10.0, V2: 6.0},
        V1: {V2: 10.0, M: 6.0},
        V2: {M: 10.0, EOS_ID: 6.0},
        M: {EOS_ID: 10.0, Y: 9.0, M: 6.0},
        Y: {M: 10.0, Y: 6.0},
        W2: {M2: 10.0, S: 6.0},
        M2: {S: 10.0, Y2: 9.0, M2: 6.0},
        Y2: {M2: 10.0, Y2: 6.0},
        S: {EOS_ID: 10.0, W2: 7.0},
        L: {L1: 10.0, L2: 8.0},
        L1: {EOS_ID: 10.0, L: 7.0},
        L2: {EOS_ID: 10.0, L: 7.0},
        P: {Q[0]: 8.0, Q[1]: 8.5, Q[2]: 9.0, Q[3]: 8.25},
    }
    for i, q in enumerate(Q):
        rows[q] = {Q[(i + k) % 4]: 8.0 + 0.375 * k for k in range(4)} | {EOS_ID: 8.5}
    return {token: _row(entries) for token, entries in rows.items()}


def options_table(seed: int) -> list[list[float]]:
    """Z[current][next] for the real tokens: smoke's ladder table (its cycle from `seed`) with the gadgets."""
    table = smoke_models.logit_table(smoke_models.successor_cycle(seed))
    for token, row in gadget_rows().items():
        table[token] = row
    return table


def _stops(params: dict[str, Any]) -> set[int]:
    return {EOS_ID, *(params.get("stop_token_ids") or ())}


def adjusted_row(row: list[float], output: list[int], params: dict[str, Any]) -> list[float]:
    """Plain decoding's logits for the token after `output`: 0 - frequency x count - presence (and -inf on
    EOS and the stop ids while the output is shorter than min_new_tokens), then repetition scaling of the
    tokens in the output, then logit_bias. Penalties count output tokens only, never the prompt."""
    counts: dict[int, int] = {}
    for token in output:
        counts[token] = counts.get(token, 0) + 1
    frequency = float(params.get("frequency_penalty", 0.0))
    presence = float(params.get("presence_penalty", 0.0))
    repetition = float(params.get("repetition_penalty", 1.0))
    out = list(row)
    for token, n in counts.items():
        out[token] -= frequency * n + presence
    if len(output) < int(params.get("min_new_tokens", 0)):
        for token in _stops(params):
            out[token] = -math.inf
    for token in counts:
        out[token] = out[token] * repetition if out[token] < 0 else out[token] / repetition
    for token, bias in (params.get("logit_bias") or {}).items():
        out[int(token)] += float(bias)
    return out


def greedy(
    table: list[list[float]], last: int, params: dict[str, Any], max_new: int
) -> tuple[list[int], float]:
    """Plain greedy decoding after a prompt ending in `last`: (output ids with the stop token that ended it,
    the smallest top-1 minus top-2 logit gap of any step)."""
    output: list[int] = []
    narrowest = math.inf
    while len(output) < max_new:
        logits = adjusted_row(table[output[-1] if output else last], output, params)
        best = max(range(VOCAB), key=logits.__getitem__)
        runner_up = max(v for t, v in enumerate(logits) if t != best)
        narrowest = min(narrowest, logits[best] - runner_up)
        output.append(best)
        if best in _stops(params):
            break
    return output, narrowest


def probabilities(
    table: list[list[float]], last: int, output: list[int], params: dict[str, Any]
) -> list[float]:
    """Softmax at the request's temperature of plain decoding's logits after `output`."""
    temperature = float(params.get("temperature", 1.0))
    logits = adjusted_row(table[output[-1] if output else last], output, params)
    top = max(logits)
    weights = [math.exp((v - top) / temperature) if v > -math.inf else 0.0 for v in logits]
    total = sum(weights)
    return [w / total for w in weights]


def sequence_probabilities(
    table: list[list[float]], last: int, params: dict[str, Any], new: int, floor: float
) -> dict[tuple[int, ...], float]:
    """P(output) for every output of up to `new` tokens (shorter: ended by a stop token) whose probability
    is at least `floor`; the rest of the mass is left out (the caller pools it)."""
    found: dict[tuple[int, ...], float] = {}
    frontier: list[tuple[list[int], float]] = [([], 1.0)]
    while frontier:
        output, p = frontier.pop()
        for token, q in enumerate(probabilities(table, last, output, params)):
            joint = p * q
            if joint < floor:
                continue
            seq = [*output, token]
            if len(seq) == new or token in _stops(params):
                found[tuple(seq)] = joint
            else:
                frontier.append((seq, joint))
    return found


def same_output(served: list[int], reference: list[int], params: dict[str, Any]) -> bool:
    """A served output equals the reference's, whether or not the server lists the stop token ending it."""
    if served == reference:
        return True
    return bool(reference) and reference[-1] in _stops(params) and served == reference[:-1]


def with_stop_token(output: list[int], finish: str | None) -> list[int]:
    """A served output ended by EOS, with the EOS (a server may leave the matched stop token out)."""
    if finish == "stop" and (not output or output[-1] != EOS_ID):
        return [*output, EOS_ID]
    return list(output)
