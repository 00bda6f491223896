"""CPU micro-benchmark of spec v1's keep/free slot indices per verify step (issue 25, patch 0034).

Runs tests/unit/step_indices_probe.py in the patched CPU SGLang environment and prints microseconds per step,
old (the per-request loop of patch ddtree-fast-step, then one host tensor) and new (numpy over the bs x width
grid), interleaved in one process, for DDTREE's path and DFLASH's chain at widths 9 and 17 (DDTREE-8 and -16).

    .venv/bin/python -m benchmarks.step_indices_bench [--repeats 100]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import cpu_probe

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests" / "unit" / "step_indices_probe.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100, help="interleaved old/new repeats per cell")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    result = cpu_probe.run(PROBE, "STEP-INDICES-BENCH", "bench", str(args.repeats))
    print(f"us per verify step, median of {result['repeats']} interleaved repeats (old = loop, new = numpy)")
    print("| indices | width | bs | old | new | new / old |\n|---|---|---|---|---|---|")
    for row in result["rows"]:
        ratio = row["new_us"] / row["old_us"] if row["old_us"] else float("nan")
        cells = [row["kind"], row["width"], row["bs"], row["old_us"], row["new_us"], f"{ratio:.2f}"]
        print("| " + " | ".join(str(cell) for cell in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
