"""Probe (run in the CPU SGLang environment by tests/unit/test_spec_v2_finish.py): a request's finish under
spec v2, where the scheduler hands it each step's accepted tokens at once (`req.output_ids.extend(tokens);
req.update_finish_state(len(tokens))`), against plain decoding, which checks every token as it comes
(`update_finish_state()` after each append). Random outputs over a five-letter byte alphabet with an EOS and
a stop id mixed in, stop strings of one to three letters, stop ids, max_new_tokens, and accepted lengths of
one to eight per step. Prints `FINISH-STATE-PROBE {json}`: how many cases differ, the first few, and how many
cases finished inside a step (the finishing token not the step's last) per kind of finish."""

from __future__ import annotations

import json
import random
import traceback
import types
from array import array

EOS = 0
STOP_ID = 5
LETTERS = [ord(c) for c in "abcde"]


def tokenizer():
    """A byte-level stand-in: one token per byte, so a stop string's tokens are its letters."""
    return types.SimpleNamespace(
        eos_token_id=EOS,
        additional_stop_token_ids=None,
        decode=lambda ids: bytes(int(i) for i in ids).decode("latin-1"),
        encode=lambda text, add_special_tokens=False: list(text.encode("latin-1")),
    )


def make_request(settings: dict):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(**settings)
    params.normalize(tokenizer())
    req = Req("probe", "", array("q", [1, 2, 3]), params, vocab_size=256)
    req.tokenizer = tokenizer()
    return req


def finish(req) -> dict:
    reason = req.finished_reason
    return {
        "reason": None if reason is None else type(reason).__name__,
        "matched": None if reason is None else getattr(reason, "matched", None),
        "output": [int(t) for t in req.output_ids_through_stop],
    }


def plain(settings: dict, tokens: list[int]) -> tuple[dict, int]:
    """One token at a time, as plain decoding (and spec v1) checks; also the index of the finishing token."""
    req = make_request(settings)
    for index, token in enumerate(tokens):
        req.output_ids.append(token)
        req.update_finish_state()
        if req.finished():
            return finish(req), index
    return finish(req), len(tokens)


def append_steps(req, tokens: list[int], steps: list[int]) -> None:
    """The spec-v2 result path of one request: each step's accepted tokens appended at once, then one
    update_finish_state (also spec_v2_result_probe's)."""
    start = 0
    for size in steps:
        chunk = tokens[start : start + size]
        if not chunk or req.finished():
            break
        req.output_ids.extend(chunk)
        req.update_finish_state(len(chunk))
        start += size


def spec_v2(settings: dict, tokens: list[int], steps: list[int]) -> dict:
    req = make_request(settings)
    append_steps(req, tokens, steps)
    return finish(req)


def random_case(rng: random.Random) -> tuple[dict, list[int], list[int]]:
    tokens = [rng.choice(LETTERS) for _ in range(40)]
    for _ in range(rng.randint(0, 2)):
        tokens[rng.randrange(len(tokens))] = rng.choice([EOS, STOP_ID])
    settings: dict = {"max_new_tokens": rng.randint(4, 45)}
    kind = rng.random()
    if kind < 0.6:
        settings["stop"] = ["".join(rng.choice("abcde") for _ in range(rng.randint(1, 3)))]
    if kind > 0.4:
        settings["stop_token_ids"] = [STOP_ID]
    steps = [rng.randint(1, 8) for _ in range(40)]
    return settings, tokens, steps


def step_ends(steps: list[int]) -> set[int]:
    ends, total = set(), 0
    for size in steps:
        total += size
        ends.add(total - 1)
    return ends


def main(cases: int = 3000) -> dict:
    rng = random.Random(20261202)
    differ, inside = [], {}
    for _ in range(cases):
        settings, tokens, steps = random_case(rng)
        want, at = plain(settings, tokens)
        got = spec_v2(settings, tokens, steps)
        if got != want:
            differ.append(
                {"settings": settings, "tokens": tokens, "steps": steps, "plain": want, "spec_v2": got}
            )
        if want["reason"] is not None and at not in step_ends(steps):
            inside[want["reason"]] = inside.get(want["reason"], 0) + 1
    return {"cases": cases, "differ": len(differ), "first": differ[:3], "finished_inside_a_step": inside}


if __name__ == "__main__":
    try:
        out = main()
    except Exception:
        out = {"probe_error": traceback.format_exc()}
    print("FINISH-STATE-PROBE " + json.dumps(out))
