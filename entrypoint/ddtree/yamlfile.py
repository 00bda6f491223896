"""Read one YAML file for a schema check: a missing file or bad YAML is a one-line UserError naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ddtree.errors import UserError


def load_yaml(path: Path, missing: str = "not found") -> Any:
    """The parsed document of `path`. `missing` follows "PATH: " when the file is absent (say what it is
    for); a parse error keeps PyYAML's position and reason, folded onto one line."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise UserError(f"{path}: {missing}") from exc
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
