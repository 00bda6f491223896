"""Patch 0015 (ddtree-warm-penalties): the running-penalties kernel is compiled at worker start, never
fatally, by both workers with their own verify rows. The warm-up itself (one launch, one compiled
variant) is checked by the compile test in tests/unit/test_ddtree_request_options.py and on the device
by request_options_gpu.py; here: the wrapper's behaviour in the real patched sglang on CPU, and where
the workers call it (read from the patched sources: a worker cannot be built without a GPU)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("warm_penalties_probe.py")
SPEC = "sglang/srt/speculative"


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_probe(PROBE, "WARM-PENALTIES-PROBE", sglang_cpu_path, timeout=600)


def test_off_cuda_nothing_is_warmed_and_nothing_said(facts: dict) -> None:
    assert facts["on_cpu"] is False and facts["quiet"] == []


def test_a_failed_warm_up_is_a_warning_not_a_crash(facts: dict) -> None:
    assert facts["failed"] is False
    assert len(facts["warnings"]) == 1 and "PassManager::run failed" in facts["warnings"][0], facts[
        "warnings"
    ]


def _init_calls(source: Path, class_name: str) -> list[str]:
    tree = ast.parse(source.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
            return [
                ast.unparse(call)
                for call in ast.walk(init)
                if isinstance(call, ast.Call) and ast.unparse(call.func) == "warm_up_penalties_or_warn"
            ]
    raise AssertionError(f"{class_name} not in {source}")


@pytest.mark.parametrize(
    ("source", "class_name", "rows"),
    [
        ("dflash_worker.py", "DFlashWorker", "int(self.block_size)"),
        ("ddtree_worker.py", "DDTreeWorker", "self.num_verify_tokens"),
    ],
)
def test_each_worker_warms_its_own_verify_rows(
    sglang_cpu_path: str,  # noqa: F811
    source: str,
    class_name: str,
    rows: str,
) -> None:
    root = Path(sglang_cpu_path.split(":")[0])
    calls = _init_calls(root / SPEC / source, class_name)
    assert calls == [f"warm_up_penalties_or_warn(self.device, vocab, {rows})"], calls
