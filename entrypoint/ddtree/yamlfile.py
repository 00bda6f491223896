"""Read one YAML file for a schema check: a missing file or bad YAML is a one-line UserError naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ddtree.errors import UserError
from ddtree.fsutil import read_text


def load_yaml(path: Path, missing: str = "not found") -> Any:
    """The parsed document of `path`. `missing` follows "PATH: " when the file is absent (say what it is
    for); a parse error keeps PyYAML's position and reason, folded onto one line."""
    text = read_text(Path(path), missing)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
