"""Run a probe script of tests/unit in the patched CPU SGLang environment (built on first use, as the unit
tests build it) and return the JSON it printed: the CPU micro-benchmarks share this one way in."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(probe: Path, marker: str, *args: str) -> dict:
    """The probe's JSON after `marker`; one thread for torch's own kernels, so timings do not wander."""
    sys.path[:0] = [str(REPO), str(REPO / "build"), str(REPO / "entrypoint")]
    from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path

    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return run_probe(probe, marker, sglang_cpu_path.__wrapped__(), *args, env=env)
