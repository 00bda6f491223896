"""step_graphs.capture_for_target (patch 0012-ddtree-step-graph), the one path by which the DFLASH/DDTREE step
stretches (KV append, chain stage, tree stage) are captured or left eager, on CPU.

The module is the one the real patch series writes into the pinned sglang (the patched CPU tree of
test_ddtree_sglang.py), loaded alone: it needs only torch. Stand-ins, where CUDA cannot run here: the target's
model runner is a namespace (server_args.disable_cuda_graph, graph_runner.capture_bs); past the common
refusals, step_graphs_refusal answers None (as on a CUDA device with the switch on, its default) and
torch.cuda.graph_pool_handle hands out a placeholder, so that capture_all reaches its capture, which then
fails on the CPU build of torch (no CUDA stream) as a failing capture fails on the device. A capture that
succeeds is
tests/gpu/test_tree_stage_graph_gpu.py's; the workers' own refusals are tests/unit/test_dflash_step_host.py's.
"""

from __future__ import annotations

import logging
import types

import pytest
import torch

from tests.unit.patched_module import loaded_alone
from tests.unit.test_ddtree_sglang import sglang_cpu_path  # noqa: F401  (fixture)

MODULE = "step_graphs_under_test"
NAME = "DFLASH test stretch"


@pytest.fixture(scope="module")
def step_graphs(sglang_cpu_path: str) -> types.ModuleType:  # noqa: F811
    with loaded_alone(sglang_cpu_path, "sglang/srt/speculative/step_graphs.py", MODULE) as module:
        yield module


def _target(*, capture_bs=(1, 2), disable_cuda_graph=False, graph_runner=True) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        server_args=types.SimpleNamespace(disable_cuda_graph=disable_cuda_graph),
        graph_runner=types.SimpleNamespace(capture_bs=list(capture_bs)) if graph_runner else None,
    )


class _Stretch:
    """The stretch's parts, each recording that it was asked."""

    def __init__(self, own_reason: str | None = None):
        self.own_reason = own_reason
        self.asked: list[str] = []

    def fn(self, hidden: torch.Tensor) -> torch.Tensor:
        self.asked.append("fn")
        return hidden * 2

    def inputs(self) -> list:
        self.asked.append("inputs")
        return [self.module.GraphInput(2, (4,), torch.float32)]

    def checks(self) -> str | None:
        self.asked.append("checks")
        return self.own_reason


def _capture(step_graphs, stretch: _Stretch, caplog, *, log=True, device="cuda", tp_size=1, **target):
    stretch.module = step_graphs
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=MODULE):
        graphs, reason = step_graphs.capture_for_target(
            NAME,
            stretch.fn,
            stretch.inputs,
            target_runner=_target(**target),
            device=torch.device(device),
            tp_size=tp_size,
            checks=stretch.checks,
            log=log,
        )
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == MODULE]
    return graphs, reason, logged


@pytest.mark.parametrize(
    ("switch", "kwargs", "reason"),
    [
        ("0", {}, "SGLANG_DFLASH_STEP_GRAPHS=0 (switched off)"),
        (None, {"device": "cpu"}, "the device is cpu, not CUDA"),  # unset is on: the next condition refuses
        ("1", {"disable_cuda_graph": True}, "CUDA graphs are disabled for the server"),
        ("1", {"graph_runner": False}, "CUDA graphs are disabled for the server"),
        ("1", {"device": "cpu"}, "the device is cpu, not CUDA"),
        ("1", {"tp_size": 2}, "tensor parallel size 2 (captured with the TP collectives only with "),
    ],
)
def test_a_common_refusal_asks_nothing_of_the_stretch_and_is_logged_once(
    step_graphs, caplog, monkeypatch, switch, kwargs, reason
) -> None:
    monkeypatch.delenv("SGLANG_DFLASH_STEP_GRAPHS_TP", raising=False)
    if switch is None:
        monkeypatch.delenv("SGLANG_DFLASH_STEP_GRAPHS", raising=False)
    else:
        monkeypatch.setenv("SGLANG_DFLASH_STEP_GRAPHS", switch)
    stretch = _Stretch()
    graphs, got, logged = _capture(step_graphs, stretch, caplog, **kwargs)
    assert graphs is None and got.startswith(reason), got
    assert stretch.asked == [], "a refused stretch's own checks and inputs are not asked"
    assert logged == [("INFO", f"{NAME} runs eagerly: {got}")]


def test_the_stretchs_own_reason_comes_after_the_common_ones_and_only_rank_0_logs(
    step_graphs, caplog, monkeypatch
) -> None:
    monkeypatch.setenv("SGLANG_DFLASH_STEP_GRAPHS", "1")
    stretch = _Stretch("SGLANG_DFLASH_FAST_STEP=0")
    graphs, reason, logged = _capture(step_graphs, stretch, caplog)
    assert (graphs, reason) == (None, "SGLANG_DFLASH_FAST_STEP=0")
    assert stretch.asked == ["checks"], "no inputs are built for a refused stretch"
    assert logged == [("INFO", f"{NAME} runs eagerly: SGLANG_DFLASH_FAST_STEP=0")]
    quiet = _Stretch("SGLANG_DFLASH_FAST_STEP=0")
    assert _capture(step_graphs, quiet, caplog, log=False) == (None, "SGLANG_DFLASH_FAST_STEP=0", [])


