"""Patch dflash-overlap-default: SGLANG_DFLASH_OVERLAP unset (or "auto") turns overlap scheduling (the spec-v2
step) on for DFLASH/DDTREE where it passed the smoke and the stresses on a GPU (CUDA, TP 1), and keeps the v1
step elsewhere with one line naming why; "0" and "1" keep their meaning; other values are refused.

The module is the one the real patch series writes into the pinned sglang (the patched CPU tree of
test_ddtree_sglang.py), loaded alone: it needs only the standard library. The server arguments are stand-ins
(a namespace with the fields the decision reads), because a real ServerArgs for DFLASH validates a drafter
checkpoint and a CUDA device first; the real hook calling `settle_overlap` is covered by
tests/unit/test_dflash_overlap.py's servers (on this CPU the default keeps the v1 step: `--device cpu`).
"""

from __future__ import annotations

import logging
import types

import pytest

from tests.unit.patched_module import loaded_alone
from tests.unit.test_ddtree_sglang import sglang_cpu_path  # noqa: F401  (fixture)

MODULE = "dflash_overlap_under_test"
ENV = "SGLANG_DFLASH_OVERLAP"


@pytest.fixture(scope="module")
def overlap(sglang_cpu_path: str) -> types.ModuleType:  # noqa: F811
    with loaded_alone(sglang_cpu_path, "sglang/srt/speculative/dflash_overlap.py", MODULE) as module:
        yield module


def _args(**overrides) -> types.SimpleNamespace:
    """The fields settle_overlap and dflash_overlap_active read, as a one-GPU CUDA DDTREE server has them."""
    fields = dict(
        speculative_algorithm="DDTREE",
        disable_overlap_schedule=False,
        page_size=1,
        enable_dp_attention=False,
        pp_size=1,
        disaggregation_mode="null",
        enable_pdmux=False,
        device="cuda",
        tp_size=1,
    )
    fields.update(overrides)
    return types.SimpleNamespace(**fields)


def _settle(overlap: types.ModuleType, monkeypatch, value: str | None, args: types.SimpleNamespace) -> bool:
    """settle_overlap under the switch value (None: unset) in a fresh read of it; True when spec v2 runs."""
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    overlap.overlap_requested.cache_clear()
    try:
        overlap.settle_overlap(args)
        return overlap.dflash_overlap_active(args)
    finally:
        overlap.overlap_requested.cache_clear()


@pytest.mark.parametrize("value", [None, "", "auto", "AUTO", " auto "])
def test_unset_or_auto_runs_overlap_on_one_cuda_gpu(overlap, monkeypatch, caplog, value) -> None:
    args = _args()
    with caplog.at_level(logging.INFO, logger=MODULE):
        assert _settle(overlap, monkeypatch, value, args) is True
    assert args.disable_overlap_schedule is False
    assert "the default at TP 1" in caplog.text and f"{ENV}=0 for the v1 step" in caplog.text


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (
            {"tp_size": 8},
            "--tp 8: a TP > 1 server has not run under overlap yet (set SGLANG_DFLASH_OVERLAP=1",
        ),
        ({"tp_size": 2}, "--tp 2: a TP > 1 server has not run under overlap yet"),
        ({"device": "cpu"}, "--device cpu: the v2 step writes the draft KV with the CUDA fused kernel"),
        ({"page_size": 64}, "--page-size 64"),
        ({"enable_dp_attention": True}, "--enable-dp-attention"),
        ({"disaggregation_mode": "decode"}, "--disaggregation-mode decode"),
    ],
)
def test_unset_keeps_v1_where_overlap_has_not_run_and_says_why(
    overlap, monkeypatch, caplog, overrides, reason
) -> None:
    args = _args(**overrides)
    with caplog.at_level(logging.INFO, logger=MODULE):
        assert _settle(overlap, monkeypatch, None, args) is False
    assert args.disable_overlap_schedule is True
    lines = [r.getMessage() for r in caplog.records if "v1 step" in r.getMessage()]
    assert len(lines) == 1 and reason in lines[0], caplog.text
    assert all(r.levelno == logging.INFO for r in caplog.records)  # the default's choice is no warning


def test_unset_respects_disable_overlap_schedule(overlap, monkeypatch) -> None:
    args = _args(disable_overlap_schedule=True)
    assert _settle(overlap, monkeypatch, None, args) is False
    assert args.disable_overlap_schedule is True


def test_zero_is_the_v1_step_everywhere(overlap, monkeypatch, caplog) -> None:
    args = _args()
    with caplog.at_level(logging.INFO, logger=MODULE):
        assert _settle(overlap, monkeypatch, "0", args) is False
    assert args.disable_overlap_schedule is True
    assert "Overlap scheduler is disabled when using DFLASH" in caplog.text  # SGLang's own line, as before


def test_one_turns_overlap_on_at_any_tp(overlap, monkeypatch) -> None:
    args = _args(tp_size=8)  # the explicit switch is the user's call where the default holds back
    assert _settle(overlap, monkeypatch, "1", args) is True
    assert args.disable_overlap_schedule is False


def test_the_default_leaves_other_algorithms_alone(overlap, monkeypatch) -> None:
    args = _args(speculative_algorithm="EAGLE")
    _settle(overlap, monkeypatch, None, args)
    assert overlap.dflash_overlap_active(args) is False


@pytest.mark.parametrize("value", ["yes", "2", "on", "true"])
def test_other_values_are_refused_by_name(overlap, monkeypatch, value) -> None:
    with pytest.raises(ValueError, match=rf"{ENV}='{value}': use 1 .*, 0 \(off\) or auto"):
        _settle(overlap, monkeypatch, value, _args())


def test_overlap_requested_reads_unset_as_auto(overlap, monkeypatch) -> None:
    for value, expected in ((None, True), ("auto", True), ("1", True), ("0", False), (" 0 ", False)):
        if value is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, value)
        overlap.overlap_requested.cache_clear()
        assert overlap.overlap_requested() is expected, value
    overlap.overlap_requested.cache_clear()
