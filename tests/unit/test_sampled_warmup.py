"""Patch 0016 (sampled-warmup): after SGLang's greedy warm-up request, one sampled request (temperature with
top-p, top-k and min-p) before the server reports ready, so a user's first sampled batch does not pay the
compiles of sampling (82.8 s for the first top-p request on the H200, 2026-12-02). The function runs in the
real patched sglang on CPU against a real loopback HTTP server (tests/unit/sampled_warmup_probe.py); where
SGLang's warm-up calls it is read from the patched source (the warm-up needs a running server)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("sampled_warmup_probe.py")


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_probe(
        PROBE,
        "SAMPLED-WARMUP-PROBE",
        sglang_cpu_path,
        timeout=600,
        env={"SGLANG_DDTREE_SAMPLED_WARMUP": None},
    )


def test_the_greedy_request_is_sent_again_sampled_with_every_filter(facts: dict) -> None:
    assert facts["ok"] is True
    first = facts["sent"][0]
    assert first["path"] == "/generate" and first["auth"] == "Bearer k"
    assert first["json"]["text"] == "The capital city of France is"
    assert first["json"]["sampling_params"] == {
        "temperature": 1.0, "max_new_tokens": 8, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    }  # fmt: skip
    assert facts["greedy_after"]["sampling_params"]["temperature"] == 0, (
        "the greedy request is left as it was"
    )


def test_a_refused_warm_up_is_a_warning_and_the_server_serves(facts: dict) -> None:
    assert facts["refused"] is False
    assert any(line.startswith("WARNING: Sampled warm-up request answered HTTP 500") for line in facts["log"])


def test_the_switch_skips_it(facts: dict) -> None:
    assert facts["skipped"] is False and len(facts["sent"]) == 2


def test_sglangs_warm_up_sends_it_after_the_greedy_request_succeeded(sglang_cpu_path: str) -> None:  # noqa: F811
    source = Path(sglang_cpu_path.split(":")[0]) / "sglang/srt/entrypoints/http_server.py"
    tree = ast.parse(source.read_text())
    warmup = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_execute_server_warmup"
    )
    body = ast.unparse(warmup)
    greedy_check = body.index("assert res.status_code == 200")
    call = body.index("_send_sampled_warmup(")
    ready = body.index("server_status = ServerStatus.Up")
    assert greedy_check < call < ready, "sampled warm-up between the greedy request's check and 'ready'"