def test_no_batch_sizes_leaves_the_stretch_eager_and_says_so(step_graphs, caplog, monkeypatch) -> None:
    monkeypatch.setattr(step_graphs, "step_graphs_refusal", lambda **_: None)  # as on CUDA, switched on
    stretch = _Stretch()
    graphs, reason, logged = _capture(step_graphs, stretch, caplog, device="cpu", capture_bs=())
    assert (graphs, reason) == (None, "no batch sizes")
    assert stretch.asked == ["checks", "inputs"], "nothing is run without a batch size"
    assert logged == [("INFO", f"{NAME} runs eagerly: no batch sizes")]


def test_a_failing_capture_leaves_none_and_is_warned_once(step_graphs, caplog, monkeypatch) -> None:
    monkeypatch.setattr(step_graphs, "step_graphs_refusal", lambda **_: None)  # as on CUDA, switched on
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())  # the CPU build has no pools
    stretch = _Stretch()
    graphs, reason, logged = _capture(step_graphs, stretch, caplog, device="cpu", capture_bs=(4, 1))
    assert graphs is None
    assert reason.startswith("capture failed (RuntimeError: "), reason
    failure = reason.removeprefix("capture failed (").removesuffix(")")
    assert logged == [("WARNING", f"{NAME}: CUDA graph capture failed ({failure}); it runs eagerly.")]


@pytest.mark.parametrize(
    ("target", "switch", "expected"),
    [
        ((1, 2, 4, 8, 16, 24, 32, 48, 64), None, list(range(1, 65))),  # the served profile's sizes
        ((32, 16, 8, 4, 2, 1), "1", list(range(1, 33))),
        ((1, 2, 4, 8, 16, 32, 64, 96, 128), "1", [*range(1, 65), 96, 128]),  # the target's above 64
        ((1, 2, 4, 8, 16, 24, 32), "0", [1, 2, 4, 8, 16, 24, 32]),  # switched off: the target's only
        ((), None, []),
    ],
)
def test_the_stretches_take_every_batch_size_the_target_can_pad_to(
    step_graphs, monkeypatch, target, switch, expected
) -> None:
    """A stretch replays only at a batch size it captured while the target's runner pads to its next one: at
    32 requests whose ends spread (mean batch 24 on the H200, 2026-12-03e) the steps at sizes between the
    target's ran every stretch eagerly."""
    if switch is None:
        monkeypatch.delenv("SGLANG_DFLASH_STEP_GRAPHS_EVERY_BS", raising=False)
    else:
        monkeypatch.setenv("SGLANG_DFLASH_STEP_GRAPHS_EVERY_BS", switch)
    assert step_graphs.step_graph_batch_sizes(list(target)) == expected


def test_a_bad_every_bs_switch_is_refused_by_name(step_graphs, monkeypatch) -> None:
    monkeypatch.setenv("SGLANG_DFLASH_STEP_GRAPHS_EVERY_BS", "yes")
    with pytest.raises(ValueError, match=r"^SGLANG_DFLASH_STEP_GRAPHS_EVERY_BS='yes': use 1 .* or 0"):
        step_graphs.step_graph_batch_sizes([1, 2])


def test_capture_for_target_captures_the_step_sizes_largest_first(step_graphs, caplog, monkeypatch) -> None:
    """Through capture_for_target: the graphs are asked for every size up to the target's largest (a stand-in
    capture records them: CPU torch cannot capture) and the log names them."""
    monkeypatch.setattr(step_graphs, "step_graphs_refusal", lambda **_: None)  # as on CUDA, switched on
    monkeypatch.delenv("SGLANG_DFLASH_STEP_GRAPHS_EVERY_BS", raising=False)
    captured: list[int] = []

    def capture(self, bs, pool, stream):
        captured.append(bs)
        return object()

    monkeypatch.setattr(step_graphs.BatchGraphs, "_capture", capture)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())
    stretch = _Stretch()
    graphs, reason, logged = _capture(step_graphs, stretch, caplog, device="cpu", capture_bs=(1, 2, 4, 8))
    assert reason is None and captured == [8, 7, 6, 5, 4, 3, 2, 1]
    assert logged == [("INFO", f"{NAME} captured for batch sizes [1, 2, 3, 4, 5, 6, 7, 8]")]
    # a batch of 6 now replays (before: only 1, 2, 4, 8); one above the target's largest still cannot
    assert graphs.fits(6, [torch.zeros(12, 4)]) and not graphs.fits(9, [torch.zeros(12, 4)])
