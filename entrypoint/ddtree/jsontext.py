"""JSON from outside (servers, receipts, weights configs): parsed with a depth limit, one-line errors.

`json.loads` recurses once per nesting level; 200,000 `[` from a hostile server end in RecursionError,
and a document a few hundred levels deep parses but breaks whatever walks it later (digests, reports).
Nothing this project reads nests deeper than a dozen levels, so MAX_DEPTH refuses the rest up front.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.fsutil import read_text

MAX_DEPTH = 64


class JsonProblem(ValueError):
    """Why a text is not acceptable JSON, in a few words (the caller names where it came from);
    `brief` is the words without the parser's detail (for messages that show the text instead)."""

    def __init__(self, message: str, brief: str | None = None) -> None:
        super().__init__(message)
        self.brief = brief or message


def depth(value: Any) -> int:
    """Nesting depth of a parsed value (a scalar is 0), walked without recursion. Each container is walked
    once: YAML aliases share one object between many places (an alias bomb would otherwise be walked
    exponentially often)."""
    deepest = 0
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if not isinstance(item, (dict, list)) or id(item) in seen:
            continue
        seen.add(id(item))
        deepest = max(deepest, level + 1)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse(text: str | bytes, max_depth: int = MAX_DEPTH, object_pairs_hook: Any = None) -> Any:
    """The parsed value; JsonProblem when it is not JSON, not UTF-8, or nested deeper than `max_depth`.
    Bytes are UTF-8 strictly, as Hugging Face and SGLang open their files: a BOM or UTF-16 is refused
    (`json.loads` on bytes would guess the encoding and accept what they refuse)."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = json.loads(text, object_pairs_hook=object_pairs_hook)
    except RecursionError as exc:
        raise JsonProblem(f"JSON nested deeper than {max_depth} levels") from exc
    except UnicodeDecodeError as exc:
        raise JsonProblem(f"not UTF-8 (byte {exc.start})", "not JSON") from exc
    except json.JSONDecodeError as exc:
        raise JsonProblem(
            f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", "not JSON"
        ) from exc
    # Each list or object in the value opened with a bracket in the text, so a text with at most
    # `max_depth` of them cannot nest deeper: the walk (per element, in Python) is needed only past that.
    # A stream event repeating a long `output_ids` has three: walking it per event was O(n^2) a request.
    if _brackets(text) > max_depth and depth(value) > max_depth:
        raise JsonProblem(f"JSON nested deeper than {max_depth} levels")
    return value


def _brackets(text: str) -> int:
    """How many `[` and `{` the text holds (inside strings too): a bound on the parsed value's depth."""
    return text.count("[") + text.count("{")


def loads(text: str | bytes, label: str, fix: str, max_depth: int = MAX_DEPTH) -> Any:
    """`parse`, with a problem as one UserError: `LABEL: PROBLEM; FIX`."""
    try:
        return parse(text, max_depth)
    except JsonProblem as exc:
        raise UserError(f"{label}: {exc}; {fix}") from exc


def load_file(path: Path, fix: str, missing: str = "not found", max_depth: int = MAX_DEPTH) -> Any:
    """A JSON file read through fsutil.read_text (absent, FIFO, not UTF-8: one line naming it)."""
    return loads(read_text(Path(path), missing), str(path), fix, max_depth)
