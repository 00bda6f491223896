"""Files that the patch series creates, read straight from patches/ so tests exercise the real patch text.

A module such as sglang/srt/speculative/ddtree_utils.py exists only as a new-file diff in the series
(`--- /dev/null`, `+++ b/PATH`). `new_file_text` finds the patch whose `files` list the path, takes that
file's single hunk and returns its '+' lines; `import_new_module` loads the text as a standalone module
(it must import only what the test environment has, e.g. torch and the standard library).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
SERIES = REPO_ROOT / "patches" / "series.yaml"


def _patch_for(path: str, series: Path) -> Path:
    data = yaml.safe_load(series.read_text(encoding="utf-8")) or {}
    for patch in data.get("patches") or []:
        if any(spec.get("path") == path for spec in patch.get("files") or []):
            return series.parent / patch["diff"]
    raise LookupError(f"{series}: no patch lists {path} in its files")


def new_file_text(path: str, series: Path = SERIES) -> str:
    """The content of `path` as created by a `--- /dev/null` diff in the series."""
    diff = _patch_for(path, series)
    lines = diff.read_text(encoding="utf-8").splitlines(keepends=True)
    body: list[str] = []
    inside = False
    for number, line in enumerate(lines):
        if line.startswith("--- "):
            following = lines[number + 1] if number + 1 < len(lines) else ""
            inside = following.rstrip("\n") == f"+++ b/{path}"
            if inside and line.rstrip("\n") != "--- /dev/null":
                raise ValueError(f"{diff}: {path} is not created by this patch (--- is not /dev/null)")
            continue
        if not inside or line.startswith(("+++ ", "@@")):
            continue
        if line.startswith("+"):
            body.append(line[1:])
        elif line.startswith("\\"):  # "\ No newline at end of file"
            if body:
                body[-1] = body[-1].rstrip("\n")
        elif line.startswith("diff "):
            inside = False
        else:
            raise ValueError(f"{diff}: unexpected line in a new-file hunk for {path}: {line!r}")
    if not body:
        raise ValueError(f"{diff}: no content for {path}")
    return "".join(body)


def import_new_module(path: str, name: str | None = None, series: Path = SERIES) -> ModuleType:
    """Import the created file as a module (cached in sys.modules under `name`)."""
    name = name or "series_" + Path(path).stem
    if name in sys.modules:
        return sys.modules[name]
    source = new_file_text(path, series)
    spec = importlib.util.spec_from_loader(name, loader=None, origin=f"{series.parent}:{path}")
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = f"<series:{path}>"
    sys.modules[name] = module
    try:
        exec(compile(source, f"<series:{path}>", "exec"), module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return module
