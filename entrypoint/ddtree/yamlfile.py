"""Read one YAML file for a schema check: a missing file or bad YAML is a one-line UserError naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ddtree.errors import UserError
from ddtree.fsutil import read_text
from ddtree.jsontext import MAX_DEPTH, depth


def load_yaml(path: Path, missing: str = "not found") -> Any:
    """The parsed document of `path`. `missing` follows "PATH: " when the file is absent (say what it is
    for); a parse error keeps PyYAML's position and reason, folded onto one line."""
    text = read_text(Path(path), missing)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
    except RecursionError as exc:  # PyYAML's parser recurses once per nesting level
        raise UserError(
            f"{path}: YAML nested deeper than {MAX_DEPTH} levels; not a file of this project"
        ) from exc
    if depth(data) > MAX_DEPTH:
        raise UserError(f"{path}: YAML nested deeper than {MAX_DEPTH} levels; not a file of this project")
    return data
