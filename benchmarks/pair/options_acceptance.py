"""Acceptance with request options on against acceptance without them, on the trained pair (GPU device).

    python -m benchmarks.pair.options_acceptance --pair DIR --out OUT [--modes none,ddtree-16,dflash]

Issue 28's goal: a penalty changes the target's choice, not the tree's quality, so DDTREE's acceptance with
a penalty on should stay within a few percent of its acceptance without one. For each mode, one server
(serve_bench's settings); the pair's held-out eval prompts, all at once, greedy, ignore_eos, the rig's
continuation length, once per option set in OPTION_SETS. Per option set: the mean served acceptance
(spec_accept_length; tokens per verify pass) and its ratio to the plain run's, and how many outputs equal
the plain-decoding server's (`none`) with the same options, token for token (a difference may be a bf16
near-tie; `summarize` judges those for the plain runs). OUT/options.json holds every output.
Exit 0 when every run completed, 1 when one failed, 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from ddtree.fsutil import atomic_write
from ddtree.smoke import check as smoke
from ddtree.smoke import server as smoke_server

from benchmarks.pair import serve_bench

# name -> request options (SGLang sampling params); token 17 is an ordinary byte-level token of the pair's
# tokenizer, biased down so the target's choice moves where it was the argmax.
OPTION_SETS: dict[str, dict[str, Any]] = {
    "plain": {},
    "frequency_penalty": {"frequency_penalty": 0.5},
    "presence_penalty": {"presence_penalty": 0.5},
    "repetition_penalty": {"repetition_penalty": 1.2},
    "min_new_tokens": {"min_new_tokens": 32},
    "logit_bias": {"logit_bias": {"17": -4.0}},
}
FEW_PERCENT = 0.05  # the goal's "within a few percent"


def mean_acceptance(run: dict[str, Any]) -> float | None:
    accepted = [a for a in run["accept_lengths"] if a is not None]
    return round(statistics.fmean(accepted), 4) if accepted else None


def summarize(runs: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per (mode, option set): acceptance, its ratio to the mode's plain run, outputs equal to none's."""
    rows = []
    for mode, by_option in runs.items():
        plain = mean_acceptance(by_option["plain"]) if "plain" in by_option else None
        for name, run in by_option.items():
            row: dict[str, Any] = {"mode": mode, "options": name, "acceptance": mean_acceptance(run)}
            if plain and row["acceptance"] is not None:
                row["ratio_to_plain"] = round(row["acceptance"] / plain, 4)
                row["within_few_percent"] = abs(row["ratio_to_plain"] - 1.0) <= FEW_PERCENT
            reference = runs.get("none", {}).get(name)
            if reference is not None and mode != "none":
                same = sum(a == b for a, b in zip(run["outputs"], reference["outputs"], strict=True))
                row["equal_to_none"] = f"{same}/{len(run['outputs'])}"
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| mode | options | acceptance | ratio to plain | outputs equal to none's |", "|" + "---|" * 5]
    for row in rows:
        cells = [row["mode"], row["options"], row["acceptance"], row.get("ratio_to_plain", "-"),
                 row.get("equal_to_none", "-")]  # fmt: skip
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def run_mode(mode: str, pair: Path, out: Path, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
    kind, settings = serve_bench.server_settings(mode)
    folder = out / mode
    folder.mkdir(parents=True, exist_ok=True)
    with serve_bench.step_environment(mode):
        args = smoke_server.mode_args(kind, pair / "drafter", settings)
        server = smoke_server.Server(pair / "target", args, folder / "server.log", settings)
    try:
        server.wait_ready()
        return {name: serve_bench.greedy_check(server, prompts, new_tokens, options)
                for name, options in OPTION_SETS.items()}  # fmt: skip
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, required=True, help="the trained pair (benchmarks.pair.train --out)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--modes", default="none,ddtree-16,dflash")
    args = ap.parse_args(argv)
    problem = smoke.gpu_problem()
    if problem:
        print(f"options_acceptance: cannot run here: {problem}")
        return 2
    prompts, new_tokens = serve_bench.eval_prompts(args.pair)
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    failed = 0
    for mode in args.modes.split(","):
        try:
            runs[mode] = run_mode(mode, args.pair, args.out, prompts, new_tokens)
        except Exception as exc:  # one mode's failure is reported; the next mode still runs
            print(f"options_acceptance: {mode}: FAILED {type(exc).__name__}: {exc}", flush=True)
            failed += 1
        rows = summarize(runs)
        atomic_write(args.out / "options.json", json.dumps({"rows": rows, "runs": runs}) + "\n")
        print(table(rows), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
