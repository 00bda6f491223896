"""Read one YAML file for a schema check: a missing file or bad YAML is a one-line UserError naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ddtree.errors import UserError
from ddtree.fsutil import read_text
from ddtree.jsontext import MAX_DEPTH, depth


def parse_error_reason(exc: yaml.YAMLError) -> str:
    """PyYAML's reason and position without its snippet of the text: the line may hold a secret (an
    `api-key:` in a --config file), and an error message must not show it."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())  # a ReaderError: a bad character and its offset, no text
    parts = []
    if exc.context:
        where = f" (from line {exc.context_mark.line + 1})" if exc.context_mark else ""
        parts.append(f"{exc.context}{where}")
    if exc.problem:
        mark = exc.problem_mark
        parts.append(exc.problem + (f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""))
    return " ".join("; ".join(parts).split()) or type(exc).__name__


def load_yaml(path: Path, missing: str = "not found") -> Any:
    """The parsed document of `path`. `missing` follows "PATH: " when the file is absent (say what it is
    for); a parse error keeps PyYAML's position and reason, folded onto one line."""
    text = read_text(Path(path), missing)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({parse_error_reason(exc)})") from exc
    except RecursionError as exc:  # PyYAML's parser recurses once per nesting level
        raise UserError(
            f"{path}: YAML nested deeper than {MAX_DEPTH} levels; not a file of this project"
        ) from exc
    if depth(data) > MAX_DEPTH:
        raise UserError(f"{path}: YAML nested deeper than {MAX_DEPTH} levels; not a file of this project")
    return data
