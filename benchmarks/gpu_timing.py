"""CUDA-event timing and graph capture shared by the GPU benchmarks and GPU tests.

time_eager / time_graph warm fn up first, then time `iters` calls between two CUDA events (microseconds per
call): time_eager launches fn from Python each time (host launch cost included), time_graph captures fn once
in a CUDA graph on a side stream and times its replays (the served, graph-captured cost). capture_without_sync
is the GPU tests' check that fn may sit in a served CUDA graph: no host sync, captured, replayable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def _events_us(call: Callable[[], object], iters: int) -> float:
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def time_eager(fn: Callable[[], object], iters: int = 50) -> float:
    for _ in range(3):
        fn()
    return _events_us(fn, iters)


def _capture(fn: Callable[[], T], warm_ups: int) -> tuple[torch.cuda.CUDAGraph, T]:
    """fn warmed on a side stream (as SGLang's graph runner does), then captured; (graph, fn's outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warm_ups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    return graph, outputs


def capture_without_sync(fn: Callable[[], T]) -> tuple[torch.cuda.CUDAGraph, T]:
    """fn run once to compile, once more with torch's sync debug mode at "error" (a .item() or a host copy
    raises), then captured in a CUDA graph: (graph, the captured call's outputs, refreshed by each replay)."""
    fn()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return _capture(fn, warm_ups=1)


def time_graph(fn: Callable[[], object], iters: int = 50) -> float:
    graph, _ = _capture(fn, warm_ups=3)
    for _ in range(5):
        graph.replay()
    return _events_us(graph.replay, iters)
