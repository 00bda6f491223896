"""Patch spec-v2-finish-token-by-token: under spec v2 (SGLANG_DFLASH_OVERLAP=1) a request's accepted
tokens arrive at once, and its finish must be plain decoding's, token for token. The DDTREE and DFLASH overlap
stresses on the H200 (2026-12-02, benchmarks/pair/results/sitting-2026-12-02d) returned tokens past a stop
string; the probe (tests/unit/finish_state_probe.py) replays random outputs both ways in the real Req."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("finish_state_probe.py")


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_probe(PROBE, "FINISH-STATE-PROBE", sglang_cpu_path)


def test_accepted_tokens_checked_at_once_finish_where_plain_decoding_does(facts: dict) -> None:
    """Finish reason, matched stop and the returned tokens equal plain decoding's in every case. Without the
    patch 759 of 3000 differ: a stop string earlier in the step than its last few tokens was missed, and
    max_new_tokens won over an earlier stop token or string."""
    assert facts["differ"] == 0, facts["first"]


def test_the_cases_finish_inside_a_step_by_every_kind_of_stop(facts: dict) -> None:
    """The cases reach what the patch is for: the finishing token in the middle of a step's accepted tokens,
    by a stop string, a stop token or EOS, and max_new_tokens, each many times."""
    inside = facts["finished_inside_a_step"]
    for reason in ("FINISH_MATCHED_STR", "FINISH_MATCHED_TOKEN", "FINISH_LENGTH"):
        assert inside.get(reason, 0) >= 100, inside
