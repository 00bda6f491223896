"""Summary statistics for lists of measurements (mean, median, percentiles), None-safe."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values, q in [0, 100]."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def describe(values: Iterable[float | None]) -> dict[str, Any] | None:
    """{n, mean, median, p10, p90, min, max} over the values that are not None; None if there are none."""
    clean = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    if not clean:
        return None
    return {
        "n": len(clean),
        "mean": statistics.fmean(clean),
        "median": statistics.median(clean),
        "p10": percentile(clean, 10),
        "p90": percentile(clean, 90),
        "min": clean[0],
        "max": clean[-1],
    }
