"""Patch spec-v1-step-indices: the v1 verify's keep/free slot indices built with numpy equal, value for value
and in order, what the per-request loop they replace built (tests/unit/step_indices_probe.py, the real
patched SGLang on CPU; random batches with cut paths, empty paths, zero counts, empty batches)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("step_indices_probe.py")


def test_numpy_indices_equal_the_loop_on_random_batches(sglang_cpu_path: str) -> None:  # noqa: F811
    got = run_probe(PROBE, "STEP-INDICES-CHECK", sglang_cpu_path, "check", "11", "400", timeout=600)
    assert got["cases"] == 400 and got["largest_bs"] == 33
    # both ways of building them (a loop below PATH/PREFIX_NUMPY_MIN_BS, numpy from there) are compared
    assert 100 < got["path_numpy"] < 300 and 50 < got["prefix_numpy"] < 300
    assert got["differ"] == 0, got["first"]
    assert got["dtypes"] == ["torch.int64"]


def test_the_reference_loop_gives_the_hand_computed_indices() -> None:
    """The reference the check compares with (the replaced loop, written out in the probe) on batches
    worked out by hand: request 0's path 3 -> 0 keeps slots 0, 4, 1 (node i in slot i + 1); a zero count
    keeps none."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("step_indices_probe", PROBE)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    kept, freed = probe.reference_path([3, 1], [[3, 0], []], 5)
    assert kept == [0, 4, 1, 5] and freed == [2, 3, 6, 7, 8, 9]
    kept, freed = probe.reference_prefix([2, 0, 5], 5)
    assert kept == [0, 1, 10, 11, 12, 13, 14] and freed == [2, 3, 4, 5, 6, 7, 8, 9]
