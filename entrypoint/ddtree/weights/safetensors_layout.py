"""Arithmetic of a safetensors header: every tensor's dtype x shape must equal its byte range.

The safetensors library refuses a file whose header does not add up (a tensor's bytes differ from
dtype size x element count, ranges overlap or leave holes, the data does not start at 0); so does
SGLang's loader, after minutes of reading. The same rules are checked here from the header alone.
"""

from __future__ import annotations

import math
from typing import Any

from ddtree.errors import UserError

# Bits per element of every dtype the safetensors format names (0.8: F4, F6 and F8_E8M0 included).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}


def _short(value: Any, width: int = 60) -> str:
    """A value for a one-line message: its repr, cut short (a header may hold anything)."""
    text = repr(value)
    return text if len(text) <= width else text[:width] + "..."


def tensor_bytes(dtype: str, shape: list[int]) -> int | None:
    """Bytes a tensor of `dtype` and `shape` needs; None when the bits do not fill whole bytes."""
    bits = DTYPE_BITS[dtype] * math.prod(shape)
    return bits // 8 if bits % 8 == 0 else None


def check_layout(header: dict[str, Any], label: str) -> tuple[int, int]:
    """(tensor count, end of data) of a parsed header; one-line UserError naming the shard and tensor.

    `label` names the file in messages (the path, and its link target when it is a link).
    """
    spans: list[tuple[int, int, str]] = []
    metadata = header.get("__metadata__")
    if metadata is None:  # absent or null: what the library reads as "no metadata"
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise UserError(
            f"shard {label} has a corrupt header: __metadata__ is not a map of strings "
            f"({_short(metadata)}); copy it again"
        )
    for name, entry in header.items():
        if name == "__metadata__":
            continue

        def corrupt(problem: str, tensor: str = name) -> UserError:
            return UserError(
                f"shard {label} has a corrupt header: tensor {tensor!r} {problem}; copy it again"
            )

        if not isinstance(entry, dict):
            raise corrupt(f"is {_short(entry)}, not a mapping")
        offsets = entry.get("data_offsets")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in offsets)
            or offsets[0] > offsets[1]
        ):
            raise corrupt(f"has data_offsets {_short(offsets)}")
        dtype, shape = entry.get("dtype"), entry.get("shape")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise corrupt(f"has unknown dtype {_short(dtype)}")
        if not isinstance(shape, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape
        ):
            raise corrupt(f"has shape {_short(shape)}")
        needed = tensor_bytes(dtype, shape)
        if needed is None:
            raise corrupt(f"has {dtype} x {shape}, which does not fill whole bytes")
        if needed != offsets[1] - offsets[0]:
            raise corrupt(
                f"is {dtype} x {shape} = {needed} bytes but data_offsets {offsets} hold "
                f"{offsets[1] - offsets[0]}"
            )
        spans.append((offsets[0], offsets[1], name))
    spans.sort()
    position = 0
    for begin, end, name in spans:
        if begin != position:
            kind = "overlaps the tensor before it" if begin < position else f"leaves a gap at byte {position}"
            raise UserError(
                f"shard {label} has a corrupt header: tensor {name!r} at data_offsets [{begin}, {end}] "
                f"{kind}; copy it again"
            )
        position = end
    return len(spans), position
