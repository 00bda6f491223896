"""Patch dflash-overlap-prepare-trim (issue 25: the host time of the v2 DFLASH/DDTREE step), checked in the
real patched sglang on CPU by tests/unit/dflash_prepare_probe.py against the code it replaced:
- step_graphs.InputCopier (every step graph's input copies, v1's and v2's): the same buffer contents as a
  slice and a copy_ per input, fewer aten ops (one `_foreach_copy_` per dtype), less host time;
- CudaGraphBufferRegistry.fill_from (every CUDA graph runner's replay_prepare): with the batch at its
  captured size the per-slot padding walk is skipped, the buffers as before; padded, it still runs.
The figures are printed (`-s`); patches/OVERLAP.md summarises them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("dflash_prepare_probe.py")


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return run_probe(PROBE, "DFLASH-PREPARE-PROBE", sglang_cpu_path, timeout=600, env=env)


def _launches(ops: dict) -> int:
    return sum(n for name, n in ops.items() if name not in ("slice", "empty"))


def test_input_copies_fill_the_buffers_as_before(facts: dict) -> None:
    for name, stage in facts["copies"]["stages"].items():
        assert stage["same"], name
    assert facts["copies"]["across_batch_sizes_same"], "a kept view must match its row count"


def test_input_copies_dispatch_one_foreach_per_dtype(facts: dict, capsys: pytest.CaptureFixture) -> None:
    """block (3 int64) -> 1 op, tree (bf16 + 2 int64) -> 2, commit (6 int64) -> 1, append (bf16 + 4 int64)
    -> 2, against 3, 3, 6, 5 copies before; no slices at replay (the views are kept). An argument of another
    dtype than its buffer falls back to one copy_ per input."""
    stages = facts["copies"]["stages"]
    with capsys.disabled():
        for name, s in stages.items():
            print(
                f"\n{name}: before {s['ops_per_input']} {s['us_per_input']} us, "
                f"after {s['ops_grouped']} {s['us_grouped']} us (CPU)"
            )
    want = {"block": 1, "tree": 2, "commit": 1, "append": 2}
    for bs in (1, 4):
        for name, count in want.items():
            stage = stages[f"{name}_bs{bs}"]
            assert _launches(stage["ops_grouped"]) == count, (name, stage)
            assert "slice" not in stage["ops_grouped"], (name, stage)
        mixed = stages[f"mixed_bs{bs}"]["ops_grouped"]
        assert mixed.get("copy_") == 2 and "_foreach_copy_" not in mixed, mixed
    before = sum(
        _launches(s["ops_per_input"]) for k, s in stages.items() if k.endswith("bs1") and "mixed" not in k
    )
    after = sum(
        _launches(s["ops_grouped"]) for k, s in stages.items() if k.endswith("bs1") and "mixed" not in k
    )
    assert (before, after) == (17, 6), (before, after)


def test_fill_from_skips_the_padding_walk_only_when_unpadded(facts: dict) -> None:
    fill = facts["fill"]
    full, padded = fill["raw4_padded4"], fill["raw2_padded4"]
    assert all(full["buffers_as_expected"].values()), full
    assert all(padded["buffers_as_expected"].values()), padded
    assert full["reset_calls"] == 0, "a batch at its captured size has nothing to reset"
    assert padded["reset_calls"] == 5, "a padded batch still resets each slot's tail"
