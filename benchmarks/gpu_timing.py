"""CUDA-event timing shared by the GPU benchmarks and GPU tests (microseconds per call).

Each function warms fn up first, then times `iters` calls between two CUDA events: time_eager launches fn
from Python each time (host launch cost included), time_graph captures fn once in a CUDA graph on a side
stream and times its replays (the served, graph-captured cost).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


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


def time_graph(fn: Callable[[], object], iters: int = 50) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    return _events_us(graph.replay, iters)
