"""Patch spec-v2-result-fast-path (issue 25: the host time of a spec-v2 step's result processing): the
finish check skips 0024's token-by-token replay when no token of the step's accepted block can finish the
request. Checked in the real patched Req on CPU by tests/unit/spec_v2_result_probe.py: random cases
(hypothesis) through both paths must give the same output_ids, finished_reason, finished_len and returned
tokens, with EOS, stop ids and out-of-vocab ids at random positions of a block, max_new_tokens inside a
block and stop strings (which always take the replay). Spec v1's verify append (patch
spec-v1-verify-fast-append, the same test of a block) is checked the same way against the loop it replaces."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("spec_v2_result_probe.py")
CASES = 400


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_probe(
        PROBE, "SPEC-V2-RESULT-CHECK", sglang_cpu_path, "check", "20261203", str(CASES), timeout=900
    )


def test_fast_path_finishes_exactly_as_the_token_by_token_replay(facts: dict) -> None:
    """No case differs in output_ids, finished_reason (and what it matched), finished_len or the tokens
    returned (output_ids_through_stop)."""
    assert facts["cases"] == CASES
    assert facts["differ"] == 0, facts["first"]


def test_cases_finish_inside_a_block_by_every_kind_of_finish(facts: dict) -> None:
    """The cases reach what could go wrong: the finishing token before the end of a step's block, by a stop
    or EOS id, max_new_tokens, a stop string, and an out-of-vocab id."""
    inside = facts["inside_block"]
    for reason in ("FINISH_MATCHED_TOKEN", "FINISH_LENGTH", "FINISH_MATCHED_STR", "NaN happened"):
        assert inside.get(reason, 0) >= 10, inside


def test_fast_path_answers_every_block_that_cannot_finish(facts: dict) -> None:
    """A long request with a stop id that never comes: every multi-token step skips the replay (the cut)."""
    assert facts["fast_taken"] == 1.0


def test_the_stop_id_set_is_rebuilt_when_the_tokenizer_changes(facts: dict) -> None:
    """The set is cached per request: swapping the tokenizer after a step must still stop at its EOS."""
    got = facts["stop_ids_follow_a_new_tokenizer"]
    assert got["replay"]["finished_len"] == 5 and got["replay"]["returned"] == [97, 98, 99, 97, 9]
    assert got["fast"] == got["replay"]


@pytest.fixture(scope="module")
def v1_facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_probe(
        PROBE, "SPEC-V2-RESULT-CHECK", sglang_cpu_path, "check-v1", "20261203", str(CASES), timeout=900
    )


def test_spec_v1_verify_appends_exactly_as_the_token_by_token_loop(v1_facts: dict) -> None:
    """Patch spec-v1-verify-fast-append: DFLASH's and DDTREE's v1 verify append a request's block through
    append_accepted_tokens; with its fast path on, no case differs from the loop of 0.5.13.post1 (fast path
    off) in output_ids, finish reason and length, the tokens returned, the count appended per step (the KV
    committed) or the tokens a grammar was told; aborts and grammars included."""
    assert v1_facts["cases"] == CASES
    assert v1_facts["differ"] == 0, v1_facts["first"]


def test_spec_v1_cases_finish_inside_a_block_and_the_fast_path_takes_most_blocks(v1_facts: dict) -> None:
    """The cases cut blocks short by every kind of finish (where appending the whole block would be wrong),
    and the fast path still answers a good share of the blocks (the ones with nothing that could finish)."""
    inside = v1_facts["inside_block"]
    for reason in (
        "FINISH_MATCHED_TOKEN",
        "FINISH_LENGTH",
        "FINISH_MATCHED_STR",
        "NaN happened",
        "FINISH_ABORT",
    ):
        assert inside.get(reason, 0) >= 5, inside
    assert v1_facts["fast_blocks"] >= 0.3 * v1_facts["blocks"], v1_facts
