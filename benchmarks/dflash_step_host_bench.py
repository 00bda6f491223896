"""CPU benchmark of the host work of one DFLASH/DDTREE decode step against the context length and the tokens
accepted per step, spec v1 (the default step) and spec v2 (SGLANG_DFLASH_OVERLAP=1), issue 25.

On the H200 (sitting 2026-12-03b) the DDTREE-16 step under overlap grew from 1.72 ms at context 256 to 2.57 ms
at context 1024 with the same GPU work (tokens per step 2.02 -> 2.51); v1 from 3.01 to 3.51 ms. This runs
tests/unit/dflash_host_probe.py (the real patched sglang 0.5.13.post1 on CPU, scripted target and drafter;
built on first use, as the unit tests build it) once per path over prompt lengths x scripted commits per
verify, and prints per step: the aten ops SGLang's code dispatches (eager: one launch each on a GPU; inside
the stretches replayed as step graphs), SGLang's Python calls (cProfile: functions under sglang/ and the C
functions they call), and the host ms by phase of the loop (scheduler prepare, run_batch, result
processing). On the CPU the ops run their arithmetic, so the ms also grow with tensor sizes that a GPU
absorbs; the op and call counts are what a GPU step's host cost follows.

    .venv/bin/python -m benchmarks.dflash_step_host_bench [--contexts 256,1024] [--commits 1,3]
        [--algos ddtree,dflash] [--steps 6] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests" / "unit" / "dflash_host_probe.py"
MARKER = "DFLASH-HOST-PROBE"


def _numbers(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise SystemExit(f"{flag} takes comma-separated numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"{flag} takes numbers of at least 1, got {text!r}")
    return values


def cell_row(path: str, algo: str, prompt: int, commit: int, cell: dict) -> str:
    """One markdown row of a probe cell."""
    ops = cell["ops_per_step"]
    eager = sum(n for where, n in ops.items() if not where.startswith("graph:"))
    graphs = sum(n for where, n in ops.items() if where.startswith("graph:"))
    phases = cell.get("phase_ms_median", {})
    phase_text = " / ".join(
        f"{phases.get(name, float('nan')):.3f}" for name in ("prepare", "run_batch", "process")
    )
    calls = cell.get("sglang_calls_per_step")
    return (
        f"| {path} | {algo} | {prompt} | {commit} | {cell['tokens_per_step']:.2f} | {eager:.0f} | "
        f"{graphs:.0f} | {calls if calls is not None else '-'} | {phase_text} | "
        f"{cell['host_ms_per_step_median']:.3f} |"
    )


def table(results: dict[str, dict], algos: list[str], contexts: list[int], commits: list[int]) -> str:
    """Side by side: v1 and v2, each algorithm, context and commit."""
    head = (
        "| path | algo | prompt | commit | tokens/step | eager ops | ops in graphs | sglang calls | "
        "ms prepare / run_batch / process | host ms |"
    )
    lines = [head, "|" + "---|" * 10]
    for algo in algos:
        for path in ("v1", "v2"):
            facts = results[path]
            for prompt in contexts:
                for commit in commits:
                    cell = facts.get(f"{algo}_bs1_p{prompt}_c{commit}")
                    if cell is None:
                        lines.append(f"| {path} | {algo} | {prompt} | {commit} | (missing) |")
                    else:
                        lines.append(cell_row(path, algo, prompt, commit, cell))
    return "\n".join(lines)


def growth(results: dict[str, dict], algos: list[str], contexts: list[int], commits: list[int]) -> list[str]:
    """The SGLang functions whose calls per step change between the first and the last context (at the first
    commit) or the first and the last commit (at the first context): what grows, by name."""
    lines = []
    pairs = []
    if len(contexts) > 1:
        pairs.append(((contexts[0], commits[0]), (contexts[-1], commits[0])))
    if len(commits) > 1:
        pairs.append(((contexts[0], commits[0]), (contexts[0], commits[-1])))
    for algo in algos:
        for path in ("v1", "v2"):
            for (p0, c0), (p1, c1) in pairs:
                a = results[path].get(f"{algo}_bs1_p{p0}_c{c0}", {}).get("sglang_calls_by_function", {})
                b = results[path].get(f"{algo}_bs1_p{p1}_c{c1}", {}).get("sglang_calls_by_function", {})
                changed = sorted(
                    (
                        (k, a.get(k, 0.0), b.get(k, 0.0))
                        for k in set(a) | set(b)
                        if a.get(k, 0.0) != b.get(k, 0.0)
                    ),
                    key=lambda item: -abs(item[2] - item[1]),
                )
                what = ", ".join(f"{k} {x:g} -> {y:g}" for k, x, y in changed[:8]) or "none"
                lines.append(f"{path} {algo} p{p0}/c{c0} -> p{p1}/c{c1}: calls that change: {what}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="256,1024", help="prompt lengths (comma-separated)")
    parser.add_argument("--commits", default="1,3", help="scripted commits per verify (DDTREE emits K + 1)")
    parser.add_argument("--algos", default="ddtree,dflash", help="ddtree, dflash or both")
    parser.add_argument("--steps", type=int, default=6, help="timed, counted and profiled steps each")
    parser.add_argument("--json", type=Path, help="also write both probes' JSON here")
    args = parser.parse_args(argv)
    contexts, commits = _numbers(args.contexts, "--contexts"), _numbers(args.commits, "--commits")
    algos = [a for a in args.algos.split(",") if a]
    if not algos or any(a not in ("ddtree", "dflash") for a in algos):
        parser.error(f"--algos takes ddtree and/or dflash, got {args.algos!r}")
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    sys.path[:0] = [str(REPO), str(REPO / "build"), str(REPO / "entrypoint")]
    import tempfile

    from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path, write_tiny_pair

    sglang_path = sglang_cpu_path.__wrapped__()
    probe_args = [
        "--steps", str(args.steps), "--bs", "1", "--algos", ",".join(algos), "--profile",
        "--prompt-len", ",".join(map(str, contexts)), "--commit", ",".join(map(str, commits)),
    ]  # fmt: skip
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        models = write_tiny_pair(Path(folder))
        for path, switch in (("v1", None), ("v2", "1")):
            env = {"SGLANG_DFLASH_OVERLAP": switch, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            results[path] = run_probe(PROBE, MARKER, sglang_path, *models, *probe_args, timeout=1800, env=env)
            if "probe_error" in results[path]:
                raise SystemExit(f"the {path} probe failed:\n{results[path]['probe_error']}")
    if args.json:
        slim = {
            path: {key: {k: v for k, v in cell.items() if k != "profile"} for key, cell in cells.items()
                   if isinstance(cell, dict)}
            for path, cells in results.items()
        }  # fmt: skip
        args.json.write_text(json.dumps(slim, indent=1) + "\n")
    print("per decode step, bs 1 (CPU; scripts excluded from the ms; ops: aten ops SGLang dispatches)")
    print(table(results, algos, contexts, commits))
    for line in growth(results, algos, contexts, commits):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
