"""Numbers people type: parsed once, range-checked (finite, within sensible bounds), refused in one line.

Every numeric setting goes through here, whether it comes from an environment variable, a server flag on
the final command line or a CLI option, so `inf`, `nan`, `-1`, `0` or `abc` never reach arithmetic or a
traceback. `parse` raises UserError (the entrypoint's one-line errors); `arg_type` is the same rule as an
argparse `type=` (argparse then prints usage and the reason, exit 2).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass

from ddtree.errors import UserError

Number = int | float


@dataclass(frozen=True)
class Bounds:
    """What a setting may be: an int or a float, at least `low` (or above it, when `low_open`), at most
    `high`. Floats must be finite whatever the bounds."""

    kind: type[int] | type[float]
    low: Number
    high: Number
    low_open: bool = False

    def describe(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        low = f"> {self.low}" if self.low_open else f">= {self.low}"
        return f"{noun} {low} and <= {self.high}"

    def check(self, text: str) -> Number | None:
        """The value, or None when `text` is not one this setting accepts."""
        try:
            value: Number = int(text.strip()) if self.kind is int else float(text.strip())
        except ValueError:
            return None
        if not math.isfinite(value):
            return None
        too_low = value <= self.low if self.low_open else value < self.low
        return None if too_low or value > self.high else value


def parse(text: str, name: str, bounds: Bounds, fix: str = "") -> Number:
    """`text` as a number within `bounds`; else one UserError naming the setting, the value and the fix."""
    value = bounds.check(text)
    if value is None:
        hint = f": {fix}" if fix else ""
        raise UserError(f"{name} {text!r} is not {bounds.describe()}{hint}", exit_code=2)
    return value


def arg_type(bounds: Bounds) -> Callable[[str], Number]:
    """An argparse `type=` with the same rule: `--tolerance inf` is refused like `--tolerance abc`."""

    def convert(text: str) -> Number:
        value = bounds.check(text)
        if value is None:
            raise argparse.ArgumentTypeError(f"{text!r} is not {bounds.describe()}")
        return value

    convert.__name__ = "integer" if bounds.kind is int else "number"
    return convert


# Shared bounds, named by what they measure.
COUNT = Bounds(int, 1, 1_000_000)  # requests, rounds, problems, samples, tokens
ZERO_OR_MORE = Bounds(int, 0, 1_000_000)  # warm-up rounds
SECONDS = Bounds(float, 0, 7 * 24 * 3600, low_open=True)
FRACTION = Bounds(float, 0, 1)  # relative tolerances, pass@1 drops
TEMPERATURE = Bounds(float, 0, 100)
MEGABYTES = Bounds(int, 16, 1 << 24)
WORKERS = Bounds(int, 1, 4096)
# DFlash blocks and DDTree verify rows stay within SGLang's 64 verify tokens per request.
BLOCK_SIZE = Bounds(int, 1, 64)
# Tensor-parallel size: GPUs per server (8 as measured); SGLang's --tp takes the same range.
TP_SIZE = Bounds(int, 1, 64)
