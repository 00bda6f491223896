"""CPU micro-benchmark of the scheduler's result processing for one spec-v2 DFLASH/DDTREE step (issue 25).

Runs tests/unit/spec_v2_result_probe.py in the patched CPU SGLang environment (built on first use, as the unit
tests build it) and prints microseconds per step, before (0024's token-by-token finish check:
SPEC_V2_RESULT_FAST_PATH off) and after (patch spec-v2-result-fast-path) side by side, measured interleaved
in one process. Two levels: `finish` is the finish check alone (every request's `output_ids.extend` and
`update_finish_state`), `decode` the whole `process_batch_result_decode` (the real result processor and
output streamer; metrics, allocator and the detokenizer socket stood in, the payload pickled). A third,
`v1`, is spec v1's verify append of a step (patch spec-v1-verify-fast-append's append_accepted_tokens: old =
the token-by-token loop of 0.5.13.post1's verify, new = its fast path), the same switch.

    .venv/bin/python -m benchmarks.spec_v2_result_bench [--repeats 200] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import cpu_probe

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests" / "unit" / "spec_v2_result_probe.py"


def table(result: dict) -> str:
    """One markdown row per (scenario, batch size, level): old/new us for accepted lengths 1..8."""
    rows: dict[tuple[str, int, str], dict[int, tuple[float, float]]] = {}
    for row in result["rows"]:
        for level in ("finish", "v1", "decode"):
            if f"{level}_old_us" in row:
                key = (row["scenario"], row["bs"], level)
                rows.setdefault(key, {})[row["n"]] = (row[f"{level}_old_us"], row[f"{level}_new_us"])
    head = "| scenario | bs | level | " + " | ".join(f"n={n} old/new" for n in range(1, 9)) + " |"
    lines = [head, "|" + "---|" * (3 + 8)]
    for (scenario, bs, level), cells in rows.items():
        values = " | ".join(f"{cells[n][0]:.1f} / {cells[n][1]:.1f}" for n in range(1, 9))
        lines.append(f"| {scenario} | {bs} | {level} | {values} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200, help="interleaved old/new repeats per cell")
    parser.add_argument("--json", type=Path, help="also write the probe's JSON here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    result = cpu_probe.run(PROBE, "SPEC-V2-RESULT-BENCH", "bench", str(args.repeats))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    repeats = result["repeats"]
    print(f"us per step, median of {repeats} interleaved repeats (old = token by token, new = fast path)")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
