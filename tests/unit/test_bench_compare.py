"""`ddtree bench compare` on crafted results: speedups per cell and the verdict against the reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ddtree.bench.compare import EXIT_FAIL, EXIT_INCOMPLETE, compare
from ddtree.cli import main
from ddtree.errors import UserError
from ddtree.receipts.reference import default_reference_path

REFERENCE = """\
schema: 1
source: crafted for tests (same shape as env/reference/results.yaml)
results:
  - id: baseline-cuda-graph
    algorithm: none
    concurrency: 1
    context: short
    output_tokens_per_s: {min: 98, max: 98}
  - id: ddtree-single
    algorithm: DDTREE
    concurrency: 1
    context: short
    output_tokens_per_s: {min: 150, max: 170}
    acceptance_length: {min: 3.5, max: 4.1}
  - id: ddtree-aggregate
    algorithm: DDTREE
    concurrency: null
    context: null
    aggregate_output_tokens_per_s: {min: 897, max: 897}
sweep:
  context_tokens: [60, 1024, 4096, 8192]
  concurrency: [1, 8, 32, 64]
"""


def stats(value: float) -> dict:
    return {"n": 3, "mean": value, "median": value, "p10": value, "p90": value, "min": value, "max": value}


def cell(context: int, concurrency: int, tok_s: float, aggregate: float, accept: float | None) -> dict:
    return {
        "context": context,
        "concurrency": concurrency,
        "complete": True,
        "metrics": {
            "per_request_tok_s": stats(tok_s),
            "aggregate_tok_s": stats(aggregate),
            "ttft_s": stats(0.05 * context / 60),
            "accept_length": stats(accept) if accept else None,
            "accept_length_weighted": accept,
        },
    }


def write_run(path: Path, mode: str, cells: list[dict], label: str | None = None) -> Path:
    algorithm = {"baseline": None, "ddtree": "DFLASH"}[mode]
    speculative = {"speculative_algorithm": algorithm}
    if mode == "ddtree":
        speculative["speculative_ddtree_budget"] = 8
    doc = {
        "schema": "ddtree-bench/1",
        "kind": "sweep",
        "label": label or mode,
        "server": {"mode": mode, "speculative": speculative},
        "cells": cells,
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def reference(tmp_path: Path) -> Path:
    path = tmp_path / "results.yaml"
    path.write_text(REFERENCE)
    return path


def baseline(tmp_path: Path, tok_s: float = 98.0) -> Path:
    cells = [
        cell(60, 1, tok_s, tok_s, None),
        cell(60, 64, tok_s * 0.7, 500, None),
        cell(4096, 1, 90, 90, None),
    ]
    return write_run(tmp_path / "baseline.json", "baseline", cells)


def ddtree(tmp_path: Path, tok_s: float = 160.0, aggregate: float = 900.0, accept: float = 3.8) -> Path:
    cells = [
        cell(60, 1, tok_s, tok_s, accept),
        cell(60, 64, tok_s * 0.5, aggregate, accept - 0.4),
        cell(4096, 1, 140, 140, accept - 0.2),
    ]
    return write_run(tmp_path / "ddtree.json", "ddtree", cells)


def test_reproduced_run_passes(tmp_path: Path, reference: Path) -> None:
    text, doc, code = compare([baseline(tmp_path), ddtree(tmp_path)], reference, 0.10)
    assert code == 0 and doc["verdict"] == "PASS", text
    statuses = {(c["name"], c["metric"]): c["status"] for c in doc["checks"]}
    assert statuses[("ddtree: ddtree-aggregate", "aggregate_tok_s")] == "pass"
    assert statuses[("speedup ddtree-single / baseline-cuda-graph", "speedup per_request_tok_s")] == "pass"
    row = next(r for r in doc["rows"] if (r["context"], r["concurrency"]) == (60, 1))
    assert row["per_request_tok_s"]["speedup"] == pytest.approx(160 / 98)
    assert row["ttft_s"]["speedup"] == pytest.approx(1.0)
    assert "| 60 | 1 | 98.0 | 160.0 | 1.63x |" in text
    assert "Verdict: PASS" in text


def test_slow_ddtree_fails(tmp_path: Path, reference: Path) -> None:
    _text, doc, code = compare([baseline(tmp_path), ddtree(tmp_path, tok_s=120)], reference, 0.10)
    assert code == EXIT_FAIL and doc["verdict"] == "FAIL"
    failed = {c["name"] for c in doc["checks"] if c["status"] == "fail"}
    assert "ddtree: ddtree-single" in failed
    assert "speedup ddtree-single / baseline-cuda-graph" in failed  # 1.22x < 1.53x * 0.9


def test_tolerance_decides_a_borderline_value(tmp_path: Path, reference: Path) -> None:
    run = ddtree(tmp_path, tok_s=140)  # 140 vs 150-170: 6.7 % below
    assert compare([run], reference, 0.10)[2] == 0
    assert compare([run], reference, 0.05)[2] == EXIT_FAIL


def test_acceptance_out_of_range_fails(tmp_path: Path, reference: Path) -> None:
    _, doc, code = compare([ddtree(tmp_path, accept=2.0)], reference, 0.10)
    assert code == EXIT_FAIL
    assert [c["metric"] for c in doc["checks"] if c["status"] == "fail"] == ["accept_length"]


def test_missing_cell_is_incomplete_not_pass(tmp_path: Path, reference: Path) -> None:
    run = write_run(tmp_path / "d.json", "ddtree", [cell(60, 1, 160, 160, 3.8)])  # no concurrency 64
    _, doc, code = compare([run], reference, 0.10)
    assert code == EXIT_INCOMPLETE and doc["verdict"] == "INCOMPLETE"
    assert {c["status"] for c in doc["checks"]} == {"pass", "missing"}


def test_other_gpu_passes_on_relative_checks_only(tmp_path: Path, reference: Path) -> None:
    """Half as fast everywhere (another GPU), same speedup and acceptance: --relative passes."""
    a, b = baseline(tmp_path, tok_s=49), ddtree(tmp_path, tok_s=80, aggregate=450)
    assert compare([a, b], reference, 0.10)[2] == EXIT_FAIL
    text, doc, code = compare([a, b], reference, 0.10, relative=True)
    assert code == 0, text
    assert {c["metric"] for c in doc["checks"]} == {"accept_length", "speedup per_request_tok_s"}


def test_run_against_reference_yaml_as_second_path(tmp_path: Path, reference: Path) -> None:
    _text, doc, code = compare([ddtree(tmp_path), reference], None, 0.10)
    assert code == 0 and doc["b"] is None and doc["reference"] == str(reference)


def test_mode_override_and_unknown_mode(tmp_path: Path, reference: Path) -> None:
    run = write_run(tmp_path / "x.json", "ddtree", [cell(60, 1, 160, 160, 3.8)], label="mystery")
    doc = json.loads(run.read_text())
    doc["server"]["mode"] = "unknown"
    run.write_text(json.dumps(doc))
    text, _, code = compare([run], reference, 0.1)
    assert code == EXIT_INCOMPLETE and "--mode-a" in text
    assert compare([run], reference, 0.1, modes=("ddtree", None))[1]["checks"]


def test_humaneval_pass_rates(tmp_path: Path) -> None:
    def he(name: str, rate: float) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({"schema": "ddtree-bench/1", "kind": "humaneval", "pass@1": rate}))
        return path

    assert compare([he("a", 0.90), he("b", 0.89)], None, 0.1, use_reference=False)[2] == 0
    _text, doc, code = compare([he("a", 0.90), he("c", 0.80)], None, 0.1, use_reference=False)
    assert code == EXIT_FAIL and doc["verdict"] == "FAIL"


def test_cli_compare_writes_json_and_markdown(tmp_path: Path, reference: Path, capsys) -> None:
    out = tmp_path / "cmp.json"
    argv = ["bench", "compare", str(baseline(tmp_path)), str(ddtree(tmp_path, tok_s=100))]
    code = main([*argv, "--reference", str(reference), "--out", str(out)])
    assert code == EXIT_FAIL
    assert json.loads(out.read_text())["verdict"] == "FAIL"
    assert "Verdict: FAIL" in out.with_suffix(".md").read_text()
    assert "Verdict: FAIL" in capsys.readouterr().out
    assert main([*argv, "--no-reference"]) == 0


def test_bad_inputs_name_the_file(tmp_path: Path, capsys) -> None:
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"hello": 1}')
    assert main(["bench", "compare", str(bogus), "--no-reference"]) == 1
    assert str(bogus) in capsys.readouterr().err
    with pytest.raises(UserError, match="not found"):
        compare([tmp_path / "nope.json"], None, 0.1, use_reference=False)


def test_the_shipped_reference_loads_and_judges(tmp_path: Path) -> None:
    """env/reference/results.yaml (the environment's data) is found and gives a verdict."""
    shipped = default_reference_path()
    if shipped is None:
        pytest.skip("env/reference/results.yaml is not in this checkout yet")
    _, doc, code = compare([baseline(tmp_path), ddtree(tmp_path)], shipped, 0.10)
    assert doc["checks"] and code in (0, EXIT_FAIL, EXIT_INCOMPLETE)
    assert any(c["name"].startswith("speedup") for c in doc["checks"])
