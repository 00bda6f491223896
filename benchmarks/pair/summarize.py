"""One table from a serve_bench run: served vs offline acceptance, greedy equality, speed ratios per cell.

    python -m benchmarks.pair.summarize --runs OUT [--pair DIR] [--device cuda]

Reads OUT/MODE/greedy.json and OUT/MODE/bench-tT/results.json (benchmarks.pair.serve_bench). With --pair
(the trained pair's folder) it also evaluates the rig offline on the very tokens the no-speculation server
produced for the eval prompts, so served and offline acceptance are measured on the same sequences.
Writes OUT/summary.json and OUT/summary.md and prints the markdown, then the greedy verdict: exit 1 when a
mode's outputs differ from no speculation other than at near-ties (greedy_verdict).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ddtree.bench.compare import load_json, run_from
from ddtree.bench.report import accept_value, cell_median
from ddtree.bench.stats import describe
from ddtree.fsutil import atomic_write

from benchmarks.pair.near_tie import NEAR_TIE, first_difference_at, load_pair, load_target, logit_gap
from benchmarks.pair.serve_bench import BLOCK, MODES, TOPK

OFFLINE_TOLERANCE = 0.03  # the goal: served acceptance within 3% of the rig's


def greedy_table(runs: Path, modes: list[str]) -> dict[str, Any]:
    """Per mode: equal outputs vs no speculation (count, first differing index) and mean served acceptance."""
    greedy = {
        m: json.loads((runs / m / "greedy.json").read_text())
        for m in modes
        if (runs / m / "greedy.json").is_file()
    }
    base = greedy.get("none")
    table = {}
    for mode, g in greedy.items():
        row: dict[str, Any] = {"requests": len(g["outputs"]), "seconds": g["seconds"]}
        if base is not None:
            same, first = 0, []
            for a, b in zip(base["outputs"], g["outputs"], strict=True):
                if a == b:
                    same += 1
                else:
                    first.append(next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y))
            row["identical_to_none"] = same
            row["first_difference_at"] = first
        accepted = [a for a in g["accept_lengths"] if a is not None]
        if accepted:
            row["served_accept_length"] = sum(accepted) / len(accepted)
        table[mode] = row
    return table


def offline_on_served(runs: Path, pair: Path, device: str) -> dict[str, dict[str, float]]:
    """The rig's acceptance on (eval prompt, the no-speculation server's greedy output) pairs."""
    import torch

    from benchmarks.pair import evaluate

    target, drafter = load_pair(pair, device)
    prompts = json.loads((pair / "eval_prompts.json").read_text())["prompts"]
    served = json.loads((runs / "none" / "greedy.json").read_text())["outputs"]
    budgets = sorted(int(m.split("-")[1]) for m in MODES if m.startswith("ddtree-"))
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        result = evaluate.acceptance(
            target, drafter, list(zip(prompts, served, strict=True)), BLOCK, evaluate.methods(budgets, TOPK)
        )
    return {("dflash" if k == evaluate.CHAIN else k): v for k, v in result.items()}


def divergence_gaps(runs: Path, pair: Path, device: str, modes: list[str]) -> dict[str, list[float]]:
    """Per mode: the target's top-1 minus top-2 logit at each first difference from no speculation.

    A small gap means the two servers' bf16 arithmetic (a decode step vs a verify pass over a block or a
    tree) broke a near-tie; a large one would be a bug. Computed in float32 by the rig's copy of the target
    (near_tie.logit_gap, as paired_step does).
    """
    target = load_target(pair, device)
    prompts = json.loads((pair / "eval_prompts.json").read_text())["prompts"]
    base = json.loads((runs / "none" / "greedy.json").read_text())["outputs"]
    gaps: dict[str, list[float]] = {}
    for mode in modes:
        if mode == "none" or not (runs / mode / "greedy.json").is_file():
            continue
        outputs = json.loads((runs / mode / "greedy.json").read_text())["outputs"]
        gaps[mode] = []
        for prompt, a, b in zip(prompts, base, outputs, strict=True):
            first = first_difference_at(a, b)
            if first is not None:
                gaps[mode].append(logit_gap(target, prompt + a[:first], device)["gap"])
    return gaps


def greedy_verdict(summary: dict[str, Any]) -> tuple[bool, list[str]]:
    """Lossless or not, per mode: identical to no speculation, or every first difference at a near-tie.

    A verify pass and a decode step do not round bf16 alike, so a near-tie (top-1 minus top-2 logit at most
    NEAR_TIE) can flip; a difference at a larger gap is a bug. Without the gaps (summarize run without
    --pair) only identical outputs pass.
    """
    gaps = summary.get("first_difference_gaps") or {}
    ok, lines = True, []
    for mode, row in summary["greedy"].items():
        same, total = row.get("identical_to_none", row["requests"]), row["requests"]
        if same == total:
            lines.append(f"greedy: {mode}: identical to no speculation in {total} of {total} requests")
            continue
        if mode not in gaps:
            ok = False
            lines.append(f"greedy: {mode}: differs from no speculation in {total - same} of {total} requests "
                         "and the gaps are unknown: run summarize with --pair to judge them")  # fmt: skip
            continue
        wide = sorted(g for g in gaps[mode] if g > NEAR_TIE)
        ok = ok and not wide
        verdict = (f"{len(wide)} at a gap above {NEAR_TIE} (a bug): {wide}" if wide
                   else f"all at near-ties (gap <= {NEAR_TIE}, bf16 noise)")  # fmt: skip
        lines.append(f"greedy: {mode}: {same} of {total} identical; first differences {verdict}")
    lines.append("greedy equality across modes: " + ("ok" if ok else "FAIL"))
    return ok, lines


def spread(stats: dict[str, Any] | None) -> float | None:
    """(max - min) / median of a `describe` summary; None without one."""
    return (stats["max"] - stats["min"]) / stats["median"] if stats and stats.get("median") else None


def step_times(cell: dict[str, Any]) -> tuple[float | None, float | None]:
    """(median ms per server step over the cell's rounds, their spread): the time two runs of the cell
    should agree on. A round's tok/s also carries its prompts' acceptance; its time per step does not.
    None for rounds recorded before `ddtree bench` kept decode spans and steps."""
    steps = describe(
        1000.0 * rd["decode_s"] / rd["decode_steps"]
        for rd in cell.get("rounds") or []
        if rd.get("decode_s") and rd.get("decode_steps")
    )
    return (steps["median"], spread(steps)) if steps else (None, None)


def bench_rows(runs: Path, modes: list[str]) -> list[dict[str, Any]]:
    """One row per (temperature, context, concurrency, mode) with medians, spread and ratios."""
    rows = []
    by_key: dict[tuple, dict[str, Any]] = {}
    for mode in modes:
        for folder in sorted((runs / mode).glob("bench-t*")):
            if not (folder / "results.json").is_file():
                continue
            temperature = float(folder.name.removeprefix("bench-t"))
            run = run_from(load_json(folder))
            for (ctx, conc), cell in sorted(run.cells.items()):
                step_ms, step_spread = step_times(cell)
                row = {
                    "temperature": temperature, "context": ctx, "concurrency": conc, "mode": mode,
                    "per_request_tok_s": cell_median(cell, "per_request_tok_s"),
                    "aggregate_tok_s": cell_median(cell, "aggregate_tok_s"),
                    "ttft_s": cell_median(cell, "ttft_s"),
                    "accept_length": accept_value(cell) if mode != "none" else None,
                    "aggregate_spread": spread((cell.get("metrics") or {}).get("aggregate_tok_s")),
                    "step_ms": step_ms, "step_spread": step_spread,
                }  # fmt: skip
                by_key[(temperature, ctx, conc, mode)] = row
                rows.append(row)
    for row in rows:
        key = (row["temperature"], row["context"], row["concurrency"])
        ref = "none" if row["mode"] == "dflash" else "dflash" if row["mode"].startswith("ddtree") else None
        other = by_key.get((*key, ref)) if ref else None
        if other and other["per_request_tok_s"] and row["per_request_tok_s"]:
            row["ratio_vs"] = ref
            row["per_request_ratio"] = row["per_request_tok_s"] / other["per_request_tok_s"]
            row["aggregate_ratio"] = row["aggregate_tok_s"] / other["aggregate_tok_s"]
    return rows


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def markdown(summary: dict[str, Any]) -> str:
    lines = ["## Greedy check (eval prompts, all at once) and acceptance: served vs offline", ""]
    lines += [
        "| mode | identical to none | served accept | offline accept (same tokens) | served / offline |",
        "|---|---|---|---|---|",
    ]
    offline = summary.get("offline_on_served") or {}
    for mode, row in summary["greedy"].items():
        off = (offline.get(mode) or {}).get("accept_length")
        served = row.get("served_accept_length")
        ratio = served / off if served and off else None
        same = f"{row.get('identical_to_none', '-')}/{row['requests']}"
        lines.append(f"| {mode} | {same} | {_f(served, 3)} | {_f(off, 3)} | {_f(ratio, 3)} |")
    gaps = summary.get("first_difference_gaps") or {}
    if gaps:
        lines += [
            "",
            "Target's top-1 minus top-2 logit (float32) at each first difference from no speculation:",
            "",
        ]
        for mode, values in gaps.items():
            small = sum(v <= NEAR_TIE for v in values)
            shown = ", ".join(f"{v:.3f}" for v in sorted(values))
            lines.append(f"- {mode}: {small} of {len(values)} at most {NEAR_TIE} ({shown})")
    lines += ["", "## Served speed (medians; ratio: DFLASH over none, DDTREE over DFLASH)", ""]
    lines += [
        "Round spread: (max - min) / median of the rounds' aggregate tok/s; every round has other prompts,",
        "so for a speculative mode it also carries their acceptance. ms per step: a round's decode span over",
        "the server steps of its longest request (verify passes, or tokens - 1 without speculation); its",
        "spread is what two runs of the same cell (the same prompts) can differ by.",
        "",
    ]
    lines += [
        "| T | context | conc | mode | tok/s per request | aggregate tok/s | TTFT s | accept | "
        "ratio per request | ratio aggregate | round spread | ms per step | step spread |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["bench"]:
        lines.append(
            f"| {r['temperature']:g} | {r['context']} | {r['concurrency']} | {r['mode']} | "
            f"{_f(r['per_request_tok_s'])} | {_f(r['aggregate_tok_s'])} | {_f(r['ttft_s'], 3)} | "
            f"{_f(r['accept_length'], 2)} | {_f(r.get('per_request_ratio'), 2)} | "
            f"{_f(r.get('aggregate_ratio'), 2)} | "
            f"{_pct(r['aggregate_spread'])} | {_f(r.get('step_ms'), 2)} | {_pct(r.get('step_spread'))} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, required=True)
    ap.add_argument("--pair", type=Path)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    modes = [m for m in MODES if (args.runs / m).is_dir()]
    summary: dict[str, Any] = {"modes": modes, "greedy": greedy_table(args.runs, modes)}
    if args.pair is not None and (args.runs / "none" / "greedy.json").is_file():
        summary["offline_on_served"] = offline_on_served(args.runs, args.pair, args.device)
        summary["first_difference_gaps"] = divergence_gaps(args.runs, args.pair, args.device, modes)
    summary["bench"] = bench_rows(args.runs, modes)
    atomic_write(args.runs / "summary.json", json.dumps(summary, indent=1) + "\n")
    text = markdown(summary)
    atomic_write(args.runs / "summary.md", text)
    print(text)
    ok, verdict = greedy_verdict(summary)
    print("\n".join(verdict))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
