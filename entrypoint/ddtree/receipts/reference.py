"""Reference results (env/reference/*.yaml): the original runs' figures as checked data.

`ddtree bench` compares a new run with these; `ddtree-build import` writes them from a reproduction
package's results. One schema for both, checked here.

Public API:
    default_reference_path() -> Path   results.yaml of the env/ folder the target profiles come from
    load_reference(path) -> Reference
    validate_reference(data, source) -> Reference
    Range(min, max).contains(value) -> bool
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.targets import default_targets_dir
from ddtree.yamlfile import load_yaml

SCHEMA_VERSION = 1
_RANGE_KEYS = ("output_tokens_per_s", "aggregate_output_tokens_per_s", "acceptance_length")
_RESULT_KEYS = {"id", "description", "algorithm", "concurrency", "context", "source_file", *_RANGE_KEYS}


@dataclass(frozen=True)
class Range:
    min: float
    max: float

    def contains(self, value: float) -> bool:
        return self.min <= value <= self.max


@dataclass(frozen=True)
class Result:
    id: str
    algorithm: str
    description: str = ""
    concurrency: int | None = None
    context: int | str | None = None
    figures: dict[str, Range] = field(default_factory=dict)  # keys from _RANGE_KEYS


@dataclass(frozen=True)
class Reference:
    path: Path
    source: str
    results: dict[str, Result]
    sweep_context_tokens: tuple[int, ...] = ()
    sweep_concurrency: tuple[int, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)


def _figure(value: Any) -> bool:
    """A measured figure: a finite number >= 0 (YAML's .inf and .nan are not measurements)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _range(source: str, key: str, value: Any) -> Range:
    if _figure(value):
        return Range(float(value), float(value))
    if (
        isinstance(value, dict)
        and set(value) == {"min", "max"}
        and all(_figure(v) for v in value.values())
        and value["min"] <= value["max"]
    ):
        return Range(float(value["min"]), float(value["max"]))
    raise UserError(
        f"{source}: {key}: expected a finite number >= 0 or {{min: N, max: N}} with min <= max, got {value!r}"
    )


def _ints(source: str, key: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and v > 0 for v in value):
        raise UserError(f"{source}: {key}: expected a list of positive integers, got {value!r}")
    return tuple(value)


def validate_reference(data: Any, source: Path | str) -> Reference:
    """Schema-check parsed YAML; errors are one line naming the file and key."""
    where = str(source)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
        raise UserError(f"{where}: schema: must be {SCHEMA_VERSION}")
    entries = data.get("results")
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{where}: results: expected a non-empty list")
    results: dict[str, Result] = {}
    for index, entry in enumerate(entries):
        key = f"results[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise UserError(f"{where}: {key}: expected a mapping with an 'id'")
        unknown = sorted(set(entry) - _RESULT_KEYS)
        if unknown:
            raise UserError(f"{where}: {key}.{unknown[0]}: unknown key")
        if entry["id"] in results:
            raise UserError(f"{where}: {key}.id: duplicate id {entry['id']!r}")
        concurrency = entry.get("concurrency")
        if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
            raise UserError(f"{where}: {key}.concurrency: expected a positive integer or null")
        figures = {k: _range(where, f"{key}.{k}", entry[k]) for k in _RANGE_KEYS if k in entry}
        if not figures:
            raise UserError(f"{where}: {key}: no figure (one of {', '.join(_RANGE_KEYS)})")
        results[entry["id"]] = Result(
            id=entry["id"],
            algorithm=str(entry.get("algorithm") or "unknown"),
            description=str(entry.get("description") or ""),
            concurrency=concurrency,
            context=entry.get("context"),
            figures=figures,
        )
    sweep = data.get("sweep") or {}
    return Reference(
        path=Path(source),
        source=str(data.get("source") or ""),
        results=results,
        sweep_context_tokens=_ints(where, "sweep.context_tokens", sweep.get("context_tokens", [])),
        sweep_concurrency=_ints(where, "sweep.concurrency", sweep.get("concurrency", [])),
        settings=dict(data.get("settings") or {}),
    )


def default_reference_path() -> Path:
    """env/reference/results.yaml beside the target profiles ($DDTREE_ENV_DIR, the image's
    /opt/ddtree/env, or the checkout): the env/ folder is chosen once, as for profiles and the weights
    lock, so a missing file there is an error naming it, never another environment's figures."""
    return default_targets_dir().parent / "reference" / "results.yaml"


def load_reference(path: Path) -> Reference:
    path = Path(path)
    return validate_reference(load_yaml(path), path)
